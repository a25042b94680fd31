"""Random interleavings of members' requests and the clock against the state machine.

Whatever the order (joins, rejoins, syncs, heartbeats, leaves, commits, static
restarts, time passing), the coordinator must never raise, every waiting JoinGroup /
SyncGroup must eventually be answered, and the group's bookkeeping must stay
consistent (a Stable group has a leader among its members, an Empty one has none...).
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yak.coordinator.memory import MemoryCoordinatorLog
from yak.coordinator.timer import ManualClock
from yak.errors import ErrorCode
from yak.group.consumer_protocol import encode_subscription
from yak.group.coordinator import GroupConfig, GroupCoordinator, OffsetToCommit
from yak.group.state import GroupState


def _memory_log(n: int) -> tuple[MemoryCoordinatorLog, MemoryCoordinatorLog]:
    """The coordinator's partition writer and loader: one in-memory log plays both."""
    log = MemoryCoordinatorLog(n, "__consumer_offsets")
    return log, log

SUB = encode_subscription(["t"])
OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["join", "join", "sync", "sync", "heartbeat", "leave", "advance", "commit", "restart"]
        ),
        st.integers(0, 3),  # which member
        st.integers(1, 12),  # seconds, for advance
    ),
    max_size=40,
)


def check_invariants(coord: GroupCoordinator) -> None:
    for g in coord.groups.values():
        assert not (g.pending_members & set(g.members))
        for instance, mid in g.static_members.items():
            assert g.members[mid].group_instance_id == instance
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            assert g.members and g.leader_id in g.members
            assert g.protocol_name is not None
        if g.state is GroupState.EMPTY:
            assert not g.members
        if g.state is not GroupState.PREPARING_REBALANCE:
            assert all(m.join_future is None for m in g.members.values())
        if g.state is not GroupState.COMPLETING_REBALANCE:
            assert all(m.sync_future is None or m.sync_future.done() for m in g.members.values())


async def play(ops: list[tuple[str, int, int]]) -> None:
    clock = ManualClock()
    coord = GroupCoordinator(
        *_memory_log(2), GroupConfig(initial_rebalance_delay_ms=1000), clock
    )
    coord.load()
    ids: dict[int, str] = {}
    gens: dict[int, int] = {}
    plans: dict[int, dict[str, bytes]] = {}
    waiting: list[asyncio.Future[Any]] = []

    def instance(i: int) -> str | None:
        return f"static-{i}" if i >= 2 else None  # members 2 and 3 are static

    async def on_join(i: int, fut: Any, auto_sync: bool) -> None:
        res = await fut
        if res.error is ErrorCode.member_id_required or res.error is ErrorCode.none:
            ids[i] = res.member_id
        if res.error is ErrorCode.none:
            gens[i] = res.generation_id
            plans[i] = {m: b"x" for m, _, _ in res.members}  # the leader's assignment
            if auto_sync:  # like a real client, sync right after the join answer
                waiting.append(
                    asyncio.ensure_future(
                        coord.sync_group(
                            "g", res.generation_id, res.member_id, instance(i), None, None, plans[i]
                        )
                    )
                )

    for op, i, secs in ops:
        if op == "join":
            fut = coord.join_group(
                "g",
                ids.get(i, ""),
                instance(i),
                f"c{i}",
                "/h",
                6000,
                10_000,
                "consumer",
                [("range", SUB)],
            )
            waiting.append(asyncio.ensure_future(on_join(i, fut, auto_sync=secs % 2 == 0)))
        elif op == "restart":  # a process restart: the member id is forgotten
            ids.pop(i, None)
        elif op == "sync" and i in ids:
            waiting.append(
                asyncio.ensure_future(
                    coord.sync_group(
                        "g", gens.get(i, 0), ids[i], instance(i), None, None, plans.get(i, {})
                    )
                )
            )
        elif op == "heartbeat" and i in ids:
            coord.heartbeat("g", gens.get(i, 0), ids[i], instance(i))
        elif op == "leave" and i in ids:
            coord.leave_group("g", [(ids[i], instance(i))])
        elif op == "commit":
            await coord.commit_offsets(
                "g", gens.get(i, -1), ids.get(i, ""), instance(i), [OffsetToCommit("t", 0, secs)]
            )
        elif op == "advance":
            clock.advance(secs * 1000)
            coord.timers.run_due()
        for _ in range(5):
            await asyncio.sleep(0)
        check_invariants(coord)

    # Let every timeout play out: nothing may stay blocked forever.
    for _ in range(40):
        clock.advance(1000)
        coord.timers.run_due()
        for _ in range(5):
            await asyncio.sleep(0)
        check_invariants(coord)
    for _ in range(20):
        await asyncio.sleep(0)
    stuck = [f for f in waiting if not f.done()]
    assert not stuck, f"{len(stuck)} requests never answered"
    for f in waiting:
        f.result()  # re-raises anything the coordinator raised


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_random_interleavings_keep_the_group_consistent(ops: list[tuple[str, int, int]]) -> None:
    asyncio.run(play(ops))


