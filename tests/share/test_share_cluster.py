"""Share groups on a 3-broker cluster (etcd): the share-partition leaders reach the share
coordinator on other brokers through the state RPCs, and killing (SIGKILL) a broker that
is both a share coordinator and the leader of a share partition, mid-stream, loses no
acknowledgement and no record: the new coordinator loads `__share_group_state`
(replicated, acks=all), the new partition leader reads its state from it and hands out
what was not accepted, once."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    AcknowledgeType,
    Consumer,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 (fixtures)
from tests.cluster.test_cluster_metadata import _metadata
from yak.protocol import kio_compat
from yak.share.records import SHARE_STATE_TOPIC, ShareKey, partition_for

T = 20
LOCK_MS = 5000

# The first consumer (explicit mode; librdkafka wants every polled record acknowledged
# before the next poll): accept what each poll returns, commit (durable), until `want`
# are accepted; then stop polling, holding what its client fetched meanwhile, report
# the accepted ones ("partition:offset") and wait to be killed.
ACCEPTOR = textwrap.dedent("""
    import json, sys, time
    from confluent_kafka import AcknowledgeType, ShareConsumer
    bootstrap, group, topic, want = sys.argv[1:5]
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    print("joined", flush=True)
    accepted = []
    end = time.monotonic() + 40
    while len(accepted) < int(want) and time.monotonic() < end:
        for m in c.poll(0.2):
            assert m.error() is None, m.error()
            c.acknowledge(m, AcknowledgeType.ACCEPT)
            accepted.append(f"{m.partition()}:{m.offset()}")
        c.commit_sync()
    print(json.dumps(accepted), flush=True)
    time.sleep(3600)
