"""Deleting a share group writes the tombstones still owed for its departed members
(yak/share/group.py's `delete_group`), through the real `GroupCoordinator` and its runtime
on the in-memory coordinator log, replayed by a new coordinator on the same log as in
tests/share/test_share_membership.py.

A member that expired (or left) while its tombstones' write failed still has live records
in `__consumer_offsets`, and its notes wait in `pending` for the next write. The delete
used to replace those notes with its own (the group and its present members), so the
departed member's records were never tombstoned: once the group id was used again, a new
coordinator's replay brought that member back into the new group (a ghost holding it
non-empty, with an assignment, for a whole session)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from yak.coordinator.memory import MemoryCoordinatorLog
from yak.coordinator.timer import ManualClock
from yak.errors import ErrorCode, NotLeaderOrFollowerError
from yak.group.coordinator import GroupConfig, GroupCoordinator
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


def test_a_deleted_group_takes_the_tombstones_a_failed_write_still_owed() -> None:
    async def scenario() -> None:
        log, clock = MemoryCoordinatorLog(4), ManualClock()
        a = Node(log, clock)
        assert (await a.hb("m1", 0)).error is ErrorCode.none
        clock.advance(46_000)
        assert a.groups.expire_members() == [("g", "m1")]
        log.fail_next.append(NotLeaderOrFollowerError("a failed write"))
        assert await a.groups.flush("g") is ErrorCode.not_coordinator  # the sweep's write
        assert a.groups.pending["g"]  # m1's tombstones, owed
        assert await a.groups.delete_group("g") is ErrorCode.none  # the group is empty
        assert "g" not in a.groups.pending
        # the same group id again, then a new coordinator replays the log: only m2
        b = Node(log, clock)
        assert b.groups.get("g") is None
        assert (await b.hb("m2", 0)).error is ErrorCode.none
        g = Node(log, clock).groups.get("g")
        assert g is not None and set(g.members) == {"m2"}, g.members
    asyncio.run(scenario())
