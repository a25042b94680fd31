"""KIP-848 consumer groups: the coordinator driven by heartbeats, plus librdkafka for real.

The key invariant of the protocol is checked at every step: a partition is never in
the assignment of two members at once (a member gets a partition only after the
previous owner reported it revoked).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from yak.coordinator.memory import MemoryCoordinatorLog
from yak.coordinator.timer import ManualClock
from yak.errors import ErrorCode
from yak.group.coordinator import GroupConfig, GroupCoordinator, OffsetToCommit


def _memory_log(n: int) -> tuple[MemoryCoordinatorLog, MemoryCoordinatorLog]:
    """The coordinator's partition writer and loader: one in-memory log plays both."""
    log = MemoryCoordinatorLog(n, "__consumer_offsets")
    return log, log


pytestmark = pytest.mark.timeout(60)

T1 = uuid.uuid4()
TOPICS = {"t1": (T1, 6)}


def make() -> tuple[GroupCoordinator, ManualClock]:
    clock = ManualClock()
    coord = GroupCoordinator(
        *_memory_log(4),
        GroupConfig(consumer_session_timeout_ms=10_000, consumer_heartbeat_interval_ms=1000),
        clock,
        topic_resolver=TOPICS.get,
    )
    coord.load()
    return coord, clock


class Client:
    """A member that acknowledges whatever it is given (like a well-behaved consumer)."""

    def __init__(self, coord: GroupCoordinator, name: str, instance_id: str | None = None) -> None:
        self.coord = coord
        self.name = name
        self.instance_id = instance_id
        self.member_id = ""
        self.epoch = 0
        self.owned: dict[uuid.UUID, set[int]] = {}

    def beat(self, subscribe: list[str] | None = None) -> ErrorCode:
        res = self.coord.consumer_group_heartbeat(
            "cg",
            self.member_id,
            self.epoch,
            self.instance_id,
            None,
            30_000,
            subscribe if self.epoch == 0 and subscribe else None,
            self.owned,
            self.name,
            "/127.0.0.1",
        )
        if res.error is ErrorCode.none:
            self.member_id = res.member_id or self.member_id
            self.epoch = res.member_epoch
            if res.assignment is not None:
                self.owned = {t: set(ps) for t, ps in res.assignment.items()}
        return res.error

    def parts(self) -> set[int]:
        return self.owned.get(T1, set())


def no_overlap(clients: list[Client]) -> None:
    seen: set[int] = set()
    for c in clients:
        assert not (c.parts() & seen), "a partition is owned by two members"
        seen |= c.parts()


def converge(clients: list[Client], rounds: int = 10) -> None:
    for _ in range(rounds):
        for c in clients:
            assert c.beat() is ErrorCode.none
            no_overlap(clients)


def test_join_rebalance_and_leave_never_double_assign() -> None:
    async def scenario() -> None:
        coord, _ = make()
        a = Client(coord, "a")
        assert a.beat(["t1"]) is ErrorCode.none
        assert a.parts() == set(range(6)) and a.epoch == 1
        b = Client(coord, "b")
        assert b.beat(["t1"]) is ErrorCode.none
        # b may not get anything a still owns: a must revoke first.
        assert b.parts() == set()
        no_overlap([a, b])
        converge([a, b])
        assert len(a.parts()) == 3 and len(b.parts()) == 3
        assert a.epoch == b.epoch == coord.consumer.groups["cg"].epoch
        assert coord.list_groups()[0].state == "Stable"
        assert coord.list_groups(types=["consumer"])[0].group_type == "consumer"
        # b leaves: a gets everything back.
        b.epoch = -1
        assert b.beat() is ErrorCode.none
        converge([a])
        assert a.parts() == set(range(6))

    asyncio.run(scenario())