""")


def _topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    mod = kio_compat.schema_module("metadata", 12, "request")
    with RawClient(bootstrap) as raw:
        r = raw.request(kio_compat.build(
            mod.MetadataRequest, topics=(kio_compat.build(mod.MetadataRequestTopic,
                                                          name=topic, topic_id=None),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return r.topics[0].topic_id


@pytest.mark.slow
def test_a_share_partition_leader_killed_mid_stream_loses_nothing(
        cluster_factory) -> None:  # noqa: F811 (the fixture imported above)
    c = cluster_factory(3, **{"group.share.record.lock.duration.ms": str(LOCK_MS),
                              "group.share.min.record.lock.duration.ms": "1000"})
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic("q", 3, 3, config={"min.insync.replicas": "2"})])["q"].result(T)
    # The holder joins and opens its sessions first (the share partitions start at the
    # log end), then the records come.
    holder = subprocess.Popen(
        [sys.executable, "-c", ACCEPTOR, c.bootstrap, "g", "q", "12"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "joined\n"
        time.sleep(6)  # its join and first fetches (latest: the share partitions start at 0)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(60):
            p.produce("q", b"v%d" % i, partition=i % 3)
        assert p.flush(30) == 0
        line = holder.stdout.readline()
        assert line, holder.stderr.read() if holder.poll() is not None else "no report"
        accepted = set(json.loads(line))
        assert len(accepted) >= 12
        # Kill the share coordinator of q-0's state (the leader of its __share_group_state
        # partition); with one q leader per broker it leads a q partition too.
        _, _, q_parts = _metadata(c[1].bootstrap, "q")
        tid = _topic_id(c[1].bootstrap, "q")
        state = _metadata(c[1].bootstrap, SHARE_STATE_TOPIC)[2]
        victim = state[partition_for(ShareKey("g", tid, 0), len(state))][1]
        led = [p for p, leader, *_ in q_parts if leader == victim]
        c[victim].kill()  # mid-stream: the holder's records are still held
    finally:
        holder.kill()
        holder.wait(10)
    alive = next(b for n, b in c.brokers.items() if n != victim)
    again: dict[str, list[int]] = {}
    consumer = ShareConsumer({"bootstrap.servers": alive.bootstrap, "group.id": "g"})
    try:
        consumer.subscribe(["q"])
        end = time.monotonic() + 60
        while time.monotonic() < end and len(again) < 60 - len(accepted):
            for m in consumer.poll(0.2):
                if m.error() is None:
                    again.setdefault(f"{m.partition()}:{m.offset()}", []).append(
                        m.delivery_count())
        end = time.monotonic() + 3
        while time.monotonic() < end:  # nothing more comes
            for m in consumer.poll(0.2):
                if m.error() is None:
                    again.setdefault(f"{m.partition()}:{m.offset()}", []).append(
                        m.delivery_count())
        consumer.commit_sync()
    finally:
        consumer.close()
    # every record not accepted comes (held ones once their lock expired or their leader
    # died), once; no accepted one comes again
    assert set(again) == {f"{p}:{o}" for p in range(3) for o in range(20)} - accepted, again
    assert all(len(counts) == 1 for counts in again.values()), again
    assert led, "the killed share coordinator led no partition of q"


def _set(admin: AdminClient, kind: ResourceType, name: str, **configs: str) -> None:
    res = ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(T)


def test_dead_letters_go_to_a_dlq_partition_led_by_another_broker(
        cluster_factory) -> None:  # noqa: F811 (the fixture imported above)
    """q-0 is led by broker 1 and q-dlq-0 by broker 2: the rejected records are sent to
    broker 2 (a Produce with acks=all) before the archive is written. A copy broker 2
    refuses (the record is over q-dlq's max.message.bytes) fails the acknowledgement and
    the archive stays unwritten; once q-dlq takes it, the next write of the share
    partition copies it: in the DLQ exactly once, never lost."""
    c = cluster_factory(2)
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic("q", 1, replica_assignment=[[1]])])["q"].result(T)
    a.create_topics([NewTopic("q-dlq", 1, replica_assignment=[[2]],
                              config={"max.message.bytes": "2000"})])["q-dlq"].result(T)
    assert _metadata(c[1].bootstrap, "q")[2][0][1] == 1
    assert _metadata(c[1].bootstrap, "q-dlq")[2][0][1] == 2
    _set(a, ResourceType.GROUP, "g", **{"share.auto.offset.reset": "earliest",
                                        "errors.deadletterqueue.topic.name": "q-dlq"})
    p = Producer({"bootstrap.servers": c.bootstrap})
    for i in range(3):
        p.produce("q", key=b"k%d" % i, value=b"v%d" % i, partition=0)
    assert p.flush(T) == 0
    consumer = ShareConsumer({"bootstrap.servers": c.bootstrap, "group.id": "g",
                              "share.acknowledgement.mode": "explicit"})
    seen: dict[int, list[int]] = {}
    try:
        consumer.subscribe(["q"])

        def take(want: set[int]) -> None:
            end = time.monotonic() + 30
            while time.monotonic() < end and not want <= set(seen):
                for m in consumer.poll(0.2):
                    assert m.error() is None, m.error()
                    seen.setdefault(m.offset(), []).append(m.delivery_count())
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() == 1
                                         else AcknowledgeType.REJECT)
                with contextlib.suppress(KafkaException):  # the big one's copy fails
                    consumer.commit_sync()

        take({0, 1, 2})
        dead = _read_all(c.bootstrap, "q-dlq", 2, timeout=15)
        assert sorted(m.key() for m in dead) == [b"k0", b"k2"]
        for m in dead:
            h = dict(m.headers())
            assert (h["__dlq.errors.group.id"], h["__dlq.errors.topic"],
                    h["__dlq.errors.reason"]) == (b"g", b"q", b"rejected")
        p.produce("q", key=b"big", value=b"x" * 3000, partition=0)  # over q-dlq's limit
        assert p.flush(T) == 0
        take({3})
        # its acknowledgement was answered (commit_sync): the copy failed, nothing copied
        assert len(_read_all(c.bootstrap, "q-dlq", 3, timeout=3)) == 2
        _set(a, ResourceType.TOPIC, "q-dlq", **{"max.message.bytes": "1048588"})
        p.produce("q", key=b"k4", value=b"v4", partition=0)  # a write of q-0 again
        assert p.flush(T) == 0
        take({4})
    finally:
        consumer.close()
    assert seen == {0: [1], 1: [1], 2: [1], 3: [1], 4: [1]}, seen  # nothing redelivered
    dead = _read_all(c.bootstrap, "q-dlq", 5, timeout=5)
    assert sorted(m.key() for m in dead) == [b"big", b"k0", b"k2", b"k4"]
    offsets = sorted(int(dict(m.headers())["__dlq.errors.offset"]) for m in dead)
    assert offsets == [0, 2, 3, 4]  # each once


def _read_all(bs: str, topic: str, want: int, timeout: float) -> list[Any]:
    c = Consumer({"bootstrap.servers": bs, "group.id": "dlq-reader",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[Any] = []
        end = time.monotonic() + timeout
        while len(out) < want and time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m)
        return out
    finally:
        c.close()
