"""Fetch from follower (KIP-392, issue 23) on three real brokers in racks a, b, c over a
real etcd, read by unmodified clients.

Each partition is led by broker 1 (rack a) and followed by brokers 2 (rack b) and 3
(rack c). With `replica.selector.class=...RackAwareReplicaSelector`, a consumer with
`client.rack=b` is told by the leader to read from broker 2; the brokers' own
`yak_broker_topic_bytes_out` counters (Prometheus, /metrics) show which broker sent the
records. A follower killed while a consumer reads from it sends the consumer back to the
leader, and no record is lost or repeated.
"""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import FAST_SESSION, YakCluster
from yak.cluster.layout import ClusterKeys
from yak.cluster.replica_selector import (
    RACK_AWARE_SELECTOR,
    RackAwareReplicaSelector,
    replica_selector,
)
from yak.devcluster.local import LocalEtcd
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.settings import ConfigError

T = 30.0
RACKS = {1: "a", 2: "b", 3: "c"}
N = 3000


@pytest.fixture(scope="module")
def racked(etcd: LocalEtcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[YakCluster]:
    """Brokers 1, 2, 3 in racks a, b, c, each with its /metrics endpoint, selecting
    read replicas by rack; shared by this module's tests (each uses its own topic; the
    one that kills broker 2 comes last)."""
    keys = ClusterKeys(f"fetch-from-follower-{uuid.uuid4().hex[:8]}")
    c = YakCluster(etcd, keys, tmp_path_factory.mktemp("racked"),
                   {**FAST_SESSION, "replica.selector.class": RACK_AWARE_SELECTOR})
    c.http = True
    try:
        for node, rack in RACKS.items():
            c.add(node, **{"broker.rack": rack})
        c.wait_registered()
        yield c
    finally:
        c.stop()


def bytes_out(cluster: YakCluster, node: int, topic: str) -> float:
    """Record bytes broker `node` has sent for `topic` by Fetch (its own counter)."""
    http = cluster[node].http
    assert http is not None
    text = httpx.get(f"http://{http}/metrics", timeout=60).text  # the first one is slow
    sample = rf'^yak_broker_topic_bytes_out_total\{{topic="{re.escape(topic)}"\}} (\S+)$'
    m = re.search(sample, text, re.M)
    return float(m.group(1)) if m else 0.0


def make_topic(cluster: YakCluster, topic: str) -> None:
    """One partition on replicas [1, 2, 3]: led by broker 1 in rack a."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]])])[topic].result(T)


def produce(cluster: YakCluster, topic: str, start: int, count: int) -> int:
    """Values `start` .. `start+count-1`, acks=all; returns the value bytes written."""
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    size = 0
    for i in range(start, start + count):
        v = f"{i:08d}".encode() * 8
        size += len(v)
        p.produce(topic, v, key=str(i).encode())
    assert p.flush(T) == 0
    return size


def wait_in_sync(cluster: YakCluster, topic: str) -> None:
    """Until every replica is in the ISR (a follower outside it is never chosen)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + T
    while True:
        md = admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
        if md.leader == 1 and sorted(md.isrs) == [1, 2, 3]:
            return
        assert time.monotonic() < deadline, f"ISR not full: leader {md.leader} isr {md.isrs}"
        time.sleep(0.1)  # back-off of this wait-for-ISR loop


def consumer(cluster: YakCluster, topic: str, rack: str | None) -> Consumer:
    """A confluent-kafka consumer of `topic` with `client.rack` = `rack` (None: unset)."""
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "fetch.wait.max.ms": 100, "reconnect.backoff.max.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000}
    if rack is not None:
        conf["client.rack"] = rack
    c = Consumer(conf)
    # Assigned, not subscribed: no group to rebalance when a broker (maybe the group's
    # coordinator) is killed, which would restart it from auto.offset.reset.
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    return c


def read(c: Consumer, want: int, timeout: float = 60.0) -> list[int]:
    """The next `want` values `c` reads (fewer if `timeout` passes first)."""
    got: list[int] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for m in c.consume(min(500, want - len(got)), 0.5):
            assert m.error() is None, m.error()
            got.append(int(m.value()[:8]))
    return got


def consume(cluster: YakCluster, topic: str, want: int, rack: str | None) -> list[int]:
    c = consumer(cluster, topic, rack)
    try:
        return read(c, want)
    finally:
        c.close()


def test_selector_chooses_as_kafka_does() -> None:
    """Kafka's RackAwareReplicaSelector, alone: the leader in the consumer's rack; else
    the most caught-up candidate there (log end, then the most recently caught up); else
    the leader. Brokers not registered (no rack here) are never chosen."""
    racks = {1: "a", 2: "b", 3: "b", 4: "c"}
    sel = RackAwareReplicaSelector(racks.get)
    assert sel.select("a", 1, [(2, 10, 0), (3, 10, 0)]) == 1  # the leader is in rack a
    assert sel.select("b", 1, [(2, 9, 0), (3, 10, 0)]) == 3  # largest log end
    assert sel.select("b", 1, [(2, 10, 50), (3, 10, 200)]) == 2  # then the freshest
    assert sel.select("c", 1, [(2, 10, 0)]) == 1  # no candidate in rack c
    assert sel.select("", 1, [(2, 10, 0)]) == 1  # no rack: the leader
    assert sel.select("b", 1, [(5, 10, 0)]) == 1  # broker 5 unknown (unregistered)


def test_selector_setting() -> None:
    assert replica_selector(None, lambda n: None) is None
    assert replica_selector(RACK_AWARE_SELECTOR, lambda n: None) is not None
    with pytest.raises(ConfigError, match="replica.selector.class"):
        replica_selector("com.example.Mine", lambda n: None)


def test_unknown_selector_class_stops_the_broker(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "yak.cli.main", "serve", "--data-dir",
                        str(tmp_path), "--listen", "127.0.0.1:0", "--set",
                        "replica.selector.class=com.example.Mine"],
                       capture_output=True, text=True, timeout=60)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "replica.selector.class" in lines[0] and "RackAwareReplicaSelector" in lines[0]


