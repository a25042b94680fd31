"""Ahead of Kafka (issue 24): a share group's dead-letter topic and its delay before
redelivery, set as group configs through IncrementalAlterConfigs and exercised with
confluent-kafka's ShareConsumer against a real `yak serve`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from contextlib import ExitStack

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


def _alter(admin: AdminClient, group: str, **configs: str) -> None:
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(10)


def _consumer(stack: ExitStack, bs: str, group: str, topic: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    stack.callback(c.close)
    c.subscribe([topic])
    return c


def _read_all(bs: str, topic: str, want: int, timeout: float = 15.0) -> list[object]:
    c = Consumer({"bootstrap.servers": bs, "group.id": "dlq-reader",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join to wait for
        out: list[object] = []
        end = time.monotonic() + timeout
        while len(out) < want and time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m)
        return out
    finally:
        c.close()


def test_records_past_the_delivery_limit_and_rejected_ones_go_to_the_dead_letter_topic(
        broker) -> None:
    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    for t in ("q", "q-dlq"):
        admin.create_topics([NewTopic(t, 1, 1)])[t].result(15)
    with pytest.raises(KafkaException) as e:  # the topic must exist
        _alter(admin, "g", errors_deadletterqueue_topic_name="missing")
    assert e.value.args[0].name() == "INVALID_CONFIG"
    res = ConfigResource(ResourceType.GROUP, "g", incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in (
            ("share.delivery.count.limit", "2"), ("share.auto.offset.reset", "earliest"),
            ("errors.deadletterqueue.topic.name", "q-dlq"))])
    admin.incremental_alter_configs([res])[res].result(10)
    p = Producer({"bootstrap.servers": bs})
    for i in range(4):
        p.produce("q", key=b"k%d" % i, value=b"v%d" % i, partition=0,
                  headers=[("origin", b"test")])
    assert p.flush(15) == 0
    counts: dict[int, list[int]] = {}
    with ExitStack() as stack:
        c = _consumer(stack, bs, "g", "q")
        end = time.monotonic() + 20
        while time.monotonic() < end and sum(map(len, counts.values())) < 7:
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                counts.setdefault(m.offset(), []).append(m.delivery_count())
                if m.offset() == 3:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                elif m.offset() == 2:
                    c.acknowledge(m, AcknowledgeType.REJECT)
                else:
                    c.acknowledge(m, AcknowledgeType.RELEASE)
            c.commit_sync()
    assert counts == {0: [1, 2], 1: [1, 2], 2: [1], 3: [1]}
    dead = _read_all(bs, "q-dlq", 3)
    assert sorted((m.key(), m.value()) for m in dead) == [
        (b"k0", b"v0"), (b"k1", b"v1"), (b"k2", b"v2")]
    by_offset = {}
    for m in dead:
        h = dict(m.headers())
        assert h["origin"] == b"test"
        assert h["__dlq.errors.group.id"] == b"g"
        assert (h["__dlq.errors.topic"], h["__dlq.errors.partition"]) == (b"q", b"0")
        by_offset[int(h["__dlq.errors.offset"])] = (h["__dlq.errors.delivery.count"],
                                                     h["__dlq.errors.reason"])
    assert by_offset == {0: (b"2", b"delivery count limit reached"),
                         1: (b"2", b"delivery count limit reached"),
                         2: (b"1", b"rejected")}
    assert len(_read_all(bs, "q-dlq", 4, timeout=3)) == 3  # nothing else, no duplicate


def test_a_released_record_comes_again_only_after_the_redelivery_delay(broker) -> None:
    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic("q", 1, 1)])["q"].result(15)
    res = ConfigResource(ResourceType.GROUP, "g", incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in (
            ("share.auto.offset.reset", "earliest"),
            ("share.record.redelivery.delay.ms", "2000"))])
    admin.incremental_alter_configs([res])[res].result(10)
    p = Producer({"bootstrap.servers": bs})
    p.produce("q", value=b"v", partition=0)
    assert p.flush(15) == 0
    seen: list[tuple[float, int]] = []
    with ExitStack() as stack:
        c = _consumer(stack, bs, "g", "q")
        end = time.monotonic() + 20
        while time.monotonic() < end and len(seen) < 2:
            for m in c.poll(0.1):
                assert m.error() is None, m.error()
                seen.append((time.monotonic(), m.delivery_count()))
                c.acknowledge(m, AcknowledgeType.RELEASE if len(seen) == 1
                              else AcknowledgeType.ACCEPT)
                c.commit_sync()
    assert [n for _, n in seen] == [1, 2]
    gap = seen[1][0] - seen[0][0]
    assert 2.0 <= gap <= 2.0 + 1.5, gap


# Release every record at its first delivery, hold it at its second (explicit mode), report
# {"offset": [delivery counts]} once each was held, then wait to be killed.
_RELEASE_THEN_HOLD = textwrap.dedent("""
    import json, sys, time
    from confluent_kafka import AcknowledgeType, ShareConsumer
    bootstrap, want = sys.argv[1], int(sys.argv[2])
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "g",
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe(["q"])
    seen = {}
    end = time.monotonic() + 30
    while sum(1 for v in seen.values() if 2 in v) < want and time.monotonic() < end:
        for m in c.poll(0.2):
            seen.setdefault(str(m.offset()), []).append(m.delivery_count())
            if m.delivery_count() == 1:
                c.acknowledge(m, AcknowledgeType.RELEASE)
        c.commit_sync()
    print(json.dumps(seen), flush=True)
    time.sleep(3600)
""")


def test_a_record_held_at_its_last_delivery_when_the_broker_dies_goes_to_the_dlq(
        broker_factory) -> None:
    """Delivery limit 2: a record released once and held at its second delivery when the
    broker is killed is archived by the next load of the share partition (its lock died
    with the broker, as an expiry would archive it) and copied to the dead-letter topic;
    nobody gets it a third time."""
    broker = broker_factory()
    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    for t in ("q", "q-dlq"):
        admin.create_topics([NewTopic(t, 1, 1)])[t].result(15)
    res = ConfigResource(ResourceType.GROUP, "g", incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in (
            ("share.delivery.count.limit", "2"), ("share.auto.offset.reset", "earliest"),
            ("errors.deadletterqueue.topic.name", "q-dlq"))])
    admin.incremental_alter_configs([res])[res].result(10)
    p = Producer({"bootstrap.servers": bs})
    p.produce("q", key=b"k", value=b"v", partition=0)
    assert p.flush(15) == 0
    holder = subprocess.Popen([sys.executable, "-c", _RELEASE_THEN_HOLD, bs, "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()
        assert line, holder.stderr.read() if holder.poll() is not None else "no report"
        assert json.loads(line) == {"0": [1, 2]}
        broker.kill()
    finally:
        holder.kill()
        holder.wait(10)
    broker.start()
    with ExitStack() as stack:
        c = _consumer(stack, bs, "g", "q")
        got = []
        end = time.monotonic() + 6
        while time.monotonic() < end:
            got += [m.offset() for m in c.poll(0.2) if m.error() is None]
    assert got == []  # never a third delivery
    dead = _read_all(bs, "q-dlq", 1)
    assert [(m.key(), m.value()) for m in dead] == [(b"k", b"v")]
    h = dict(dead[0].headers())
    assert (h["__dlq.errors.delivery.count"], h["__dlq.errors.reason"]) == (
        b"2", b"delivery count limit reached")
