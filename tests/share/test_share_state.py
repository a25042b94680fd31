"""The durable share-partition state, below the wire: the state batches' merge, the
record formats, the share coordinator on the coordinator runtime (in-memory log, replayed
as a restarted broker would), a share partition's changes restored into a new one, the
redelivery delay on a ManualClock. The real broker's restart is test_share_durable.py."""

from __future__ import annotations

import asyncio
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from yak.clock import ManualClock
from yak.coordinator.memory import MemoryCoordinatorLog
from yak.errors import ErrorCode
from yak.share import records as rec
from yak.share.coordinator import ShareCoordinator
from yak.share.partition import AckType, AcquiredRange, SharePartition
from yak.share.records import ShareKey, ShareState

TID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def test_overlay_splits_replaces_clips_and_joins() -> None:
    base = [(10, 19, 0, 1)]
    assert rec.overlay(base, [(12, 13, 2, 0)], 10) == [
        (10, 11, 0, 1), (12, 13, 2, 0), (14, 19, 0, 1)]
    assert rec.overlay(base, [(5, 25, 4, 0)], 10) == [(10, 25, 4, 0)]
    assert rec.overlay(base, [(10, 11, 0, 2), (12, 19, 0, 2)], 14) == [(14, 19, 0, 2)]
    assert rec.overlay([], [(3, 3, 0, 1), (1, 1, 0, 1), (2, 2, 0, 1)], 0) == [(1, 3, 0, 1)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 5), st.sampled_from([0, 2, 4]),
                          st.integers(0, 3)), max_size=12),
       st.integers(0, 10))
def test_overlay_equals_applying_offset_by_offset(changes: list[tuple[int, int, int, int]],
                                                  start: int) -> None:
    batches = [(a, a + n, s, c) for a, n, s, c in changes]
    want: dict[int, tuple[int, int]] = {}
    for a, b, s, c in batches:
        for o in range(a, b + 1):
            want[o] = (s, c)
    got = rec.overlay([], batches, start)
    flat = {o: (s, c) for a, b, s, c in got for o in range(a, b + 1)}
    assert flat == {o: v for o, v in want.items() if o >= start}
    assert all(got[i][1] < got[i + 1][0] for i in range(len(got) - 1))  # sorted, disjoint


def test_keys_and_values_round_trip() -> None:
    key = ShareKey("grüppe:x", TID, 7)
    for version in (rec.SNAPSHOT, rec.UPDATE):
        assert rec.decode_key(rec.encode_key(version, key)) == (version, key)
    snap = ShareState(3, 9, 100, [(100, 104, 0, 2), (105, 105, 4, 0)], snapshot_epoch=5)
    back = rec.decode_value(rec.SNAPSHOT, rec.encode_snapshot(snap))
    assert (back.state_epoch, back.leader_epoch, back.start_offset, back.batches,
            back.snapshot_epoch) == (3, 9, 100, snap.batches, 5)
    upd = rec.decode_value(rec.UPDATE, rec.encode_update(5, 9, 101, [(101, 101, 2, 0)]))
    assert (upd.start_offset, upd.batches, upd.leader_epoch) == (101, [(101, 101, 2, 0)], 9)
    assert key.coordinator_key() == "grüppe:x:EjRWeBI0VngSNFZ4EjRWeA:7"
    assert 0 <= rec.partition_for(key, 50) < 50


def _coordinator(log: MemoryCoordinatorLog, every: int = 500) -> ShareCoordinator:
    c = ShareCoordinator(log, log, ManualClock(), snapshot_every=every)
    c.runtime.load_led_partitions()
    return c