def test_metadata_reports_racks(racked: YakCluster) -> None:
    admin = AdminClient({"bootstrap.servers": racked.bootstrap})
    nodes = admin.describe_cluster().result(T).nodes
    assert {n.id: n.rack for n in nodes} == RACKS


def test_consumer_in_rack_b_reads_from_broker_2(racked: YakCluster) -> None:
    topic = "ffb"
    make_topic(racked, topic)
    size = produce(racked, topic, 0, N)
    wait_in_sync(racked, topic)
    got = consume(racked, topic, N, "b")
    assert got == list(range(N))
    out = {n: bytes_out(racked, n, topic) for n in RACKS}
    # Every record came from rack b's replica; the leader (rack a) answered only with the
    # preferred read replica, and rack c's replica was never asked.
    assert out[2] >= size, out
    assert out[1] == 0 and out[3] == 0, out


def test_consumer_without_rack_reads_from_the_leader(racked: YakCluster) -> None:
    topic = "ffnone"
    make_topic(racked, topic)
    size = produce(racked, topic, 0, 500)
    wait_in_sync(racked, topic)
    assert consume(racked, topic, 500, None) == list(range(500))
    out = {n: bytes_out(racked, n, topic) for n in RACKS}
    assert out[1] >= size and out[2] == 0 and out[3] == 0, out


def test_kafka_python_client_rack(racked: YakCluster) -> None:
    """kafka-python (3.x) sends `client_rack` in Fetch v11+ and follows the answer."""
    from kafka import KafkaConsumer

    topic = "ffkp"
    make_topic(racked, topic)
    size = produce(racked, topic, 0, 1000)
    wait_in_sync(racked, topic)
    c = KafkaConsumer(topic, bootstrap_servers=racked.bootstrap.split(","),
                      client_rack="c", auto_offset_reset="earliest",
                      enable_auto_commit=False, group_id=None, fetch_max_wait_ms=100,
                      consumer_timeout_ms=20_000)
    got: list[int] = []
    try:
        for m in c:
            got.append(int(m.value[:8]))
            if len(got) == 1000:
                break
    finally:
        c.close()
    assert got == list(range(1000))
    out = {n: bytes_out(racked, n, topic) for n in RACKS}
    assert out[3] >= size and out[1] == 0 and out[2] == 0, out


