"""A share group's membership survives a failover of its coordinator (issue 24): 3 real
brokers on etcd, the group's coordinator (the leader of its `__consumer_offsets`
partition) SIGKILLed while a confluent-kafka ShareConsumer consumes with explicit
acknowledgements. The new coordinator replays the group's records: the group epoch is
kept (not back at a fresh group's), the member is still known, and consumption goes on
with every produced record acknowledged (ACCEPT confirmed by the broker) exactly once.

The topic's partitions are led by the two other brokers, so the kill moves the group
(and whatever share-state partitions the victim led), not the records' leaders."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic, ResourceType

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 (fixtures)
from tests.cluster.test_cluster_groups import _coordinator
from tests.share.test_share_cluster import _set
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

T = 20
PARTS = 3

# Accept every record received; print "ok partition:offset" for each ACCEPT the broker
# confirmed (the acknowledgement commit callback), until killed.
ACKER = textwrap.dedent("""
    import sys
    from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
    bootstrap, group, topic = sys.argv[1:4]
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})

    def done(offsets, exc):
        for tp, offs in offsets.items():
            for o in sorted(offs):
                print(("ok" if exc is None else "err") + f" {tp.partition}:{o}", flush=True)

    c.set_acknowledgement_commit_callback(done)
    c.subscribe([topic])
    print("joined", flush=True)
    while True:
        msgs = c.poll(0.3)
        for m in msgs:
            if m.error() is None:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        if msgs:
            try:
                c.commit_sync(10)
            except KafkaException:
                pass  # the outcomes come through the callback
""")


def _hb(bootstrap: str, member: str, epoch: int) -> Any:
    mod = kio_compat.schema_module("share_group_heartbeat", 1, "request")
    with RawClient(bootstrap) as c:
        return c.request(mod.ShareGroupHeartbeatRequest(
            group_id="g", member_id=member, member_epoch=epoch,
            subscribed_topic_names=("q",) if epoch == 0 else None))


def _describe(bootstrap: str) -> Any:
    mod = kio_compat.schema_module("share_group_describe", 1, "request")
    with RawClient(bootstrap) as c:
        (g,) = c.request(mod.ShareGroupDescribeRequest(
            group_ids=("g",), include_authorized_operations=False)).groups
    return g


def _wait(cond: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if cond():
                return
        except (OSError, ConnectionError):
            pass
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_the_group_keeps_its_epoch_and_every_record_is_acknowledged_once(
        cluster_factory) -> None:  # noqa: F811 (the fixture imported above)
    c = cluster_factory(3, **{
        "group.share.record.lock.duration.ms": "5000",
        "group.share.min.record.lock.duration.ms": "1000",
        "group.share.heartbeat.interval.ms": "1000",
        "group.share.min.heartbeat.interval.ms": "1000"})
    found: list[tuple[int, int]] = []
    _wait(lambda: found.append(_coordinator(c[1].bootstrap, "g")) or found[-1][0] == 0, T,
          "the group's coordinator")
    old = found[-1][1]
    o0, o1 = [b for b in c.brokers if b != old]
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic("q", PARTS, replica_assignment=[
        [o0, o1, old], [o1, o0, old], [o0, old, o1]],
        config={"min.insync.replicas": "2"})])["q"].result(T)
    _set(a, ResourceType.GROUP, "g", **{"share.auto.offset.reset": "earliest"})
    # a history: three members come and go, so a fresh group's epoch would be far below
    for i in range(3):
        m = f"gone-{i}"
        assert _hb(c[old].bootstrap, m, 0).error_code == ErrorCode.none
        assert _hb(c[old].bootstrap, m, -1).error_code == ErrorCode.none
    assert _describe(c[old].bootstrap).group_epoch == 6

    ok: Counter[str] = Counter()
    lock = threading.Lock()
    acker = subprocess.Popen([sys.executable, "-c", ACKER, c.bootstrap, "g", "q"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def read() -> None:
        for line in acker.stdout or ():
            if line.startswith("ok "):
                with lock:
                    ok[line[3:].strip()] += 1

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                  "message.timeout.ms": "60000"})
    sent: dict[str, None] = {}

    def delivered(err: object, msg: Any) -> None:
        if err is None:
            sent[f"{msg.partition()}:{msg.offset()}"] = None

    def produce(seconds: float) -> None:
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            p.produce("q", b"v%d" % i, partition=i % PARTS, on_delivery=delivered)
            p.poll(0)
            i += 1
            time.sleep(0.02)

    try:
        assert acker.stdout is not None and acker.stdout.readline() == "joined\n"
        threading.Thread(target=read, daemon=True).start()
        produce(4)
        _wait(lambda: len(ok) > 20, T, "acknowledgements before the kill")
        before = _describe(c[old].bootstrap)
        assert before.error_code == ErrorCode.none and len(before.members) == 1, before
        assert before.group_epoch >= 7
        (member,) = before.members
        c[old].kill()
        produce(4)
        _wait(lambda: _coordinator(c[o0].bootstrap, "g")[1] not in (old, -1), 30,
              "a new coordinator")
        new = _coordinator(c[o0].bootstrap, "g")[1]
        produce(4)
        assert p.flush(60) == 0
        after: list[Any] = []
        _wait(lambda: after.append(_describe(c[new].bootstrap)) or
              after[-1].error_code == ErrorCode.none, T, "the group at the new coordinator")
        g = after[-1]
        assert g.group_epoch >= before.group_epoch, (before.group_epoch, g.group_epoch)
        assert member.member_id in {m.member_id for m in g.members}, g
        assert len(sent) > 100
        _wait(lambda: set(sent) <= set(ok), 60, "every record acknowledged")
        with lock:
            twice = {k: n for k, n in ok.items() if n > 1}
        assert not twice, f"acknowledged (ACCEPT confirmed) more than once: {twice}"
    finally:
        acker.kill()
        acker.wait(10)