def test_the_share_coordinator_writes_replays_snapshots_and_fences() -> None:
    async def run() -> None:
        log = MemoryCoordinatorLog(num_partitions=3, topic=rec.SHARE_STATE_TOPIC)
        coord = _coordinator(log, every=2)
        key = ShareKey("g", TID, 0)
        assert coord.read(key, 0) == (ErrorCode.none, None)
        assert await coord.write(key, 0, 1, 0, [(0, 9, 0, 1)]) is ErrorCode.none
        assert await coord.write(key, 0, 1, 3, [(0, 2, 2, 0)]) is ErrorCode.none
        assert await coord.write(key, 0, 1, 3, [(5, 5, 0, 2)]) is ErrorCode.none
        assert await coord.write(key, 0, 1, 4, [(3, 3, 4, 0)]) is ErrorCode.none
        code, st = coord.read(key, 1)
        assert code is ErrorCode.none and st is not None
        assert (st.start_offset, st.batches) == (4, [(4, 4, 0, 1), (5, 5, 0, 2),
                                                     (6, 9, 0, 1)])
        versions = [rec.decode_key(k)[0] for k, _ in log.records(coord.partition_for(key))]
        assert versions == [rec.SNAPSHOT, rec.UPDATE, rec.UPDATE, rec.SNAPSHOT]
        # a restarted broker replays the same state
        again = _coordinator(log)
        _, st2 = again.read(key, 1)
        assert st2 is not None
        assert (st2.start_offset, st2.batches) == (st.start_offset, st.batches)
        # a deposed leader (older leader epoch) is fenced; a newer one moves the epoch up
        assert await again.write(key, 0, 0, 4, []) is ErrorCode.fenced_leader_epoch
        assert await again.write(key, 0, 2, 4, []) is ErrorCode.none
        assert again.read(key, 1)[0] is ErrorCode.fenced_leader_epoch
        # a reset (AlterShareGroupOffsets: the next state epoch, a snapshot with nothing in
        # flight) fences a leader still writing at the old state epoch
        assert await again.write(key, 1, -1, 2, []) is ErrorCode.none
        _, st3 = again.read(key, 2)
        assert st3 is not None and (st3.state_epoch, st3.start_offset, st3.batches) == (
            1, 2, [])
        assert await again.write(key, 0, 2, 4, []) is ErrorCode.fenced_state_epoch
        assert await again.delete(key) is ErrorCode.none
        assert _coordinator(log).read(key, 2) == (ErrorCode.none, None)

    asyncio.run(run())


def test_a_share_partitions_changes_restore_into_the_same_window() -> None:
    """What a crashed leader's share partition wrote, restored by the next leader:
    acknowledged records stay done, held and released ones come back AVAILABLE with
    their delivery counts, one held at the delivery limit is archived (and a dead
    letter), the window's end is kept."""
    clock = ManualClock()
    sp = SharePartition("g", "t", 0, clock, lock_duration_ms=1000, delivery_count_limit=2)
    sp.initialize(0, 0, "earliest")
    written: list[tuple[int, int, int, int]] = []
    start = -1

    def persist() -> None:
        nonlocal written, start
        changes = sp.take_changes()
        if changes is not None:
            start = changes[0]
            written = rec.overlay(written, changes[1], start)

    persist()
    assert start == 0 and written == []
    assert sp.acquire("a", [(0, 9)], 100) == [AcquiredRange(0, 9, 1)]
    persist()
    sp.acknowledge("a", 0, 3, [AckType.ACCEPT])
    sp.acknowledge("a", 4, 4, [AckType.REJECT])
    sp.acknowledge("a", 5, 6, [AckType.RELEASE])
    persist()
    assert sp.acquire("b", [(5, 9)], 1) == [AcquiredRange(5, 5, 2)]  # 5 at the limit now
    persist()
    assert sp.take_changes() is None  # nothing new
    assert start == 5
    assert written == [(5, 5, 0, 2), (6, 9, 0, 1)]
    new = SharePartition("g", "t", 0, clock, lock_duration_ms=1000, delivery_count_limit=2)
    new.restore(start, written)
    assert (new.start_offset, new.end_offset) == (6, 10)
    assert new.state_of(5) is None  # held at the limit when the leader died: archived
    assert new.dead == [(5, 5, 2, "delivery count limit reached")]
    assert new.acquire("c", [(5, 9)], 100) == [AcquiredRange(6, 9, 2)]


def test_the_redelivery_delay_holds_a_released_record_back() -> None:
    clock = ManualClock()
    sp = SharePartition("g", "t", 0, clock, lock_duration_ms=1000, redelivery_delay_ms=500)
    sp.initialize(0, 0, "earliest")
    assert sp.acquire("a", [(0, 1)], 100) == [AcquiredRange(0, 1, 1)]
    sp.acknowledge("a", 0, 0, [AckType.RELEASE])
    assert sp.next_deadline_ms() == clock.now_ms() + 500  # wake then (before 1's lock)
    assert sp.next_fetch_offset() == 2  # 0 is not ready yet
    assert sp.acquire("b", [(0, 1)], 100) == []
    clock.advance(500)
    assert sp.next_fetch_offset() == 0
    assert sp.acquire("b", [(0, 1)], 100) == [AcquiredRange(0, 0, 2)]
    clock.advance(1000)  # 1's lock expired at 1000: delayed from then, for 500 ms
    sp.expire()
    assert sp.acquire("b", [(1, 1)], 100) == []
    clock.advance(500)
    assert sp.acquire("b", [(1, 1)], 100) == [AcquiredRange(1, 1, 2)]


