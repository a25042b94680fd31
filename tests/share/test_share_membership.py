"""Share group membership on the group coordinator's runtime (issue 24): the records of
`__consumer_offsets` (yak/share/group_records.py), written through the real
`GroupCoordinator` and its runtime on the in-memory coordinator log, and replayed by a new
coordinator on the same log (a restart, or a failover to another broker).

The wire and real brokers: tests/share/test_share_membership_restart.py and
test_share_membership_failover.py."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from yak.coordinator.memory import MemoryCoordinatorLog
from yak.coordinator.timer import ManualClock
from yak.errors import ErrorCode
from yak.group.coordinator import GroupConfig, GroupCoordinator
from yak.share import group_records as gr
from yak.share.group import ShareGroups

TOPIC_ID = uuid.UUID(int=7)


def _topics(name: str) -> tuple[uuid.UUID, int] | None:
    return (TOPIC_ID, 3) if name == "q" else None


class Node:
    """One broker's group coordinator and share groups, wired as the composition does."""

    def __init__(self, log: MemoryCoordinatorLog, clock: ManualClock) -> None:
        self.coord = GroupCoordinator(log, log, GroupConfig(), clock)
        self.groups = ShareGroups(clock, _topics, session_timeout_ms=45_000,
                                  store=self.coord)
        self.coord.shards.on_share_loaded = self.groups.load_partition
        self.coord.shards.on_share_unloaded = self.groups.unload_partition
        self.coord.load()

    async def hb(self, member: str, epoch: int, subscribed: Any = ("q",)) -> Any:
        return await self.groups.durable_heartbeat(
            "g", member, epoch, None if subscribed is None else list(subscribed))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_records_round_trip_in_kafkas_shapes() -> None:
    key = gr.encode_key(gr.MEMBER_METADATA, "g", "m")
    assert key == b"\x00\x0a\x00\x01g\x00\x01m"
    assert gr.decode_key(key) == gr.ShareGroupKey(10, "g", "m")
    assert gr.decode_key(gr.encode_key(gr.GROUP_METADATA, "g")) == gr.ShareGroupKey(11, "g")
    assert gr.decode_key(b"\x00\x02\x00\x01g") is None  # a classic group's key
    meta = gr.MemberMetadata(None, "c", "/1.2.3.4", ("a", "b"))
    assert gr.decode_member_metadata(gr.encode_member_metadata(meta)) == meta
    assert gr.decode_group_epoch(gr.encode_group_epoch(42)) == 42
    cur = gr.CurrentAssignment(5, 4, gr.STABLE, {TOPIC_ID: (0, 1, 2)})
    assert gr.decode_current_assignment(gr.encode_current_assignment(cur)) == cur


def test_a_new_coordinator_replays_members_epochs_and_assignments() -> None:
    async def scenario() -> None:
        log, clock = MemoryCoordinatorLog(4), ManualClock()
        a = Node(log, clock)
        r1 = await a.hb("m1", 0)
        r2 = await a.hb("m2", 0)
        assert r1.error is ErrorCode.none and r2.error is ErrorCode.none
        r1 = await a.hb("m1", r1.member_epoch, None)  # catches up with m2's join
        assert (r1.member_epoch, r2.member_epoch) == (2, 2)
        before = a.groups.get("g")
        assert before is not None
        # a restart (or the partition moving): a new coordinator on the same log
        clock.advance(60_000)  # past the session timeout: the load restarts the timers
        b = Node(log, clock)
        g = b.groups.get("g")
        assert g is not None and g.epoch == before.epoch == 2
        assert {m: (x.epoch, x.subscribed, x.assignment) for m, x in g.members.items()} == {
            "m1": (2, ("q",), {TOPIC_ID: (0, 1, 2)}),
            "m2": (2, ("q",), {TOPIC_ID: (0, 1, 2)})}
        assert b.groups.expire_members() == []  # sessions started at the load
        # members go on with their epochs; a stale one is fenced
        ok = await b.hb("m1", 2, None)
        assert ok.error is ErrorCode.none and ok.member_epoch == 2
        assert (await b.hb("m2", 1, None)).error is ErrorCode.fenced_member_epoch
        # a member rejoining gets an epoch above every one before
        r3 = await b.hb("m3", 0)
        assert r3.member_epoch == 3
    run(scenario())


def test_leaving_and_expiring_write_tombstones() -> None:
    async def scenario() -> None:
        log, clock = MemoryCoordinatorLog(4), ManualClock()
        a = Node(log, clock)
        r1 = await a.hb("m1", 0)
        await a.hb("m2", 0)
        assert (await a.hb("m1", -1, None)).error is ErrorCode.none  # leaves
        clock.advance(46_000)
        assert a.groups.expire_members() == [("g", "m2")]
        assert await a.groups.flush("g") is ErrorCode.none  # the sweep's write
        b = Node(log, clock)
        g = b.groups.get("g")
        assert g is not None and g.members == {} and g.epoch == 4
        assert (await b.hb("m1", r1.member_epoch, None)).error is ErrorCode.unknown_member_id
        # deletion: the group's own record goes too
        assert await b.groups.delete_group("g") is ErrorCode.none
        assert Node(log, clock).groups.get("g") is None
    run(scenario())


def test_a_failed_write_answers_its_error_and_is_written_again() -> None:
    async def scenario() -> None:
        log, clock = MemoryCoordinatorLog(4), ManualClock()
        a = Node(log, clock)
        from yak.errors import NotLeaderOrFollowerError
        log.fail_next.append(NotLeaderOrFollowerError("moved"))
        r = await a.hb("m1", 0)
        assert r.error is ErrorCode.not_coordinator
        assert a.groups.pending["g"]  # kept for the next write
        r = await a.hb("m1", 0)  # the client retries the join
        assert r.error is ErrorCode.none and r.member_epoch == 1
        g = Node(log, clock).groups.get("g")
        assert g is not None and set(g.members) == {"m1"} and g.epoch == 1
    run(scenario())


def test_an_unloaded_partition_takes_its_groups_without_removing_members() -> None:
    async def scenario() -> None:
        log, clock = MemoryCoordinatorLog(4), ManualClock()
        a = Node(log, clock)
        await a.hb("m1", 0)
        removed: list[str] = []
        a.groups.on_member_removed = lambda _g, m, _e: removed.append(m)
        a.coord.on_resignation(a.coord.partition_for("g"))
        assert a.groups.get("g") is None and removed == [] and not a.groups.pending
        r = await a.hb("m1", 1, None)
        assert r.error is ErrorCode.not_coordinator
    run(scenario())
