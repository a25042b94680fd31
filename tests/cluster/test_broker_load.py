"""Broker load reports and the cordon (issue 23) on a real three-broker cluster on etcd:
each broker's report appears under `broker_loads/<id>` and follows the broker's produce
traffic and shows in the console's broker list; a killed broker's report vanishes with its session; `yak cluster decommission`
cordons a broker (cordoned.log.dirs=*), so a topic created while it drains gets no replica
on it (nor does the first consumer group's `__consumer_offsets`, whose replication
factor is capped at the brokers that take replicas), and `--cancel` (recommission) lets
new partitions land on it again."""

from __future__ import annotations

import json

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cli.test_cli import ok
from tests.cluster.conftest import cluster_factory, etcd, keys, run  # noqa: F401 - fixtures
from tests.waiting import wait_until
from yak.cluster.broker_load import BrokerLoad, read_loads
from yak.cluster.etcd import EtcdClient

T = 30


def loads(etcd, keys) -> dict[int, BrokerLoad]:  # noqa: F811
    async def get() -> dict[int, BrokerLoad]:
        async with EtcdClient(etcd.endpoints) as c:
            return read_loads((await c.range(keys.broker_loads, prefix=True)).kvs)

    return run(get())


def test_reports_appear_follow_traffic_and_vanish_with_the_broker(
        cluster_factory, etcd, keys) -> None:  # noqa: F811
    c = cluster_factory(3, http=True, broker_load_report_interval_ms="500")
    wait_until(lambda: set(loads(etcd, keys)) == {1, 2, 3}, T, "three load reports")
    first = loads(etcd, keys)
    for n, r in first.items():
        assert r.node_id == n and 400 <= r.interval_ms <= 5000, r
        assert r.disk_total_bytes > r.disk_free_bytes > 0, r
        assert 0 <= r.busy_ratio <= 1 and r.cpu_percent >= 0, r
    # The console (broker 1's embedded gateway) shows every broker's load.
    overview = httpx.get(f"http://{c[1].http}/api/overview", timeout=T).json()
    shown = {b["id"]: b["load"] for b in overview["brokers"]}
    assert set(shown) == {1, 2, 3} and all(v is not None for v in shown.values()), shown
    assert {"cpu_percent", "busy_ratio", "bytes_in_per_s", "score"} <= set(shown[2]), shown

    # Bytes in: produce to a partition led by broker 2 only, and its report says so.
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})
    admin.create_topics([NewTopic("hot", 1, replica_assignment=[[2]])])["hot"].result(T)
    p = Producer({"bootstrap.servers": c[1].bootstrap, "linger.ms": 5})

    def busy_on_2() -> bool:
        for _ in range(2000):
            p.produce("hot", b"x" * 512)
            p.poll(0)
        p.flush(T)
        now = loads(etcd, keys)
        return now[2].bytes_in_per_s > 10_000 and now[2].messages_in_per_s > 10

    wait_until(busy_on_2, T, "broker 2's report shows bytes in")
    assert loads(etcd, keys)[3].bytes_in_per_s == 0.0

    # A killed broker's report goes with its session lease.
    c[3].kill()
    wait_until(lambda: 3 not in loads(etcd, keys), T, "broker 3's report gone")
    assert set(loads(etcd, keys)) == {1, 2}


@pytest.mark.slow
def test_a_cordoned_broker_gets_no_new_partition_until_recommissioned(
        cluster_factory) -> None:  # noqa: F811
    c = cluster_factory(3, offsets_topic_num_partitions="3")
    via = ["--bootstrap", c[1].bootstrap]
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})

    def leaders_of(topic: str, n: int) -> list[list[int]]:
        def placed() -> list[list[int]] | None:
            t = admin.list_topics(topic, timeout=T).topics.get(topic)
            if t is None or t.error is not None or len(t.partitions) != n:
                return None
            return [list(t.partitions[i].replicas) for i in range(n)]

        got: list[list[list[int]]] = []
        wait_until(lambda: bool(got.append(placed()) or got[-1]), T, f"{topic} placed")
        return got[-1]  # type: ignore[return-value]

    out = ok("cluster", "decommission", "3", *via)
    assert "no partition is to be moved" in out, out
    configs = json.loads(ok("config", "describe", "--broker", "3", "--json", *via))["configs"]
    cordon = [e for e in configs if e["name"] == "cordoned.log.dirs"]
    assert cordon and cordon[0]["value"] == "*", configs
    assert cordon[0]["source"] == "DYNAMIC_BROKER_CONFIG", cordon

    admin.create_topics([NewTopic("during", 12, 2)])["during"].result(T)
    during = leaders_of("during", 12)
    assert all(3 not in r for r in during), during
    # The first consumer group creates __consumer_offsets (replication factor 3 wanted):
    # capped at the two brokers that take replicas, none on 3.
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": c[1].bootstrap, "group.id": "g-cordon",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["during"])
    wait_until(lambda: consumer.poll(0.5) is None and bool(consumer.assignment()), T,
               "a group member with an assignment")
    consumer.close()
    offsets = leaders_of("__consumer_offsets", 3)
    assert all(sorted(r) == [1, 2] for r in offsets), offsets
    # Adding partitions keeps away from it too.
    from confluent_kafka.admin import NewPartitions
    admin.create_partitions([NewPartitions("during", 15)])["during"].result(T)
    assert all(3 not in r for r in leaders_of("during", 15))

    out = ok("cluster", "decommission", "3", "--cancel", *via)
    assert "broker 3: recommissioned" in out, out
    configs = json.loads(ok("config", "describe", "--broker", "3", "--json", *via))["configs"]
    assert not any(e["name"] == "cordoned.log.dirs" and e["value"] for e in configs), configs
    admin.create_topics([NewTopic("after", 12, 2)])["after"].result(T)
    after = leaders_of("after", 12)
    assert sum(3 in r for r in after) == 8, after  # 24 replicas over 3 brokers


@pytest.mark.slow
def test_cluster_status_shows_each_brokers_load(tmp_path) -> None:
    """`yak cluster up -n 2` then `yak cluster status`: a load line under each running
    broker, read from the cluster's etcd."""
    from tests.cluster.test_cli_cluster import _free_block, _yak

    d = tmp_path / "yc"
    up = _yak("cluster", "up", "-n", "2", "--dir", str(d), "--base-port", str(_free_block()))
    try:
        assert up.returncode == 0, up.stderr[-2000:]

        def shown() -> str | None:
            out = _yak("cluster", "status", "--dir", str(d), timeout=60).stdout
            return out if out.count("load: cpu ") == 2 else None

        out = wait_until(shown, T, "a load line per broker")
        lines = out.splitlines()
        for n in (1, 2):
            i = next(i for i, line in enumerate(lines) if line.startswith(f"broker-{n} "))
            assert lines[i + 1].strip().startswith("load: cpu "), out
            assert "busy" in lines[i + 1] and "disk free" in lines[i + 1], out
    finally:
        _yak("cluster", "stop", "--dir", str(d))