def test_fencing_unknown_member_and_session_expiry() -> None:
    async def scenario() -> None:
        coord, clock = make()
        a, b = Client(coord, "a"), Client(coord, "b")
        a.beat(["t1"])
        b.beat(["t1"])
        converge([a, b])
        real_epoch = a.epoch
        a.epoch = real_epoch + 7
        assert a.beat() is ErrorCode.fenced_member_epoch
        a.epoch = real_epoch
        ghost = Client(coord, "ghost")
        ghost.member_id, ghost.epoch = "nobody", 3
        assert ghost.beat() is ErrorCode.unknown_member_id
        # Commits are checked against the member epoch.
        codes = await coord.commit_offsets(
            "cg", a.epoch, a.member_id, None, [OffsetToCommit("t1", 0, 5)]
        )
        assert codes == [ErrorCode.none]
        codes = await coord.commit_offsets(
            "cg", a.epoch - 1, a.member_id, None, [OffsetToCommit("t1", 0, 6)]
        )
        assert codes == [ErrorCode.stale_member_epoch]
        # Classic members cannot join a consumer group.
        classic = await coord.join_group(
            "cg", "", None, "x", "h", 10_000, 10_000, "consumer", [("range", b"")]
        )
        assert classic.error is ErrorCode.inconsistent_group_protocol
        # b goes silent: after the session timeout a takes over its partitions.
        for _ in range(3):
            clock.advance(4000)
            coord.timers.run_due()
            assert a.beat() is ErrorCode.none
        converge([a])
        assert a.parts() == set(range(6))
        assert b.beat() is ErrorCode.unknown_member_id

    asyncio.run(scenario())


