"""A share group's membership survives a broker restart (issue 24): one real `yak serve`,
killed with SIGKILL and started again on the same data directory, replays the group's
records from `__consumer_offsets` (yak/share/group_records.py).

Raw ShareGroupHeartbeat / ShareGroupDescribe requests make each epoch certain; then
confluent-kafka's ShareConsumer keeps consuming across a restart without rejoining."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient

from tests.broker.rawclient import RawClient
from tests.share.test_share_durable import _setup
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode


def _hb(c: RawClient, member: str, epoch: int, subscribed: tuple[str, ...] | None) -> Any:
    mod = kio_compat.schema_module("share_group_heartbeat", 1, "request")
    return c.request(mod.ShareGroupHeartbeatRequest(
        group_id="g", member_id=member, member_epoch=epoch,
        subscribed_topic_names=subscribed))


def _describe(c: RawClient, group: str = "g") -> Any:
    mod = kio_compat.schema_module("share_group_describe", 1, "request")
    (g,) = c.request(mod.ShareGroupDescribeRequest(
        group_ids=(group,), include_authorized_operations=False)).groups
    return g


def _connect(bootstrap: str, timeout: float = 20) -> RawClient:
    end = time.monotonic() + timeout
    while True:
        try:
            return RawClient(bootstrap)
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def test_the_group_and_its_epochs_survive_a_sigkill_restart(
        broker_factory: Callable[..., Any]) -> None:
    broker = broker_factory()
    with RawClient(broker.bootstrap) as c:
        c.create_topic("q", 2)
        a = _hb(c, "member-a", 0, ("q",))
        b = _hb(c, "member-b", 0, ("q",))
        assert (a.error_code, a.member_epoch) == (ErrorCode.none, 1)
        assert (b.error_code, b.member_epoch) == (ErrorCode.none, 2)
        a = _hb(c, "member-a", 1, None)  # catches up with b's join
        assert (a.error_code, a.member_epoch) == (ErrorCode.none, 2)
        b = _hb(c, "member-b", 2, ("q",))
        before = _describe(c)
        assert before.error_code == ErrorCode.none and before.group_epoch == 2
    broker.restart(kill=True)
    with _connect(broker.bootstrap) as c:
        after = _describe(c)
        assert after.error_code == ErrorCode.none, after
        assert after.group_epoch == before.group_epoch == 2
        assert {m.member_id: m.member_epoch for m in after.members} == {
            "member-a": 2, "member-b": 2}
        assert {m.member_id: sorted(p for tp in m.assignment.topic_partitions
                                    for p in tp.partitions) for m in after.members} == {
            "member-a": [0, 1], "member-b": [0, 1]}
        # the members go on with their epochs; a stale epoch is fenced
        a = _hb(c, "member-a", 2, None)
        assert (a.error_code, a.member_epoch) == (ErrorCode.none, 2)
        assert _hb(c, "member-b", 1, None).error_code == ErrorCode.fenced_member_epoch
        # a leave is durable too, and a new member gets an epoch above every one before
        assert _hb(c, "member-b", -1, None).error_code == ErrorCode.none
        n = _hb(c, "member-n", 0, ("q",))
        assert (n.error_code, n.member_epoch) == (ErrorCode.none, 4)
    broker.restart(kill=True)
    with _connect(broker.bootstrap) as c:
        g = _describe(c)
        assert g.group_epoch == 4
        assert sorted(m.member_id for m in g.members) == ["member-a", "member-n"]


def test_a_share_consumer_keeps_consuming_across_a_restart(
        broker_factory: Callable[..., Any]) -> None:
    """The consumer's member id and epoch are still the group's after the restart: it
    keeps heartbeating and fetching with them (no FENCED_MEMBER_EPOCH, no rejoin), and
    receives what is produced after the restart."""
    broker = broker_factory()
    bs = broker.bootstrap
    _setup(bs, "q", "g")  # one partition, share.auto.offset.reset=earliest
    consumer = ShareConsumer({"bootstrap.servers": bs, "group.id": "g"})
    try:
        consumer.subscribe(["q"])

        def collect(want: set[bytes], seconds: float) -> set[bytes]:
            got: set[bytes] = set()
            end = time.monotonic() + seconds
            while time.monotonic() < end and not want <= got:
                for m in consumer.poll(0.2):
                    if m.error() is None:
                        got.add(m.value())
            return got

        producer = Producer({"bootstrap.servers": bs})

        def produce(values: list[bytes]) -> None:
            for v in values:
                producer.produce("q", v)
            assert producer.flush(20) == 0

        first = [b"a%d" % i for i in range(5)]
        produce(first)
        assert collect(set(first), 20) >= set(first)
        with RawClient(bs) as c:
            g = _describe(c)
            (member,) = g.members
            epoch = g.group_epoch
        broker.restart(kill=True)
        second = [b"b%d" % i for i in range(5)]
        end = time.monotonic() + 30
        while True:  # the producer's first connection after the restart may be refused
            try:
                produce(second)
                break
            except AssertionError:
                if time.monotonic() > end:
                    raise
        assert collect(set(second), 30) >= set(second)
        with _connect(bs) as c:
            g = _describe(c)
            assert g.group_epoch == epoch  # no rejoin: the epoch did not move
            assert [(m.member_id, m.member_epoch) for m in g.members] == [
                (member.member_id, member.member_epoch)]
    finally:
        consumer.close()


def test_a_member_expired_by_the_sweep_stays_gone_after_a_restart(
        broker_factory: Callable[..., Any]) -> None:
    """The one-second sweep removes a silent member and writes its tombstones (and the
    new group epoch) itself, with no heartbeat to carry them; after the restart the
    remaining member's session starts again, and it expires the same way."""
    broker = broker_factory(**{
        "group.share.session.timeout.ms": "2000", "group.share.min.session.timeout.ms": "2000",
        "group.share.heartbeat.interval.ms": "500",
        "group.share.min.heartbeat.interval.ms": "500"})
    with RawClient(broker.bootstrap) as c:
        c.create_topic("q", 1)
        assert _hb(c, "silent", 0, ("q",)).error_code == ErrorCode.none
        live = _hb(c, "live", 0, ("q",))
        epoch = live.member_epoch
        end = time.monotonic() + 4  # past the silent member's session, and a sweep
        while time.monotonic() < end:
            r = _hb(c, "live", epoch, None)
            assert r.error_code == ErrorCode.none, r
            epoch = r.member_epoch
            time.sleep(0.3)
        assert [m.member_id for m in _describe(c).members] == ["live"]
    broker.restart(kill=True)
    with _connect(broker.bootstrap) as c:
        g = _describe(c)
        assert [m.member_id for m in g.members] == ["live"] and g.group_epoch == 3
        time.sleep(4)  # nobody heartbeats: "live" expires after its session restarted
        assert _describe(c).members == ()
    broker.restart(kill=True)
    with _connect(broker.bootstrap) as c:
        g = _describe(c)
        assert g.members == () and g.group_epoch == 4 and g.group_state == "Empty"


def test_a_deleted_share_group_stays_deleted_after_a_restart(
        broker_factory: Callable[..., Any]) -> None:
    """DeleteGroups of an empty share group writes tombstones of its records (the epoch
    record an empty group still has), so the restarted broker does not bring it back."""
    broker = broker_factory()
    with RawClient(broker.bootstrap) as c:
        c.create_topic("q", 1)
        assert _hb(c, "m", 0, ("q",)).error_code == ErrorCode.none
        assert _hb(c, "m", -1, None).error_code == ErrorCode.none
        assert _describe(c).group_epoch == 2
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_consumer_groups(["g"])["g"].result(20)
    broker.restart(kill=True)
    with _connect(broker.bootstrap) as c:
        assert _describe(c).error_code == ErrorCode.group_id_not_found
        n = _hb(c, "m", 0, ("q",))  # a new group of the same name starts afresh
        assert (n.error_code, n.member_epoch) == (ErrorCode.none, 1)