def test_aiokafka_client_rack(racked: YakCluster) -> None:
    """aiokafka (0.14) sends `client_rack` in Fetch v11+ and follows the answer."""
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    topic = "ffaio"
    make_topic(racked, topic)
    size = produce(racked, topic, 0, 1000)
    wait_in_sync(racked, topic)

    async def read_all() -> list[int]:
        c = AIOKafkaConsumer(bootstrap_servers=racked.bootstrap, client_rack="b",
                             enable_auto_commit=False, fetch_max_wait_ms=100)
        await c.start()
        try:
            tp = AioTopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            got: list[int] = []
            while len(got) < 1000:
                batch = await asyncio.wait_for(c.getmany(tp, timeout_ms=500), T)
                got += [int(m.value[:8]) for m in batch.get(tp, [])]
            return got
        finally:
            await c.stop()

    assert asyncio.run(asyncio.wait_for(read_all(), 60)) == list(range(1000))
    out = {n: bytes_out(racked, n, topic) for n in RACKS}
    assert out[2] >= size and out[1] == 0 and out[3] == 0, out


def raw_fetch(cluster: YakCluster, node: int, topic: str, offset: int, rack: str,
              version: int = 11, isolation: int = 0) -> Any:
    """One partition's answer to a consumer's Fetch sent to broker `node` as it is."""
    mod = kio_compat.schema_module("fetch", version, "request")
    part = kio_compat.build(mod.FetchPartition, partition=0, fetch_offset=offset,
                            partition_max_bytes=1 << 20, current_leader_epoch=-1,
                            log_start_offset=-1, last_fetched_epoch=-1)
    req = kio_compat.build(
        mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=0, max_bytes=1 << 20, isolation_level=isolation, session_id=0,
        session_epoch=-1, forgotten_topics_data=(), rack_id=rack,
        topics=(kio_compat.build(mod.FetchTopic, topic=topic, partitions=(part,)),))
    with RawClient(cluster[node].bootstrap) as raw:
        return raw.request(req).responses[0].partitions[0]


def test_answers_on_the_wire(racked: YakCluster) -> None:
    """What each broker answers a consumer's Fetch, as KIP-392 has Kafka answer it."""
    topic = "ffwire"
    make_topic(racked, topic)
    produce(racked, topic, 0, 100)
    wait_in_sync(racked, topic)
    none = ErrorCode.none
    # The leader sends a consumer in rack b to broker 2, with no records.
    p = raw_fetch(racked, 1, topic, 0, "b")
    assert (p.error_code, p.preferred_read_replica, len(p.records or b"")) == (none, 2, 0)
    assert p.high_watermark == 100
    # In the leader's own rack, in a rack with no broker, or with no rack: the leader reads.
    for rack in ("a", "nowhere", ""):
        p = raw_fetch(racked, 1, topic, 0, rack)
        assert (p.error_code, p.preferred_read_replica) == (none, -1), rack
        assert len(p.records or b"") > 0, rack
    # The follower serves v11+ consumers up to its high watermark, learnt from the
    # leader's answer to its next fetch (a replica fetch round, as in Kafka) ...
    deadline = time.monotonic() + T
    while (hw := raw_fetch(racked, 2, topic, 0, "b").high_watermark) < 100:
        assert time.monotonic() < deadline, hw
        time.sleep(0.05)  # back-off of this wait-for-the-follower's-HW loop
    # ... read_committed too (no open transaction: its LSO is its high watermark).
    for isolation in (0, 1):
        p = raw_fetch(racked, 2, topic, 0, "b", isolation=isolation)
        assert (p.error_code, p.high_watermark) == (none, 100), isolation
        assert len(p.records or b"") > 0 and p.last_stable_offset == 100
    # ... not older consumers; and past its log end: out of range (the client goes back to
    # the leader); at its end: nothing yet.
    assert raw_fetch(racked, 2, topic, 0, "", version=10).error_code == \
        ErrorCode.not_leader_or_follower
    assert raw_fetch(racked, 2, topic, 10_000, "b").error_code == ErrorCode.offset_out_of_range
    p = raw_fetch(racked, 2, topic, 100, "b")
    assert (p.error_code, len(p.records or b"")) == (none, 0)
    # A broker that holds no replica of an existing partition is not its leader or follower.
    admin = AdminClient({"bootstrap.servers": racked.bootstrap})
    admin.create_topics([NewTopic("ffwire13", 1, replica_assignment=[[1, 3]])])[
        "ffwire13"].result(T)
    deadline = time.monotonic() + T
    while (code := raw_fetch(racked, 2, "ffwire13", 0, "b").error_code) != \
            ErrorCode.not_leader_or_follower:
        assert time.monotonic() < deadline, code  # until broker 2's image has the topic
        time.sleep(0.1)  # back-off of this wait-for-metadata loop


