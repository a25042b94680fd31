"""Share-partition state survives a broker crash (KIP-932's share coordinator on
`__share_group_state`): confluent-kafka's ShareConsumer against a real `yak serve`,
killed with SIGKILL and started again on the same data directory.

The first consumer runs in its own process, so the test can kill it as well: it accepts
some records (durable before its commit returns) and holds the others, acquired and
unacknowledged, when both the broker and it die."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from contextlib import ExitStack

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

# The first consumer: poll until `want` records came, accept those below `accept_below`
# (explicit mode, committed: acknowledged durably), leave the rest acquired, report
# {"partition:offset": delivery count}, and wait to be killed.
HOLDER = textwrap.dedent("""
    import json, sys, time
    from confluent_kafka import AcknowledgeType, ShareConsumer
    bootstrap, group, topic, want, accept_below = sys.argv[1:6]
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    got = {}
    end = time.monotonic() + 30
    while len(got) < int(want) and time.monotonic() < end:
        for m in c.poll(0.2):
            assert m.error() is None, m.error()
            got[f"{m.partition()}:{m.offset()}"] = m.delivery_count()
            if m.offset() < int(accept_below):
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync()
    print(json.dumps(got), flush=True)
    time.sleep(3600)
""")


def _setup(bs: str, topic: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)


def _produce(bs: str, topic: str, n: int, first: int = 0) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(first, first + n):
        p.produce(topic, value=b"v%d" % i, partition=0)
    assert p.flush(15) == 0


def _collect(c: ShareConsumer, seconds: float, until: int | None = None,
             ) -> dict[int, list[int]]:
    got: dict[int, list[int]] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end and (until is None or len(got) < until):
        for m in c.poll(0.2):
            assert m.error() is None, m.error()
            got.setdefault(m.offset(), []).append(m.delivery_count())
    return got


def test_acknowledged_records_survive_a_broker_kill_and_held_ones_come_again(
        broker_factory: Callable[..., object]) -> None:
    broker = broker_factory()
    bs = broker.bootstrap
    _setup(bs, "q", "g")
    _produce(bs, "q", 10)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, bs, "g", "q", "10", "6"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()
        assert line, holder.stderr.read() if holder.poll() is not None else "no report"
        first = json.loads(line)
        assert first == {f"0:{o}": 1 for o in range(10)}
        broker.kill()  # SIGKILL, with 6..9 acquired and 0..5 accepted
    finally:
        holder.kill()
        holder.wait(10)
    broker.start()
    _produce(bs, "q", 2, first=10)  # new records after the restart flow as well
    with ExitStack() as stack:
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": "g"})
        stack.callback(c.close)
        c.subscribe(["q"])
        again = _collect(c, 30, until=6)
        again.update({o: again.get(o, []) + n
                      for o, n in _collect(c, 3).items()})  # nothing more comes
        c.commit_sync()
    # accepted ones never again; held ones once more, their delivery count kept (2);
    # the two new ones for the first time
    assert again == {6: [2], 7: [2], 8: [2], 9: [2], 10: [1], 11: [1]}, again


def test_a_share_partition_initialized_at_the_log_end_keeps_its_start_over_a_restart(
        broker_factory: Callable[..., object]) -> None:
    """`latest` (the default reset) chose the start when the group first fetched; records
    produced after that and before a crash are delivered after it, not skipped by a
    second initialization at the new log end."""
    broker = broker_factory()
    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic("q", 1, 1)])["q"].result(15)
    _produce(bs, "q", 3)  # before the group: not for it
    with ExitStack() as stack:
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": "late"})
        stack.callback(c.close)
        c.subscribe(["q"])
        assert _collect(c, 4) == {}  # the share partition starts at the log end (3)
    _produce(bs, "q", 4, first=3)
    broker.restart(kill=True)
    with ExitStack() as stack:
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": "late"})
        stack.callback(c.close)
        c.subscribe(["q"])
        got = _collect(c, 30, until=4)
        got.update({o: got.get(o, []) + n for o, n in _collect(c, 2).items()})
        c.commit_sync()
    assert got == {3: [1], 4: [1], 5: [1], 6: [1]}, got


def test_group_configs_survive_a_restart(broker_factory: Callable[..., object]) -> None:
    """A group's configs are a document of the metadata store: `earliest`, set before
    the restart and before the group ever fetched, still decides its start after it
    (in memory, the group would start at the log end and get nothing)."""
    broker = broker_factory()
    bs = broker.bootstrap
    _setup(bs, "q", "g")  # share.auto.offset.reset=earliest
    _produce(bs, "q", 5)
    broker.restart(kill=True)
    with ExitStack() as stack:
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": "g"})
        stack.callback(c.close)
        c.subscribe(["q"])
        got = _collect(c, 30, until=5)
        c.commit_sync()
    assert got == {o: [1] for o in range(5)}, got


def test_the_state_topic_is_pruned_and_still_replays(
        broker_factory: Callable[..., object]) -> None:
    """With a snapshot every 2 updates and pruning every second, the share partition's
    state partition loses its old records (its log start moves up) and a broker killed
    afterwards still replays the right state: accepted records never come again."""
    from confluent_kafka import Consumer, TopicPartition

    from tests.broker.rawclient import RawClient
    from yak.protocol import kio_compat
    from yak.share.records import SHARE_STATE_TOPIC, ShareKey, partition_for

    broker = broker_factory(**{"share.coordinator.snapshot.update.records.per.snapshot": "2",
                               "share.coordinator.state.topic.prune.interval.ms": "1000"})
    bs = broker.bootstrap
    _setup(bs, "q", "g")
    for i in range(10):  # a batch each: a fetch acquires whole batches (batch-optimized)
        _produce(bs, "q", 1, first=i)
    with ExitStack() as stack:  # implicit acks: a write per fetch, 10 fetches
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": "g", "max.poll.records": 1})
        stack.callback(c.close)
        c.subscribe(["q"])
        got = _collect(c, 30, until=10)
        c.commit_sync()
    assert sorted(got) == list(range(10))
    mod = kio_compat.schema_module("metadata", 12, "request")
    with RawClient(bs) as raw:
        meta = raw.request(kio_compat.build(
            mod.MetadataRequest, topics=(kio_compat.build(mod.MetadataRequestTopic,
                                                          name="q", topic_id=None),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    tid = meta.topics[0].topic_id
    tp = TopicPartition(SHARE_STATE_TOPIC, partition_for(ShareKey("g", tid, 0), 50))
    reader = Consumer({"bootstrap.servers": bs, "group.id": "watermarks"})
    try:
        end = time.monotonic() + 15
        low = high = 0
        while time.monotonic() < end:
            low, high = reader.get_watermark_offsets(tp, timeout=5)
            if low > 0:
                break
            time.sleep(0.5)  # the prune runs once a second
    finally:
        reader.close()
    assert 0 < low < high, (low, high)
    broker.restart(kill=True)
    _produce(bs, "q", 2, first=10)
    with ExitStack() as stack:
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": "g"})
        stack.callback(c.close)
        c.subscribe(["q"])
        again = _collect(c, 30, until=2)
        again.update({o: again.get(o, []) + n for o, n in _collect(c, 2).items()})
        c.commit_sync()
    assert again == {10: [1], 11: [1]}, again