def test_pruning_deletes_below_every_keys_latest_snapshot() -> None:
    """The offsets manager: the prune point is the lowest latest-snapshot offset of the
    keys of a partition; the keys holding it get a fresh snapshot, so the next round
    moves on; a deleted key holds nothing back."""
    async def run() -> None:
        log = MemoryCoordinatorLog(num_partitions=1, topic=rec.SHARE_STATE_TOPIC)
        pruned: list[tuple[int, int]] = []
        coord = ShareCoordinator(
            log, log, ManualClock(), snapshot_every=2,
            log_end=lambda p: len(log.records(p)),
            prune=lambda p, offset: pruned.append((p, offset)))
        coord.runtime.load_led_partitions()
        a, b = ShareKey("g", TID, 0), ShareKey("g", TID, 1)
        assert await coord.write(a, 0, 1, 0, [(0, 9, 0, 1)]) is ErrorCode.none  # 0: snap a
        assert await coord.write(b, 0, 1, 0, [(0, 4, 0, 1)]) is ErrorCode.none  # 1: snap b
        for i in range(3):  # 2, 3: updates of a; 4: a snapshot of a again
            assert await coord.write(a, 0, 1, i + 1, [(i, i, 2, 0)]) is ErrorCode.none
        assert [rec.decode_key(k)[0] for k, _ in log.records(0)] == [
            rec.SNAPSHOT, rec.SNAPSHOT, rec.UPDATE, rec.UPDATE, rec.SNAPSHOT]
        assert coord.prune_once() == {0: 1}  # b's snapshot (1) holds the start
        assert pruned == [(0, 1)]
        await asyncio.sleep(0)  # b's fresh snapshot (in the background)
        await asyncio.gather(*coord._background)
        assert rec.decode_key(log.records(0)[-1][0]) == (rec.SNAPSHOT, b)
        assert coord.prune_once() == {0: 4}  # a's latest snapshot now
        assert await coord.delete(a) is ErrorCode.none
        await asyncio.gather(*coord._background)
        assert coord.prune_once() == {0: 5}  # only b (its snapshot at 5) is left
        # a restarted coordinator knows the same snapshot offsets from the replay
        again = ShareCoordinator(log, log, ManualClock(), log_end=lambda p: 0,
                                 prune=lambda p, offset: None)
        again.runtime.load_led_partitions()
        ctx = again.runtime.context(0)
        assert ctx is not None and ctx.shard.snapshot_offsets == {b: 5}

    asyncio.run(run())


def test_a_read_by_a_newer_leader_fences_the_deposed_one_before_its_first_write() -> None:
    """A leader paused past its session resumes and writes (an accept) after the new
    leader read the state but before the new leader wrote: the write must be fenced, or
    the new leader's window misses it and hands the record out again (found by the share
    chaos workload, yak/chaos/share_workload.py)."""
    async def run() -> None:
        log = MemoryCoordinatorLog(num_partitions=3, topic=rec.SHARE_STATE_TOPIC)
        coord = _coordinator(log)
        key = ShareKey("g", TID, 0)
        assert await coord.write(key, 0, 3, 0, [(0, 9, 0, 1)]) is ErrorCode.none
        assert (await coord.read_state(key, 4))[0] is ErrorCode.none  # the new leader loads
        assert await coord.write(key, 0, 3, 0, [(0, 0, 2, 1)]) is ErrorCode.fenced_leader_epoch
        assert coord.read(key, 3)[0] is ErrorCode.fenced_leader_epoch
        _, st = coord.read(key, 4)
        assert st is not None and st.batches == [(0, 9, 0, 1)]  # no accept slipped in
        assert await coord.write(key, 0, 4, 0, [(0, 0, 2, 1)]) is ErrorCode.none
        assert coord.read(key, -1)[0] is ErrorCode.none  # no epoch given: not fenced

    asyncio.run(run())