def test_librdkafka_consumer_protocol_end_to_end(broker_factory) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    b = broker_factory(**{"group.consumer.heartbeat.interval.ms": "500"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("k848", 4, 1)])["k848"].result(15)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(200):
        p.produce("k848", str(i).encode(), partition=i % 4)
    assert p.flush(15) == 0
    conf = {
        "bootstrap.servers": b.bootstrap,
        "group.id": "g848",
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    c1 = Consumer(conf)
    c1.subscribe(["k848"])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 100 and time.monotonic() < deadline:
        m = c1.poll(0.1)
        if m is not None and not m.error():
            got.append(m.value())
    c1.commit(asynchronous=False)
    c2 = Consumer(conf)
    c2.subscribe(["k848"])
    deadline = time.monotonic() + 20
    everything = {str(i).encode() for i in range(200)}
    while time.monotonic() < deadline and set(got) != everything:
        for c in (c1, c2):
            m = c.poll(0.05)
            if m is not None and not m.error():
                got.append(m.value())
                c.commit(m, asynchronous=False)
    # At least once: a message read just before its partition moved, and not yet
    # committed, may be read again by the new owner; nothing may be missing.
    assert set(got) == everything
    assert len(got) - len(everything) <= 2, "more re-reads than in-flight messages"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (c1.assignment() and c2.assignment()):
        c1.poll(0.05)
        c2.poll(0.05)
    parts1 = {tp.partition for tp in c1.assignment()}
    parts2 = {tp.partition for tp in c2.assignment()}
    assert parts1 and parts2 and not parts1 & parts2 and parts1 | parts2 == set(range(4))
    listed = admin.list_consumer_groups().result(10)
    assert "g848" in {g.group_id for g in listed.valid}
    # AdminClient describes it through ConsumerGroupDescribe: members and assignments.
    desc = admin.describe_consumer_groups(["g848"])["g848"].result(10)
    assert len(desc.members) == 2
    described = [
        {tp.partition for tp in m.assignment.topic_partitions if tp.topic == "k848"}
        for m in desc.members
    ]
    assert sorted(map(sorted, described)) == sorted([sorted(parts1), sorted(parts2)])
    c2.close()
    c1.close()
    # Committed offsets outlive the members: a new member starts where they stopped.
    c3 = Consumer(conf)
    c3.subscribe(["k848"])
    end = time.monotonic() + 4
    extra = []
    while time.monotonic() < end:
        m = c3.poll(0.1)
        if m is not None and not m.error():
            extra.append(m.value())
    c3.close()
    assert extra == []


def test_static_member_restart_keeps_partitions_without_rebalance() -> None:
    async def scenario() -> None:
        coord, clock = make()

        def static(name: str) -> Client:
            return Client(coord, name, instance_id=f"pod-{name}")

        a, b = static("a"), static("b")
        a.beat(["t1"])
        b.beat(["t1"])
        converge([a, b])
        group_epoch = coord.consumer.groups["cg"].epoch
        a_parts, b_parts, b_epoch = a.parts(), b.parts(), b.epoch
        # b restarts: static leave (-2), then a new process with the same instance id.
        b.epoch = -2
        assert b.beat() is ErrorCode.none
        converge([a])
        assert a.parts() == a_parts, "a must not get b's partitions while b restarts"
        twin = static("b")
        twin.member_id = "new-incarnation"
        assert twin.beat(["t1"]) is ErrorCode.none
        assert twin.parts() == b_parts and twin.epoch == b_epoch
        assert coord.consumer.groups["cg"].epoch == group_epoch
        converge([a, twin])
        assert a.parts() == a_parts and twin.parts() == b_parts
        # A second process claiming a live instance id is refused.
        clash = static("b")
        clash.member_id = "impostor"
        assert clash.beat(["t1"]) is ErrorCode.unreleased_instance_id
        # A static member that never comes back is expired after the session timeout.
        twin.epoch = -2
        twin.beat()
        for _ in range(3):
            clock.advance(4000)
            coord.timers.run_due()
            a.beat()
        converge([a])
        assert a.parts() == set(range(6))

    asyncio.run(scenario())


def test_librdkafka_static_member_restart_in_consumer_protocol(broker_factory) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    b = broker_factory(**{"group.consumer.heartbeat.interval.ms": "300"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("k848s", 4, 1)])["k848s"].result(15)
    assigns: list[list[int]] = []

    def conf(instance: str) -> dict[str, object]:
        return {
            "bootstrap.servers": b.bootstrap,
            "group.id": "g848s",
            "group.protocol": "consumer",
            "group.instance.id": instance,
        }

    def poll_until(consumers: list, cond, timeout: float) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c in consumers:
                c.poll(0.05)
            if cond():
                return
        raise AssertionError("timed out")

    other = Consumer(conf("other"))
    other.subscribe(
        ["k848s"], on_assign=lambda c, ps: assigns.append(sorted(p.partition for p in ps))
    )
    pod = Consumer(conf("pod"))
    pod.subscribe(["k848s"])
    poll_until(
        [other, pod], lambda: len(other.assignment()) == 2 and len(pod.assignment()) == 2, 20
    )
    pod_parts = sorted(tp.partition for tp in pod.assignment())
    seen = len(assigns)
    pod.close()  # a static member leaves with epoch -2: its partitions wait for it
    end = time.monotonic() + 1  # the other member keeps running meanwhile
    while time.monotonic() < end:
        other.poll(0.05)
    pod = Consumer(conf("pod"))
    pod.subscribe(["k848s"])
    poll_until([other, pod], lambda: len(pod.assignment()) == 2, 20)
    end = time.monotonic() + 2
    while time.monotonic() < end:
        other.poll(0.05)
        pod.poll(0.05)
    assert sorted(tp.partition for tp in pod.assignment()) == pod_parts
    assert len(other.assignment()) == 2
    assert len(assigns) == seen, f"the other member was reassigned: {assigns}"
    pod.close()
    other.close()


def test_librdkafka_consumer_protocol_survives_broker_restart(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """Membership is not persisted: after the restart the member is unknown, rejoins with
    epoch 0 and continues from its committed offsets, without losing or repeating data."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    b = broker_factory(**{"group.consumer.heartbeat.interval.ms": "300"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("k848r", 2, 1)])["k848r"].result(15)

    def produce(lo: int, hi: int) -> None:
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(lo, hi):
            p.produce("k848r", str(i).encode(), partition=i % 2)
        assert p.flush(30) == 0

    def drain(c: Consumer, want: int, timeout: float) -> list[int]:
        got: list[int] = []
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is not None and not m.error():
                got.append(int(m.value()))
                c.commit(m, asynchronous=False)
        return got

    produce(0, 10)
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "g848r",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    assigned: list[list[int]] = []
    c.subscribe(["k848r"], on_assign=lambda _c, ps: assigned.append([p.partition for p in ps]))
    try:
        assert sorted(drain(c, 10, 20)) == list(range(10))
        rounds = len(assigned)
        b.restart()
        # The restarted broker has forgotten the member (membership is not persisted, unlike
        # Kafka's ConsumerGroupMemberMetadata records): until the member's next heartbeat
        # answers UNKNOWN_MEMBER_ID and it rejoins, a commit with its old epoch is refused
        # UNKNOWN_MEMBER_ID. Wait for the rejoin's assignment before producing, so the test
        # checks that the rejoined member continues from its committed offsets.
        deadline = time.monotonic() + 30
        while len(assigned) == rounds and time.monotonic() < deadline:
            m = c.poll(0.1)
            assert m is None or m.error(), "a record arrived before anything new was produced"
        assert len(assigned) > rounds, "the member never rejoined after the restart"
        produce(10, 20)
        assert sorted(drain(c, 10, 40)) == list(range(10, 20))
    finally:
        c.close()


def test_regex_subscription_follows_new_topics() -> None:
    async def scenario() -> None:
        ids = {name: (uuid.uuid4(), 2) for name in ("rx-a", "rx-b", "other")}
        coord = GroupCoordinator(
            *_memory_log(4),
            GroupConfig(),
            ManualClock(),
            topic_resolver=ids.get,
            topic_lister=lambda: list(ids),
        )
        coord.load()
        res = coord.consumer_group_heartbeat(
            "rg", "", 0, None, None, 30_000, None, None, "c", "/h", regex="rx-.*"
        )
        assert res.error is ErrorCode.none and res.assignment is not None
        assert set(res.assignment) == {ids["rx-a"][0], ids["rx-b"][0]}
        ids["rx-new"] = (uuid.uuid4(), 1)
        res = coord.consumer_group_heartbeat(
            "rg", res.member_id, res.member_epoch, None, None, 30_000, None, {}, "c", "/h"
        )
        # (the member reported owning nothing yet: it gets the new topic too)
        assert res.assignment is not None and ids["rx-new"][0] in res.assignment
        bad = coord.consumer_group_heartbeat(
            "rg", "", 0, None, None, 30_000, None, None, "c", "/h", regex="rx-("
        )
        assert bad.error is ErrorCode.invalid_regular_expression

    asyncio.run(scenario())


def test_librdkafka_regex_subscription(broker_factory) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    b = broker_factory(**{"group.consumer.heartbeat.interval.ms": "300"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for name in ("rx-a", "rx-b", "zz"):
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "g-rx",
            "group.protocol": "consumer",
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    c.subscribe(["^rx-.*"])

    def topics() -> set[str]:
        return {tp.topic for tp in c.assignment()}

    try:
        deadline = time.monotonic() + 20
        while topics() != {"rx-a", "rx-b"} and time.monotonic() < deadline:
            c.poll(0.1)
        assert topics() == {"rx-a", "rx-b"}
        admin.create_topics([NewTopic("rx-c", 1, 1)])["rx-c"].result(15)
        deadline = time.monotonic() + 20
        while "rx-c" not in topics() and time.monotonic() < deadline:
            c.poll(0.1)
        assert topics() == {"rx-a", "rx-b", "rx-c"}
    finally:
        c.close()
