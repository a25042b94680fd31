"""InitializeShareGroupState and a deleted group's windows, below the wire: the share
coordinator on the coordinator runtime over the in-memory log, replayed as a restarted
broker would (the real brokers: test_share_delete_cluster.py).

Kafka 4.1+'s rules: an initialization writes one ShareSnapshot (start -1: the leader
chooses the start by share.auto.offset.reset), a stored state epoch above the request is
FENCED_STATE_EPOCH, a read of a key with no state is INVALID_REQUEST on the wire. Yak's:
an uninitialized-start initialization leaves an existing state alone, and a window that
never read the current state (a deleted group's) cannot write into it."""

from __future__ import annotations

import asyncio
import uuid

from yak.clock import ManualClock
from yak.coordinator.memory import MemoryCoordinatorLog
from yak.errors import ErrorCode
from yak.share import records as rec
from yak.share.coordinator import ShareCoordinator
from yak.share.initialization import initialize_assignment
from yak.share.persister import CoordinatorPersister
from yak.share.records import ShareKey

TID = uuid.UUID("12345678-1234-5678-1234-567812345678")
KEY = ShareKey("g", TID, 0)


def _coordinator(log: MemoryCoordinatorLog) -> ShareCoordinator:
    c = ShareCoordinator(log, log, ManualClock())
    c.runtime.load_led_partitions()
    return c


def _records(log: MemoryCoordinatorLog, coord: ShareCoordinator) -> list[tuple[int, bool]]:
    """(key version, is a tombstone) of every record of KEY's state partition."""
    return [(rec.decode_key(k)[0], v is None) for k, v in log.records(coord.partition_for(KEY))]


def test_initialize_writes_a_snapshot_and_leaves_an_existing_state_alone() -> None:
    async def run() -> None:
        log = MemoryCoordinatorLog()
        coord = _coordinator(log)
        assert await coord.initialize(KEY, 0, -1) is ErrorCode.none
        assert _records(log, coord) == [(rec.SNAPSHOT, False)]
        _, st = coord.read(KEY, -1)
        assert st is not None and (st.state_epoch, st.leader_epoch, st.start_offset,
                                   st.batches) == (0, -1, -1, [])
        # the leader reads at its epoch (raising the stored one), chooses 5, acquires
        code, st = await coord.read_state(KEY, 3)
        assert code is ErrorCode.none and st is not None and st.start_offset == -1
        assert await coord.write(KEY, 0, 3, 5, [(5, 9, 0, 1)]) is ErrorCode.none
        # another member joins: the group coordinator initializes again, nothing changes
        before = len(_records(log, coord))
        assert await coord.initialize(KEY, 0, -1) is ErrorCode.none
        assert len(_records(log, coord)) == before
        # a restarted coordinator replays the same state
        _, st = _coordinator(log).read(KEY, 3)
        assert st is not None and (st.start_offset, st.batches, st.leader_epoch) == (
            5, [(5, 9, 0, 1)], 3)
        # Kafka's checks: an older state epoch is fenced, a negative partition invalid
        assert await coord.initialize(KEY, 0, 0) is ErrorCode.none  # explicit start
        assert await coord.write(KEY, 1, -1, 7, ()) is ErrorCode.none  # a reset to 1
        assert await coord.initialize(KEY, 0, 0) is ErrorCode.fenced_state_epoch
        assert await coord.initialize(ShareKey("g", TID, -1), 0, -1) is \
            ErrorCode.invalid_request
        # an explicit start replaces the state: nothing in flight, the leader fence kept
        assert await coord.initialize(KEY, 2, 8) is ErrorCode.none
        _, st = coord.read(KEY, -1)
        assert st is not None and (st.state_epoch, st.start_offset, st.batches,
                                   st.leader_epoch) == (2, 8, [], 3)
        assert await coord.write(KEY, 2, 2, 8, ()) is ErrorCode.fenced_leader_epoch

    asyncio.run(run())


