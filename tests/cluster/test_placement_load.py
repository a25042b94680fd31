"""Load-aware placement (issue 23), the functions alone: `broker_load`'s score and order,
and `placement.assign_replicas` walking the brokers least loaded first, with Kafka's round
robin (leaders and followers spread, racks distinct) otherwise unchanged; then one real
3-broker cluster where a broker loaded by producers gets no partition of a new topic."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 - fixtures
from yak.cluster.broker_load import SCORE_STEP, BrokerLoad, load_score, preference, read_loads
from yak.cluster.etcd import KeyValue
from yak.cluster.placement import assign_replicas


def load(node: int, *, cpu: float = 0.0, busy: float = 0.0, free: int = 900,
         total: int = 1000) -> BrokerLoad:
    return BrokerLoad(node_id=node, time_ms=0, interval_ms=3000, cpu_percent=cpu,
                      busy_ratio=busy, loop_lag_ms=0.0, bytes_in_per_s=0.0,
                      bytes_out_per_s=0.0, messages_in_per_s=0.0, log_bytes=0,
                      disk_free_bytes=free, disk_total_bytes=total)


def test_score_is_the_busiest_resource() -> None:
    assert load_score(load(1)) == 0.0
    assert load_score(load(1, busy=0.4, cpu=20)) == 0.4
    assert load_score(load(1, busy=0.1, cpu=70)) == 0.7
    assert load_score(load(1, cpu=350)) == 1.0  # several cores: capped
    # The disk counts only once nearly full (brokers sharing a disk stay comparable).
    assert load_score(load(1, free=200)) == 0.0
    assert abs(load_score(load(1, free=50)) - 0.5) < 1e-9
    assert load_score(load(1, free=0)) == 1.0


def test_preference_orders_by_score_steps_then_id() -> None:
    loads = {1: load(1, busy=0.65), 2: load(2, busy=0.05), 3: load(3, busy=0.02),
             4: load(4, cpu=30)}
    # 2 and 3 are in the same step (about idle): by id; 5 has no report: idle.
    assert preference([1, 2, 3, 4, 5], loads) == [2, 3, 5, 4, 1]
    # All about idle: node-id order, which the topic manager takes as "no preference".
    idle = {b: load(b, busy=SCORE_STEP / 3) for b in (1, 2, 3)}
    assert preference([3, 1, 2], idle) == [1, 2, 3]


def test_reports_round_trip_and_unreadable_ones_are_skipped() -> None:
    a = load(7, busy=0.25, cpu=12.5)
    kvs = [KeyValue("/yak/x/broker_loads/7", a.to_json(), 1, 1, 1, 5),
           KeyValue("/yak/x/broker_loads/8", b"{not json", 2, 2, 1, 6),
           KeyValue("/yak/x/broker_loads/9", b'{"node_id": 9}', 3, 3, 1, 7)]
    assert read_loads(kvs) == {7: a}


def test_leaders_go_to_the_least_loaded_brokers_first() -> None:
    brokers = {1: None, 2: None, 3: None, 4: None}
    # Fewer partitions than brokers: only the least loaded lead.
    got = assign_replicas(2, 2, brokers, preferred=[3, 4, 1, 2])
    assert [r[0] for r in got] == [3, 4]
    assert all(len(set(r)) == 2 for r in got)
    # A multiple of the broker count: each broker leads equally often, as before.
    got = assign_replicas(8, 3, brokers, preferred=[4, 2, 3, 1], rng=random.Random(5))
    assert [r[0] for r in got[:4]] == [4, 2, 3, 1]
    assert Counter(r[0] for r in got) == {1: 2, 2: 2, 3: 2, 4: 2}
    assert Counter(b for r in got for b in r) == {1: 6, 2: 6, 3: 6, 4: 6}
    # A remainder goes to the least loaded.
    got = assign_replicas(6, 1, brokers, preferred=[2, 1, 4, 3])
    assert Counter(r[0] for r in got) == {2: 2, 1: 2, 4: 1, 3: 1}


def test_without_a_preference_placement_is_unchanged() -> None:
    brokers = {1: None, 2: None, 3: None}
    for seed in range(5):
        assert (assign_replicas(7, 2, brokers, rng=random.Random(seed))
                == assign_replicas(7, 2, [1, 2, 3], rng=random.Random(seed)))
    assert assign_replicas(3, 1, brokers, fixed_start_index=0) == [[1], [2], [3]]


def test_racks_stay_distinct_with_a_preference() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    got = assign_replicas(6, 3, racks, preferred=[6, 3, 1, 2, 4, 5], rng=random.Random(1))
    assert got[0][0] == 6 and got[1][0] == 3 and got[2][0] == 1
    for replicas in got:
        assert len({racks[b] for b in replicas}) == 3, got
    assert Counter(r[0] for r in got) == {b: 1 for b in racks}


@pytest.mark.slow
def test_a_new_topic_avoids_a_broker_loaded_for_real(cluster_factory, etcd, keys) -> None:  # noqa: F811
    """Three brokers on etcd; broker 2 is kept busy by producers writing to the partition
    it leads. Once its report says so, a new two-partition topic goes to brokers 1 and 3
    (the least loaded), with its leaders there."""
    import threading

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.cluster.test_broker_load import loads
    from tests.waiting import wait_until

    c = cluster_factory(3, broker_load_report_interval_ms="500")
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})
    admin.create_topics([NewTopic("busy", 1, replica_assignment=[[2]])])["busy"].result(30)
    stop = threading.Event()

    def hammer() -> None:
        p = Producer({"bootstrap.servers": c[2].bootstrap, "linger.ms": 0, "acks": "1",
                      "batch.num.messages": 1})
        while not stop.is_set():
            for _ in range(200):
                try:
                    p.produce("busy", b"x" * 200)
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        p.flush(10)

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        def hot() -> bool:
            now = loads(etcd, keys)
            return (len(now) == 3 and now[2].score >= 0.3
                    and now[2].score - max(now[1].score, now[3].score) >= 0.2)

        wait_until(hot, 60, "broker 2 reported clearly busier than 1 and 3")
        admin.create_topics([NewTopic("fresh", 2, 1)])["fresh"].result(30)
        md = admin.list_topics("fresh", timeout=30).topics["fresh"]
        placed = sorted(md.partitions[p].replicas[0] for p in range(2))
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert placed == [1, 3], (placed, loads(etcd, keys))


def test_a_report_is_written_when_it_says_something_new(tmp_path) -> None:
    """The publisher on a real local KV store: the first report is written on the lease,
    an unchanged one is not written again, a change in traffic is; without a lease
    nothing is written; revoking the lease removes the report."""
    import asyncio

    from yak.cluster.broker_load import LoadPublisher, LoadSampler
    from yak.cluster.layout import ClusterKeys
    from yak.cluster.local_kv import LocalKV

    totals = {"bytes_in": 0.0, "bytes_out": 0.0, "messages_in": 0.0}
    lease_id = [0]

    async def main() -> None:
        kv = await LocalKV(tmp_path / "kv.json").open()
        ck = ClusterKeys("t")
        sampler = LoadSampler(4, lambda: dict(totals), lambda: 0, tmp_path)
        pub = LoadPublisher(kv, ck, sampler, lambda: lease_id[0], 1000)
        sampler.baseline()
        assert await pub.publish() is None  # not registered: nothing written
        assert await kv.get(ck.broker_load(4)) is None
        lease_id[0], _ttl = await kv.lease_grant(30)
        await asyncio.sleep(0.3)  # samples over a few hundred ms, as a broker's are
        first = await pub.publish()
        assert first is not None
        stored = await kv.get(ck.broker_load(4))
        assert stored is not None and stored.lease == lease_id[0]
        assert read_loads([stored]) == {4: first}
        await asyncio.sleep(0.3)
        assert await pub.publish() is None, pub.last  # nothing new
        totals["bytes_in"] += 50 * 1024 * 1024  # 50 MiB since the last sample
        await asyncio.sleep(0.3)
        hot = await pub.publish()
        assert hot is not None and hot.bytes_in_per_s > 1024 * 1024
        assert read_loads([await kv.get(ck.broker_load(4))]) == {4: hot}
        await kv.lease_revoke(lease_id[0])
        assert await kv.get(ck.broker_load(4)) is None
        await kv.aclose()

    asyncio.run(main())
