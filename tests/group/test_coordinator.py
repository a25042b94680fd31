"""The group coordinator driven directly: plain method calls and a fake clock.

Each test plays the client side of Kafka's protocol step by step, so the state
machine's transitions (and the error codes a real client would see) are checked
without a socket or a single real sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from yak.coordinator.memory import MemoryCoordinatorLog
from yak.coordinator.timer import ManualClock
from yak.errors import ErrorCode, KafkaStorageError
from yak.group import records as rec
from yak.group.consumer_protocol import encode_assignment, encode_subscription
from yak.group.coordinator import (
    GroupConfig,
    GroupCoordinator,
    JoinResult,
    OffsetToCommit,
    SyncResult,
)
from yak.group.state import GroupState

pytestmark = pytest.mark.timeout(30)

SUB = encode_subscription(["t"])
PROTOCOLS = [("range", SUB)]


class Harness:
    def __init__(self, log: MemoryCoordinatorLog | None = None, **cfg: Any) -> None:
        cfg.setdefault("initial_rebalance_delay_ms", 3000)
        self.clock = ManualClock()
        self.log = log or MemoryCoordinatorLog(4)
        self.coord = GroupCoordinator(self.log, self.log, GroupConfig(**cfg), self.clock)
        self.coord.load()

    async def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.coord.timers.run_due()
        await settle()

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        instance: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
    ) -> asyncio.Task[JoinResult]:
        return asyncio.ensure_future(
            self.coord.join_group(
                group,
                member_id,
                instance,
                "client",
                "/127.0.0.1",
                session_ms,
                rebalance_ms,
                protocol_type,
                protocols or PROTOCOLS,
            )
        )

    async def join_new(self, group: str = "g", **kw: Any) -> asyncio.Task[JoinResult]:
        """The KIP-394 round trip: get a member id, then join with it (still pending)."""
        first = await self.join(group, **kw)
        assert first.error is ErrorCode.member_id_required
        assert first.member_id
        return self.join(group, member_id=first.member_id, **kw)

    def sync(
        self,
        gen: int,
        member_id: str,
        assignments: dict[str, bytes] | None = None,
        group: str = "g",
        instance: str | None = None,
    ) -> asyncio.Task[SyncResult]:
        return asyncio.ensure_future(
            self.coord.sync_group(
                group, gen, member_id, instance, "consumer", "range", assignments or {}
            )
        )

    def state(self, group: str = "g") -> GroupState:
        return self.coord.groups[group].state

    async def stable_group(self, n: int, group: str = "g") -> list[JoinResult]:
        """n members through one rebalance to Stable; returns their join results."""
        tasks = [await self.join_new(group) for _ in range(n)]
        await settle()
        for _ in range(n + 1):  # every arrival during the delay extends it once
            await self.advance(3000)
        results = [t.result() for t in tasks]
        leader = next(r for r in results if r.member_id == r.leader_id)
        assignments = {r.member_id: encode_assignment({"t": [i]}) for i, r in enumerate(results)}
        syncs = [self.sync(r.generation_id, r.member_id, assignments, group) for r in results]
        await settle()
        assert all(s.done() for s in syncs)
        assert {s.result().error for s in syncs} == {ErrorCode.none}
        assert self.state(group) is GroupState.STABLE
        assert leader.members
        return results


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(fn())


# ---------------------------------------------------------------- join / sync


def test_first_join_requires_member_id_then_waits_for_initial_delay() -> None:
    async def scenario() -> None:
        h = Harness()
        task = await h.join_new()
        await settle()
        assert not task.done()
        assert h.state() is GroupState.PREPARING_REBALANCE
        await h.advance(2999)
        assert not task.done()
        await h.advance(1)
        res = task.result()
        assert res.error is ErrorCode.none
        assert res.generation_id == 1
        assert res.leader_id == res.member_id
        assert res.protocol_name == "range"
        assert [m[0] for m in res.members] == [res.member_id]
        assert h.state() is GroupState.COMPLETING_REBALANCE
        sync = await h.sync(1, res.member_id, {res.member_id: b"A"})
        assert sync.error is ErrorCode.none and sync.assignment == b"A"
        assert h.state() is GroupState.STABLE
        assert h.coord.heartbeat("g", 1, res.member_id, None) is ErrorCode.none

    run(scenario)


def test_members_arriving_during_initial_delay_share_one_generation() -> None:
    async def scenario() -> None:
        h = Harness()
        a = await h.join_new()
        await h.advance(2000)
        b = await h.join_new()
        await h.advance(2000)  # first delay ended, but a member arrived: extended
        assert not a.done()
        c = await h.join_new()
        await h.advance(3000)  # c arrived during the extension: extended again
        assert not a.done()
        await h.advance(3000)
        await h.advance(3000)
        results = [t.result() for t in (a, b, c)]
        assert {r.generation_id for r in results} == {1}
        leader = [r for r in results if r.members]
        assert len(leader) == 1 and len(leader[0].members) == 3
        followers = [r for r in results if r is not leader[0]]
        # Followers wait in SyncGroup until the leader hands in the assignment.
        waits = [h.sync(1, r.member_id) for r in followers]
        await settle()
        assert not any(w.done() for w in waits)
        plan = {r.member_id: r.member_id.encode() for r in results}
        lead = await h.sync(1, leader[0].member_id, plan)
        await settle()
        assert lead.assignment == leader[0].member_id.encode()
        for w, r in zip(waits, followers, strict=True):
            assert w.result().assignment == r.member_id.encode()

    run(scenario)


def test_new_member_triggers_rebalance_and_heartbeat_says_rebalance_in_progress() -> None:
    async def scenario() -> None:
        h = Harness()
        (a,) = await h.stable_group(1)
        c = await h.join_new()
        await settle()
        assert h.state() is GroupState.PREPARING_REBALANCE
        assert h.coord.heartbeat("g", 1, a.member_id, None) is ErrorCode.rebalance_in_progress
        assert not c.done()
        # The old member rejoins: everyone known has joined, the barrier opens at once.
        a2 = await h.join(member_id=a.member_id)
        await settle()
        assert a2.generation_id == 2 and c.result().generation_id == 2
        assert a2.leader_id == a.member_id  # the leader keeps its role
        assert len(a2.members) == 2

    run(scenario)


def test_member_that_does_not_rejoin_is_dropped_at_rebalance_timeout() -> None:
    async def scenario() -> None:
        h = Harness()
        a, b = await h.stable_group(2)
        c = await h.join_new()
        a2 = h.join(member_id=a.member_id)
        await settle()
        await h.advance(5000)
        # b keeps heartbeating but never rejoins.
        assert h.coord.heartbeat("g", 1, b.member_id, None) is ErrorCode.rebalance_in_progress
        assert not a2.done()
        await h.advance(25_000)  # rebalance timeout (30 s) reached
        assert a2.result().generation_id == 2
        assert {m[0] for m in a2.result().members} == {a.member_id, c.result().member_id}
        assert h.coord.heartbeat("g", 2, b.member_id, None) is ErrorCode.unknown_member_id

    run(scenario)


def test_session_timeout_removes_silent_member_and_rebalances() -> None:
    async def scenario() -> None:
        h = Harness()
        a, b = await h.stable_group(2)
        assert h.coord.heartbeat("g", 1, a.member_id, None) is ErrorCode.none
        assert h.coord.heartbeat("g", 1, b.member_id, None) is ErrorCode.none
        for _ in range(2):
            await h.advance(4000)
            assert h.coord.heartbeat("g", 1, a.member_id, None) is ErrorCode.none
        assert h.state() is GroupState.STABLE
        await h.advance(4000)  # b has been silent for 12 s > its 10 s session timeout
        assert h.state() is GroupState.PREPARING_REBALANCE
        assert h.coord.heartbeat("g", 1, a.member_id, None) is ErrorCode.rebalance_in_progress
        a2 = await h.join(member_id=a.member_id)
        assert a2.generation_id == 2 and [m[0] for m in a2.members] == [a.member_id]

    run(scenario)


def test_leave_group_batch_empties_group_and_persists_it() -> None:
    async def scenario() -> None:
        h = Harness()
        a, b = await h.stable_group(2)
        top, results = h.coord.leave_group(
            "g", [(a.member_id, None), (b.member_id, None), ("nobody", None)]
        )
        await settle()
        assert top is ErrorCode.none
        assert [r.error for r in results] == [
            ErrorCode.none,
            ErrorCode.none,
            ErrorCode.unknown_member_id,
        ]
        assert h.state() is GroupState.EMPTY
        assert h.coord.groups["g"].generation_id == 2
        key, value = h.log.records(h.coord.partition_for("g"))[-1]
        assert rec.decode_key(key) == rec.GroupKey("g")
        assert value is not None
        gv = rec.decode_group_value(value)
        assert gv.generation == 2 and gv.members == ()

    run(scenario)


def test_static_member_restart_gets_old_assignment_without_rebalance() -> None:
    async def scenario() -> None:
        h = Harness()
        first = h.join(instance="pod-1")  # static members skip MEMBER_ID_REQUIRED
        await settle()
        await h.advance(3000)
        r = first.result()
        other = await h.join_new()
        r2 = h.join(member_id=r.member_id, instance="pod-1")
        await settle()
        res, o = r2.result(), other.result()
        plan = {res.member_id: b"P1", o.member_id: b"P2"}
        s1 = h.sync(res.generation_id, res.member_id, plan, instance="pod-1")
        s2 = h.sync(o.generation_id, o.member_id)
        await settle()
        assert s1.result().assignment == b"P1" and s2.result().assignment == b"P2"
        gen = h.coord.groups["g"].generation_id
        # The pod restarts: it knows its instance id but not its member id.
        again = await h.join(instance="pod-1")
        assert again.error is ErrorCode.none
        assert again.generation_id == gen
        assert again.member_id != res.member_id
        assert h.state() is GroupState.STABLE
        s = await h.sync(gen, again.member_id, instance="pod-1")
        assert s.assignment == b"P1"
        assert h.coord.heartbeat("g", gen, o.member_id, None) is ErrorCode.none
        # The old incarnation is fenced.
        assert h.coord.heartbeat("g", gen, res.member_id, "pod-1") is ErrorCode.fenced_instance_id

    run(scenario)


def test_cooperative_style_rejoin_with_changed_metadata_rebalances() -> None:
    async def scenario() -> None:
        h = Harness()
        (a,) = await h.stable_group(1)
        new_meta = [("cooperative-sticky", SUB), ("range", SUB)]
        a2 = await h.join(member_id=a.member_id, protocols=new_meta)
        assert a2.generation_id == 2
        # A single member votes for its first choice.
        assert a2.protocol_name == "cooperative-sticky"

    run(scenario)


# ---------------------------------------------------------------- bad input


def test_bad_input_gets_kafka_error_codes_and_group_stays_consistent() -> None:
    async def scenario() -> None:
        h = Harness()
        a, b = await h.stable_group(2)
        c = h.coord
        assert (await h.join(member_id="ghost")).error is ErrorCode.unknown_member_id
        assert (await h.sync(1, "ghost")).error is ErrorCode.unknown_member_id
        assert c.heartbeat("g", 1, "ghost", None) is ErrorCode.unknown_member_id
        assert c.heartbeat("g", 7, a.member_id, None) is ErrorCode.illegal_generation
        assert (await h.sync(7, a.member_id)).error is ErrorCode.illegal_generation
        bad_type = await h.join(protocol_type="connect")
        assert bad_type.error is ErrorCode.inconsistent_group_protocol
        bad_proto = await h.join(protocols=[("roundrobin-only", SUB)])
        assert bad_proto.error is ErrorCode.inconsistent_group_protocol
        assert (await h.join(group="")).error is ErrorCode.invalid_group_id
        assert (await h.join(group="x" * 40_000)).error is ErrorCode.invalid_group_id
        assert c.heartbeat("", 1, a.member_id, None) is ErrorCode.invalid_group_id
        assert (await h.join(session_ms=10)).error is ErrorCode.invalid_session_timeout
        codes = await c.commit_offsets(
            "g",
            1,
            a.member_id,
            None,
            [
                OffsetToCommit("t", 0, 5, metadata="m" * 5000),
                OffsetToCommit("t", 1, 6, metadata="ok"),
            ],
        )
        assert codes == [ErrorCode.offset_metadata_too_large, ErrorCode.none]
        assert await c.commit_offsets("g", 9, a.member_id, None, [OffsetToCommit("t", 0, 1)]) == [
            ErrorCode.illegal_generation
        ]
        assert await c.commit_offsets("g", 1, "ghost", None, [OffsetToCommit("t", 0, 1)]) == [
            ErrorCode.unknown_member_id
        ]
        # Nothing above disturbed the group.
        assert h.state() is GroupState.STABLE
        assert set(c.groups["g"].members) == {a.member_id, b.member_id}
        assert c.heartbeat("g", 1, a.member_id, None) is ErrorCode.none
        _, fetched = c.fetch_offsets("g", [("t", [0, 1])])
        assert [(f.partition, f.offset, f.metadata) for f in fetched] == [
            (0, -1, ""),
            (1, 6, "ok"),
        ]

    run(scenario)


def test_commit_during_completing_rebalance_is_refused() -> None:
    async def scenario() -> None:
        h = Harness()
        t = await h.join_new()
        await h.advance(3000)
        await h.advance(3000)
        r = t.result()
        assert h.state() is GroupState.COMPLETING_REBALANCE
        codes = await h.coord.commit_offsets("g", 1, r.member_id, None, [OffsetToCommit("t", 0, 1)])
        assert codes == [ErrorCode.rebalance_in_progress]

    run(scenario)


# ---------------------------------------------------------------- offsets & persistence


def test_offsets_and_group_survive_a_restart() -> None:
    async def scenario() -> None:
        h = Harness()
        a, b = await h.stable_group(2)
        codes = await h.coord.commit_offsets(
            "g",
            1,
            a.member_id,
            None,
            [OffsetToCommit("t", 0, 42, 3, "meta-0"), OffsetToCommit("t", 1, 7)],
        )
        assert codes == [ErrorCode.none, ErrorCode.none]
        # A simple (non-group-managed) consumer's offsets too.
        assert await h.coord.commit_offsets("solo", -1, "", None, [OffsetToCommit("x", 0, 9)]) == [
            ErrorCode.none
        ]
        await settle()
        h2 = Harness(log=h.log)  # a new coordinator replaying the same log
        g = h2.coord.groups["g"]
        assert g.state is GroupState.STABLE
        assert g.generation_id == 1
        assert set(g.members) == {a.member_id, b.member_id}
        assert g.leader_id == a.leader_id
        _, fetched = h2.coord.fetch_offsets("g", None)
        assert [(f.partition, f.offset, f.leader_epoch, f.metadata) for f in fetched] == [
            (0, 42, 3, "meta-0"),
            (1, 7, -1, ""),
        ]
        assert h2.coord.fetch_offsets("solo", [("x", [0])])[1][0].offset == 9
        # Members that keep heartbeating carry on; the restart did not rebalance.
        assert h2.coord.heartbeat("g", 1, a.member_id, None) is ErrorCode.none
        s = await h2.sync(1, b.member_id)
        assert s.error is ErrorCode.none and s.assignment == encode_assignment({"t": [1]})

    run(scenario)


def test_offsets_of_empty_group_expire_after_retention() -> None:
    async def scenario() -> None:
        h = Harness(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=1000)
        (a,) = await h.stable_group(1)
        await h.coord.commit_offsets("g", 1, a.member_id, None, [OffsetToCommit("t", 0, 5)])
        for _ in range(12):  # still Stable: retention does not start while active
            await h.advance(5000)
            assert h.coord.heartbeat("g", 1, a.member_id, None) is ErrorCode.none
        assert h.coord.expire_offsets() == 0
        h.coord.leave_group("g", [(a.member_id, None)])
        assert h.state() is GroupState.EMPTY
        await h.advance(59_000)
        assert h.coord.expire_offsets() == 0
        await h.advance(1000)
        h.coord.expire_offsets()
        await settle()
        assert "g" not in h.coord.groups
        # The tombstones make the expiry survive a restart.
        assert "g" not in Harness(log=h.log).coord.groups

    run(scenario)


def test_commit_failure_is_retriable_and_leaves_cache_unchanged() -> None:
    async def scenario() -> None:
        h = Harness()
        h.log.fail_next.append(KafkaStorageError("disk full"))
        codes = await h.coord.commit_offsets("s", -1, "", None, [OffsetToCommit("t", 0, 5)])
        assert codes == [ErrorCode.not_coordinator]
        assert h.coord.fetch_offsets("s", [("t", [0])])[1][0].offset == -1

    run(scenario)


def test_delete_groups_and_offset_delete() -> None:
    async def scenario() -> None:
        h = Harness()
        (a,) = await h.stable_group(1)
        await h.coord.commit_offsets(
            "g", 1, a.member_id, None, [OffsetToCommit("t", 0, 1), OffsetToCommit("u", 0, 2)]
        )
        top, codes = await h.coord.delete_offsets("g", [("t", 0), ("u", 0)])
        assert top is ErrorCode.none
        assert codes == [ErrorCode.group_subscribed_to_topic, ErrorCode.none]
        assert ("u", 0) not in h.coord.groups["g"].offsets
        assert await h.coord.delete_groups(["g", "nope", ""]) == [
            ErrorCode.non_empty_group,
            ErrorCode.group_id_not_found,
            ErrorCode.invalid_group_id,
        ]
        h.coord.leave_group("g", [(a.member_id, None)])
        await settle()
        assert await h.coord.delete_groups(["g"]) == [ErrorCode.none]
        assert "g" not in h.coord.groups
        assert (await h.coord.delete_offsets("g", [("t", 0)]))[0] is ErrorCode.group_id_not_found
        assert "g" not in Harness(log=h.log).coord.groups

    run(scenario)


def test_list_and_describe_groups() -> None:
    async def scenario() -> None:
        h = Harness()
        await h.stable_group(2, group="busy")
        await h.coord.commit_offsets("idle", -1, "", None, [OffsetToCommit("t", 0, 1)])
        listing = {g.group_id: g.state for g in h.coord.list_groups()}
        assert listing == {"busy": "Stable", "idle": "Empty"}
        assert [g.group_id for g in h.coord.list_groups(states=["stable"])] == ["busy"]
        d = h.coord.describe_group("busy")
        assert d.error is ErrorCode.none and d.state == "Stable"
        assert d.protocol_type == "consumer" and d.protocol_name == "range"
        assert len(d.members) == 2
        assert {m.assignment for m in d.members} == {
            encode_assignment({"t": [0]}),
            encode_assignment({"t": [1]}),
        }
        assert h.coord.describe_group("missing").error is ErrorCode.group_id_not_found

    run(scenario)


# ---------------------------------------------------------------- records


def test_record_formats_round_trip_and_java_hash() -> None:
    assert rec.java_string_hash("") == 0
    assert rec.java_string_hash("hello") == 99162322
    assert rec.java_string_hash("Aa") == rec.java_string_hash("BB") == 2112
    assert rec.java_string_hash("polygenelubricants") == -(2**31)
    assert rec.partition_for("polygenelubricants", 50) == 0  # Kafka's abs(MIN_VALUE) = 0
    assert rec.partition_for("hello", 50) == 99162322 % 50
    k = rec.encode_offset_key("g", "t", 3)
    assert k[:2] == b"\x00\x01"
    assert rec.decode_key(k) == rec.OffsetKey("g", "t", 3)
    v = rec.OffsetValue(10, 2, "meta", 1234)
    assert rec.decode_offset_value(rec.encode_offset_value(v)) == v
    gv = rec.GroupValue(
        "consumer",
        4,
        "range",
        "m1",
        99,
        (rec.MemberValue("m1", "i1", "c", "/h", 300, 10, b"sub", b"asg"),),
    )
    assert rec.decode_group_value(rec.encode_group_value(gv)) == gv
    assert rec.decode_key(rec.encode_group_key("g")) == rec.GroupKey("g")


@pytest.mark.parametrize("delay", [0])
def test_without_initial_delay_single_member_joins_at_once(delay: int) -> None:
    async def scenario() -> None:
        h = Harness(initial_rebalance_delay_ms=delay)
        t = await h.join_new()
        await settle()
        assert t.result().generation_id == 1

    run(scenario)


def test_timer_queue_stays_small_when_timers_are_rearmed() -> None:
    from yak.coordinator.timer import TimerQueue

    clock = ManualClock()
    q = TimerQueue(clock)
    fired: list[int] = []
    for i in range(100_000):  # 10 keys re-armed 10,000 times each
        q.schedule(i % 10, clock.now + 1000 + i, lambda i=i: fired.append(i))
    assert len(q) == 10
    assert len(q._heap) <= 4 * 10 + 1024 + 1
    clock.advance(200_000)
    assert q.run_due() == 10
    assert sorted(fired) == list(range(99_990, 100_000))


def test_offsets_of_deleted_topics_are_dropped_at_the_next_check() -> None:
    async def scenario() -> None:
        topics = {"kept": ("id1", 1), "doomed": ("id2", 1)}
        clock = ManualClock()
        log = MemoryCoordinatorLog(4)
        coord = GroupCoordinator(log, log, GroupConfig(), clock, topic_resolver=topics.get)
        coord.load()
        h = Harness(log=log)
        h.coord, h.clock = coord, clock
        (a,) = await h.stable_group(1)
        offsets = [OffsetToCommit("kept", 0, 1), OffsetToCommit("doomed", 0, 2)]
        assert await coord.commit_offsets("g", 1, a.member_id, None, offsets) == [
            ErrorCode.none,
            ErrorCode.none,
        ]
        assert coord.expire_offsets() == 0
        del topics["doomed"]
        assert coord.expire_offsets() == 1  # even though the group is active
        await settle()
        assert set(coord.groups["g"].offsets) == {("kept", 0)}
        reloaded = GroupCoordinator(log, log, GroupConfig(), clock)
        reloaded.load()
        assert set(reloaded.groups["g"].offsets) == {("kept", 0)}

    run(scenario)


def test_each_shard_owns_its_groups_unload_drops_exactly_them_and_load_rebuilds_them() -> None:
    """Kafka's GroupCoordinatorShard: a partition's groups live in its shard. Resigning
    one partition drops its groups (a member waiting in JoinGroup there is answered
    NOT_COORDINATOR) and nothing of another partition's; electing it again rebuilds the
    same groups from the log."""

    async def scenario() -> None:
        h = Harness()
        coord, log = h.coord, h.log
        coord.manage_partitions()
        for p in range(log.num_partitions):
            coord.on_election(p, 0)
        # two groups on different partitions
        ids = [f"g{i}" for i in range(40)]
        a = ids[0]
        b = next(g for g in ids if coord.partition_for(g) != coord.partition_for(a))
        pa, pb = coord.partition_for(a), coord.partition_for(b)
        for gid, off in ((a, 11), (b, 22)):
            assert await coord.commit_offsets(gid, -1, "", None, [OffsetToCommit("t", 0, off)]) == [
                ErrorCode.none]
        waiting = await h.join_new(a)  # a member of `a` waiting at the join barrier
        await settle()
        assert not waiting.done()
        shard_a = coord.runtime.context(pa).shard
        assert set(shard_a.groups) == {a} and b not in shard_a.groups
        assert b in coord.runtime.context(pb).shard.groups

        log.leader_epochs[pa] = 1
        coord.on_resignation(pa, 1)
        await settle()
        assert waiting.result().error is ErrorCode.not_coordinator
        assert a not in coord.groups and b in coord.groups
        assert coord.fetch_offsets(a, None)[0] is ErrorCode.not_coordinator
        err, got = coord.fetch_offsets(b, [("t", [0])])
        assert err is ErrorCode.none and got[0].offset == 22
        assert not shard_a.groups  # dropped with the shard

        coord.on_election(pa, 1)  # led here again: rebuilt from the log
        assert set(coord.runtime.context(pa).shard.groups) == {a}
        err, got = coord.fetch_offsets(a, [("t", [0])])
        assert err is ErrorCode.none and got[0].offset == 11
        assert coord.groups[a].state is GroupState.EMPTY  # the unfinished join left no trace
        await coord.stop()

    run(scenario)


def test_a_big_partition_loads_in_steps_answering_load_in_progress_meanwhile() -> None:
    """The runtime replays a partition one chunk per turn of the event loop: until the
    last chunk the group's requests get COORDINATOR_LOAD_IN_PROGRESS and another
    partition's are served; then every offset is there."""

    async def scenario() -> None:
        h = Harness()
        coord, log = h.coord, h.log
        gid = "big"
        other = next(f"o{i}" for i in range(40)
                     if coord.partition_for(f"o{i}") != coord.partition_for(gid))
        p = coord.partition_for(gid)
        for i in range(50):
            assert await coord.commit_offsets(gid, -1, "", None, [
                OffsetToCommit("t", i, i)]) == [ErrorCode.none]
        coord.manage_partitions()
        log.chunk_records = 10  # 5 steps
        for q in range(log.num_partitions):
            log.leader_epochs[q] = 1
            coord.on_election(q, 1)
        assert coord.partition_loading(p)
        assert coord.fetch_offsets(gid, None)[0] is ErrorCode.coordinator_load_in_progress
        assert await coord.commit_offsets(gid, -1, "", None, [OffsetToCommit("t", 0, 9)]) == [
            ErrorCode.coordinator_load_in_progress]
        assert await coord.commit_offsets(other, -1, "", None, [OffsetToCommit("t", 0, 1)]) == [
            ErrorCode.none]  # another shard is served during the load
        assert await coord.runtime.wait_loaded(p, 5000)
        err, got = coord.fetch_offsets(gid, None)
        assert err is ErrorCode.none and sorted(f.offset for f in got) == list(range(50))
        await coord.stop()

    run(scenario)