def test_read_committed_on_a_follower(racked: YakCluster) -> None:
    """A follower's last stable offset follows the transactions replicated into its log:
    an open transaction holds read_committed reads below it, its commit releases them."""
    topic = "fftxn"
    make_topic(racked, topic)
    produce(racked, topic, 0, 100)
    tx = Producer({"bootstrap.servers": racked.bootstrap, "transactional.id": "fftx",
                   "acks": "all"})
    tx.init_transactions(T)
    tx.begin_transaction()
    for i in range(100, 110):
        tx.produce(topic, f"{i:08d}".encode())
    assert tx.flush(T) == 0

    def on_follower(isolation: int) -> Any:
        deadline = time.monotonic() + T
        while (p := raw_fetch(racked, 2, topic, 0, "b", isolation=isolation)
               ).high_watermark < 110:
            assert time.monotonic() < deadline, p.high_watermark
            time.sleep(0.05)  # back-off of this wait-for-the-follower's-HW loop
        return p

    p = on_follower(1)
    assert (p.error_code, p.last_stable_offset) == (ErrorCode.none, 100)
    assert raw_fetch(racked, 2, topic, 100, "b", isolation=1).records in (None, b"")
    assert raw_fetch(racked, 2, topic, 100, "b", isolation=0).records  # uncommitted: there
    tx.commit_transaction(T)
    deadline = time.monotonic() + T
    while (p := raw_fetch(racked, 2, topic, 100, "b", isolation=1)).last_stable_offset < 111:
        assert time.monotonic() < deadline, p.last_stable_offset
        time.sleep(0.05)  # back-off of this wait-for-the-marker loop
    assert p.error_code == ErrorCode.none and p.records


def test_replica_moved_away_mid_consume(racked: YakCluster) -> None:
    """A reassignment takes rack b's replica (broker 2) away while a consumer in rack b
    reads from it: broker 2 answers NOT_LEADER_OR_FOLLOWER, the consumer goes back to the
    leader and reads on, every record once, in order."""
    topic = "ffmove"
    make_topic(racked, topic)
    produce(racked, topic, 0, 1000)
    wait_in_sync(racked, topic)
    c = consumer(racked, topic, "b")
    try:
        got = read(c, 1000)
        assert got == list(range(1000)) and bytes_out(racked, 1, topic) == 0
        r = subprocess.run([sys.executable, "-m", "yak.cli.main", "partitions", "move",
                            f"{topic}/0", "-r", "1,3", "-b", racked.bootstrap],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        admin = AdminClient({"bootstrap.servers": racked.bootstrap})
        deadline = time.monotonic() + T
        while (reps := admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
               .replicas) != [1, 3]:
            assert time.monotonic() < deadline, reps
            time.sleep(0.1)  # back-off of this wait-for-the-move loop
        produce(racked, topic, 1000, 500)
        got += read(c, 500)
    finally:
        c.close()
    assert got == list(range(1500))
    assert bytes_out(racked, 1, topic) > 0


def test_follower_killed_mid_consume_falls_back_to_the_leader(racked: YakCluster) -> None:
    """Broker 2 (rack b) dies while a consumer in rack b reads from it: the consumer goes
    back to the leader and reads every record once, in order, including those produced
    after the kill."""
    topic = "ffkill"
    make_topic(racked, topic)
    produce(racked, topic, 0, N)
    wait_in_sync(racked, topic)
    c = consumer(racked, topic, "b")
    try:
        got = read(c, N)
        assert got == list(range(N))
        assert bytes_out(racked, 1, topic) == 0  # all of it from broker 2 so far
        racked[2].kill()
        produce(racked, topic, N, 500)
        got += read(c, 500)
    finally:
        c.close()
    assert got == list(range(N + 500))
    assert bytes_out(racked, 1, topic) > 0  # the rest from the leader