CG_OPS = st.lists(
    st.tuples(
        st.sampled_from(["beat", "beat", "beat", "join", "leave", "static-leave", "advance"]),
        st.integers(0, 3),
        st.integers(1, 6),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CG_OPS)
def test_kip848_never_gives_a_partition_to_two_members(ops: list[tuple[str, int, int]]) -> None:
    """Members acknowledge what they are given one heartbeat later (like real clients);
    at no point may two members' acknowledged partitions overlap, and once everyone
    heartbeats for a while, the live members own every partition."""
    import uuid

    topic = uuid.uuid4()
    clock = ManualClock()
    coord = GroupCoordinator(
        *_memory_log(2),
        GroupConfig(consumer_session_timeout_ms=10_000),
        clock,
        topic_resolver={"t": (topic, 6)}.get,
    )
    coord.load()
    state: dict[int, dict[str, Any]] = {}

    def beat(i: int, epoch: int | None = None) -> None:
        st_ = state.setdefault(i, {"id": f"m{i}", "epoch": 0, "owned": set()})
        e = st_["epoch"] if epoch is None else epoch
        res = coord.consumer_group_heartbeat(
            "cg",
            st_["id"],
            e,
            f"inst-{i}" if i == 3 else None,
            None,
            30_000,
            ["t"] if e == 0 else None,
            {topic: set(st_["owned"])},
            "c",
            "/h",
        )
        if res.error is ErrorCode.none:
            if e < 0:
                del state[i]
                return
            st_["epoch"] = res.member_epoch
            if res.assignment is not None:
                st_["owned"] = set(res.assignment.get(topic, set()))
        else:
            state.pop(i, None)  # fenced / unknown: the client starts over

    def no_overlap() -> None:
        seen: set[int] = set()
        for st_ in state.values():
            assert not (st_["owned"] & seen), f"partition owned twice: {state}"
            seen |= st_["owned"]

    for op, i, secs in ops:
        if op == "join" and i not in state:
            beat(i, 0)
        elif op == "beat" and i in state:
            beat(i)
        elif op == "leave" and i in state:
            beat(i, -1)
        elif op == "static-leave" and i in state:
            beat(i, -2)
        elif op == "advance":
            clock.advance(secs * 1000)
            coord.timers.run_due()
            for j in list(state):  # members whose session expired find out on their next beat
                if coord.consumer.member_epoch("cg", state[j]["id"]) is None:
                    state[j]["owned"] = set()
        no_overlap()
    for _ in range(8):  # everyone alive heartbeats until the group settles
        for j in list(state):
            beat(j)
            no_overlap()
    if state:
        owned = set().union(*(st_["owned"] for st_ in state.values()))
        members = coord.consumer.groups["cg"].members
        if all(not m.left_static for m in members.values()):
            assert owned == set(range(6))
