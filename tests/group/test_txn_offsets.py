"""TxnOffsetCommit in the group coordinator: pending until the marker, KIP-447 fencing,
require_stable, and the order against plain commits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.group.test_coordinator import Harness, run
from yak.coordinator.memory import MemoryCoordinatorLog
from yak.errors import ErrorCode
from yak.group.coordinator import OffsetToCommit

pytestmark = pytest.mark.timeout(30)
E = ErrorCode


def fetch(h: Harness, group: str, stable: bool = False) -> Any:
    err, got = h.coord.fetch_offsets(group, [("t", [0, 1])], require_stable=stable)
    assert err is E.none
    return [o.offset if o.error is E.none else o.error for o in got]


def test_pending_until_commit_marker_dropped_on_abort() -> None:
    async def body() -> None:
        h = Harness()
        part = h.coord.partition_for("g")
        codes = await h.coord.txn_commit_offsets("g", 7, 0, -1, "", None,
                                                 [OffsetToCommit("t", 0, 10)])
        assert codes == [E.none]
        assert fetch(h, "g") == [-1, -1]  # invisible
        assert fetch(h, "g", stable=True) == [E.unstable_offset_commit, -1]
        assert h.coord.has_pending_txn_offsets("g")
        # a marker of another producer, or on another partition, changes nothing
        assert h.coord.complete_txn_offsets(8, True, [part]) == 0
        assert h.coord.complete_txn_offsets(7, True, [part + 1]) == 0
        assert h.coord.complete_txn_offsets(7, True, [part]) == 1
        assert fetch(h, "g", stable=True) == [10, -1]
        # the next transaction aborts: its offset never shows
        await h.coord.txn_commit_offsets("g", 7, 0, -1, "", None, [OffsetToCommit("t", 1, 5)])
        assert h.coord.complete_txn_offsets(7, False, [part]) == 0
        assert fetch(h, "g", stable=True) == [10, -1]
        assert not h.coord.has_pending_txn_offsets("g")

    run(body)


def test_a_later_plain_commit_wins_over_an_earlier_transaction() -> None:
    async def body() -> None:
        h = Harness()
        part = h.coord.partition_for("g")
        await h.coord.txn_commit_offsets("g", 7, 0, -1, "", None, [OffsetToCommit("t", 0, 10)])
        assert await h.coord.commit_offsets("g", -1, "", None, [OffsetToCommit("t", 0, 20)]) == [
            E.none]
        h.coord.complete_txn_offsets(7, True, [part])
        assert fetch(h, "g") == [20, -1]

    run(body)


def test_kip_447_generation_and_member_fencing() -> None:
    async def body() -> None:
        h = Harness()
        results = await h.stable_group(1)
        member, gen = results[0].member_id, results[0].generation_id
        ok = await h.coord.txn_commit_offsets("g", 7, 0, gen, member, None,
                                              [OffsetToCommit("t", 0, 1)])
        assert ok == [E.none]
        # a zombie from an older generation, an unknown member
        assert await h.coord.txn_commit_offsets(
            "g", 7, 0, gen - 1, member, None, [OffsetToCommit("t", 0, 2)]) == [
            E.illegal_generation]
        assert await h.coord.txn_commit_offsets(
            "g", 7, 0, gen, "ghost", None, [OffsetToCommit("t", 0, 2)]) == [E.unknown_member_id]
        # without group metadata (generation -1, no member id): accepted, as in Kafka
        assert await h.coord.txn_commit_offsets(
            "g", 7, 0, -1, "", None, [OffsetToCommit("t", 0, 3)]) == [E.none]
        # a group id that cannot be written
        assert await h.coord.txn_commit_offsets(
            "", 7, 0, -1, "", None, [OffsetToCommit("t", 0, 3)]) == [E.invalid_group_id]

    run(body)


def test_static_member_fencing() -> None:
    async def body() -> None:
        h = Harness()
        task = h.join(instance="i-1")  # a static member gets its id without a round trip
        await asyncio.sleep(0)
        for _ in range(3):
            await h.advance(3000)
        r = await asyncio.wait_for(task, 5)
        assert r.error is E.none
        assert await h.coord.txn_commit_offsets(
            "g", 7, 0, r.generation_id, "other-member", "i-1", [OffsetToCommit("t", 0, 1)]) == [
            E.fenced_instance_id]

    run(body)


class _SlowReplicationLog(MemoryCoordinatorLog):
    """The batch lands in the leader's log at once; the wait for the ISR holds until
    `replicated` is set, then fails if `fail` is set (as a replication timeout would)."""

    def __init__(self) -> None:
        super().__init__(4, "__consumer_offsets")
        self.replicated = asyncio.Event()
        self.fail: Exception | None = None

    async def wait_committed(self, appended: object) -> None:
        await self.replicated.wait()
        if self.fail is not None:
            raise self.fail


@pytest.mark.parametrize("commit", [True, False])
def test_a_marker_during_the_replication_wait_settles_the_offsets(commit: bool) -> None:
    """The transaction ends (its marker reaches the partition) while its TxnOffsetCommit
    still waits for the in-sync replicas. The marker must settle those offsets: staged
    only after the wait, they stayed pending for ever and require_stable fetches answered
    UNSTABLE_OFFSET_COMMIT for good."""
    async def body() -> None:
        wal = _SlowReplicationLog()
        h = Harness(wal)
        part = h.coord.partition_for("g")
        commit_task = asyncio.ensure_future(h.coord.txn_commit_offsets(
            "g", 7, 0, -1, "", None, [OffsetToCommit("t", 0, 10)]))
        await asyncio.sleep(0)  # the batch is in the leader's log, the ISR not there yet
        assert fetch(h, "g", stable=True) == [E.unstable_offset_commit, -1]
        assert h.coord.complete_txn_offsets(7, commit, [part]) == (1 if commit else 0)
        wal.replicated.set()
        assert await commit_task == [E.none]
        assert fetch(h, "g", stable=True) == [10 if commit else -1, -1]
        assert not h.coord.has_pending_txn_offsets("g")

    run(body)


def test_a_txn_offset_commit_that_fails_after_its_local_append_leaves_nothing_pending() -> None:
    async def body() -> None:
        from yak.errors import NotEnoughReplicasAfterAppendError

        wal = _SlowReplicationLog()
        wal.fail = NotEnoughReplicasAfterAppendError("the ISR shrank")
        wal.replicated.set()
        h = Harness(wal)
        codes = await h.coord.txn_commit_offsets("g", 7, 0, -1, "", None,
                                                 [OffsetToCommit("t", 0, 10)])
        assert codes != [E.none]
        assert fetch(h, "g", stable=True) == [-1, -1]  # the client retries or aborts
        assert not h.coord.has_pending_txn_offsets("g")

    run(body)