def test_a_window_that_never_read_an_initialized_state_is_fenced() -> None:
    """The deleted group's window on its leader (state epoch 0, leader epoch 3) after the
    group was created again: its write is FENCED_STATE_EPOCH until it reads the key; an
    admin write (leader epoch -1) and pruning's snapshot keep the start -1."""
    async def run() -> None:
        log = MemoryCoordinatorLog()
        coord = _coordinator(log)
        assert await coord.initialize(KEY, 0, -1) is ErrorCode.none
        assert await coord.write(KEY, 0, 3, 40, [(40, 49, 0, 2)]) is \
            ErrorCode.fenced_state_epoch
        assert await coord.write(KEY, 0, -1, -1, (), snapshot=True) is ErrorCode.none
        _, st = coord.read(KEY, -1)
        assert st is not None and (st.start_offset, st.batches) == (-1, [])
        # after a restart the fence holds (it is the stored state, not memory)
        again = _coordinator(log)
        assert await again.write(KEY, 0, 3, 40, [(40, 49, 0, 2)]) is \
            ErrorCode.fenced_state_epoch
        assert (await again.read_state(KEY, 3))[0] is ErrorCode.none
        assert await again.write(KEY, 0, 3, 0, [(0, 4, 0, 1)]) is ErrorCode.none
        _, st = _coordinator(log).read(KEY, -1)
        assert st is not None and (st.start_offset, st.batches) == (0, [(0, 4, 0, 1)])

    asyncio.run(run())


def test_a_deleted_key_is_not_written_back_by_a_window_that_never_read_it() -> None:
    async def run() -> None:
        log = MemoryCoordinatorLog()
        coord = _coordinator(log)
        persister = CoordinatorPersister(coord)
        assert await coord.write(KEY, 0, 3, 10, [(10, 19, 2, 1)]) is ErrorCode.none
        assert await persister.delete(KEY) is ErrorCode.none
        # the old window's next write: Kafka's INVALID_REQUEST at the coordinator, a
        # fence to the leader (it drops the window and reads the key again)
        assert await coord.write(KEY, 0, 3, 20, [(20, 20, 2, 1)]) is \
            ErrorCode.invalid_request
        assert await persister.write(KEY, 0, 3, 20, [(20, 20, 2, 1)]) is \
            ErrorCode.fenced_state_epoch
        assert coord.read(KEY, -1) == (ErrorCode.none, None)
        assert (await persister.read(KEY, -1)).exists is False
        # a restarted coordinator replays the tombstones: still refused
        again = _coordinator(log)
        assert await again.write(KEY, 0, 3, 20, []) is ErrorCode.invalid_request
        # the leader reads it (no state) at epoch 4; a deposed one at 3 still may not
        got = await CoordinatorPersister(again).read(KEY, 4)
        assert (got.error, got.exists, got.start_offset) == (ErrorCode.none, False, -1)
        assert await again.write(KEY, 0, 3, 20, []) is ErrorCode.invalid_request
        assert await again.write(KEY, 0, 4, 25, []) is ErrorCode.none  # created again
        _, st = again.read(KEY, -1)
        assert st is not None and (st.start_offset, st.batches) == (25, [])
        # a key never deleted is still created by its leader's first write
        other = ShareKey("g", TID, 1)
        assert await again.write(other, 0, 0, 3, []) is ErrorCode.none

    asyncio.run(run())


def test_the_group_coordinator_initializes_an_assignment_once() -> None:
    async def run() -> None:
        log = MemoryCoordinatorLog()
        coord = _coordinator(log)
        persister = CoordinatorPersister(coord)
        tid2 = uuid.uuid4()
        assert await initialize_assignment(persister, "g", {TID: (0, 1), tid2: (0,)}) == {}
        for key in (KEY, ShareKey("g", TID, 1), ShareKey("g", tid2, 0)):
            got = await persister.read(key, -1)
            assert (got.exists, got.state_epoch, got.start_offset) == (True, 0, -1)
        assert await coord.write(KEY, 1, -1, 4, ()) is ErrorCode.none  # reset to 4
        assert await initialize_assignment(persister, "g", {TID: (0,)}) == {}
        assert (await persister.read(KEY, -1)).start_offset == 4  # left alone
        # AlterShareGroupOffsets of a deleted key goes through initialize: allowed
        assert await persister.delete(KEY) is ErrorCode.none
        assert await persister.reset(KEY, 9) is ErrorCode.none
        got = await persister.read(KEY, -1)
        assert (got.state_epoch, got.start_offset) == (1, 9)
        assert await initialize_assignment(None, "g", {TID: (0,)}) == {}

    asyncio.run(run())
