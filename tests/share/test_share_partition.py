"""The share partition's rules on a ManualClock: acquisition, locks, acknowledgements, the
delivery limit and the sliding window, plus hypothesis-driven invariants."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yak.clock import ManualClock
from yak.share.partition import (
    AckType,
    AcquiredRange,
    InvalidRecordState,
    RecordState,
    SharePartition,
)


def _sp(clock: ManualClock, **kw: int) -> SharePartition:
    sp = SharePartition("g", "t", 0, clock, lock_duration_ms=kw.pop("lock", 1000), **kw)
    sp.initialize(0, 0, "earliest")
    return sp


def test_acquire_accept_slides_the_window() -> None:
    clock = ManualClock()
    sp = _sp(clock)
    assert sp.acquire("a", [(0, 4)], 100) == [AcquiredRange(0, 4, 1)]
    assert sp.acquire("b", [(0, 4)], 100) == []  # locked by a
    sp.acknowledge("a", 0, 1, [AckType.ACCEPT])
    assert sp.start_offset == 2
    sp.acknowledge("a", 2, 4, [AckType.ACCEPT, AckType.REJECT, AckType.ACCEPT])
    assert sp.start_offset == sp.end_offset == 5


def test_release_redelivers_and_the_limit_archives() -> None:
    clock = ManualClock()
    sp = _sp(clock, delivery_count_limit=2)
    sp.acquire("a", [(0, 0)], 10)
    sp.acknowledge("a", 0, 0, [AckType.RELEASE])
    assert sp.next_fetch_offset() == 0
    assert sp.acquire("b", [(0, 0)], 10) == [AcquiredRange(0, 0, 2)]
    sp.acknowledge("b", 0, 0, [AckType.RELEASE])  # second delivery was the last
    assert sp.state_of(0) is None and sp.start_offset == 1


def test_lock_expiry_redelivers_and_refuses_the_late_ack() -> None:
    clock = ManualClock()
    sp = _sp(clock, lock=500)
    sp.acquire("a", [(0, 2)], 10)
    clock.advance(499)
    assert sp.acquire("b", [(0, 2)], 10) == []
    clock.advance(1)
    assert sp.acquire("b", [(0, 2)], 10) == [AcquiredRange(0, 2, 2)]
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("a", 0, 2, [AckType.ACCEPT])
    assert sp.state_of(1) == (RecordState.ACQUIRED, 2, "b")


def test_record_lock_cap_and_latest_reset() -> None:
    clock = ManualClock()
    sp = SharePartition("g", "t", 0, clock, max_record_locks=3)
    sp.initialize(0, 10, "latest")
    assert sp.start_offset == 10
    assert sp.acquire("a", [(10, 19)], 100) == [AcquiredRange(10, 12, 1)]
    sp.acknowledge("a", 10, 10, [AckType.ACCEPT])
    assert sp.acquire("a", [(13, 19)], 100) == [AcquiredRange(13, 13, 1)]


def test_a_bad_batch_changes_nothing() -> None:
    sp = _sp(ManualClock())
    sp.acquire("a", [(0, 1)], 10)
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("a", 0, 2, [AckType.ACCEPT])  # 2 was never acquired
    assert sp.state_of(0) == (RecordState.ACQUIRED, 1, "a")
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("b", 0, 1, [AckType.ACCEPT])
    sp.release_member("a")
    assert sp.state_of(1) == (RecordState.AVAILABLE, 1, "")


MEMBERS = ("m0", "m1", "m2")
OPS = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 6)),
    st.tuples(st.just("ack"), st.sampled_from(MEMBERS), st.integers(0, 30), st.integers(0, 4),
              st.sampled_from(list(AckType))),
    st.tuples(st.just("tick"), st.integers(0, 700)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(OPS, max_size=60), st.integers(1, 4), st.integers(2, 12))
def test_invariants(ops: list[tuple], limit: int, cap: int) -> None:
    clock = ManualClock()
    sp = SharePartition("g", "t", 0, clock, lock_duration_ms=500,
                        delivery_count_limit=limit, max_record_locks=cap)
    sp.initialize(0, 0, "earliest")
    log_end = 40
    holder: dict[int, tuple[str, int]] = {}  # offset -> (member, lock deadline)
    counts: dict[int, int] = {}
    done: set[int] = set()
    for op in ops:
        if op[0] == "acquire":
            offset = sp.next_fetch_offset()
            got = sp.acquire(op[1], [(offset, log_end - 1)], op[2])
            for rng in got:
                for o in range(rng.first_offset, rng.last_offset + 1):
                    h = holder.get(o)
                    # never acquired by two members at once
                    assert h is None or h[1] <= clock.now_ms(), (o, h)
                    assert o not in done
                    holder[o] = (op[1], clock.now_ms() + 500)
        elif op[0] == "ack":
            with contextlib.suppress(InvalidRecordState):
                sp.acknowledge(op[1], op[2], op[2] + op[3], [op[4]])
        elif op[0] == "tick":
            clock.advance(op[1])
        else:
            sp.release_member(op[1])
        sp.expire()
        for o in range(sp.end_offset):
            s = sp.state_of(o)
            if s is None:
                done.add(o)
                holder.pop(o, None)
                continue
            state, count, member = s
            assert count >= counts.get(o, 0)  # delivery count never decreases
            assert count <= limit
            counts[o] = count
            if state is RecordState.ACQUIRED:
                assert holder[o][0] == member
            else:
                holder.pop(o, None)
        # the start never passes a record that is neither acknowledged nor archived
        assert all(sp.state_of(o) is None for o in range(sp.start_offset))
        assert sp.in_flight() <= cap


def test_gap_batches_are_never_handed_out_and_do_not_stall_the_window() -> None:
    sp = _sp(ManualClock())
    got = sp.acquire("a", [(0, 1), (2, 2, True), (3, 4)], 100)
    assert got == [AcquiredRange(0, 1, 1), AcquiredRange(3, 4, 1)]
    sp.acknowledge("a", 0, 1, [AckType.ACCEPT])
    assert sp.start_offset == 3  # the gap at 2 is archived
    sp.acknowledge("a", 3, 4, [AckType.ACCEPT])
    assert sp.start_offset == sp.end_offset == 5


def test_read_committed_gaps_aborted_batches_and_markers() -> None:
    from yak.protocol.records import Record, build_batch
    from yak.share.log_read import read_batches as _batches

    def batch(base: int, n: int, pid: int = -1, txn: bool = False,
              control: bool = False) -> bytes:
        recs = [Record(key=b"\0\0\0\0" if control else None, value=b"" if control else b"v")
                for _ in range(n)]
        return build_batch(recs, base_offset=base, producer_id=pid,
                           producer_epoch=0 if pid >= 0 else -1,
                           base_sequence=0 if pid >= 0 else -1,
                           transactional=txn, control=control)

    log = b"".join([batch(0, 2), batch(2, 2, pid=7, txn=True), batch(4, 1, pid=8, txn=True),
                    batch(5, 1, pid=7, txn=True, control=True),
                    batch(6, 1, pid=8, txn=True, control=True), batch(7, 1)])
    gaps = [(b, e, gap) for b, e, gap, _ in _batches([log], [(7, 2)])]
    assert gaps == [(0, 1, False), (2, 3, True), (4, 4, False), (5, 5, True), (6, 6, True),
                    (7, 7, False)]
    # read_uncommitted: only the markers are gaps
    assert [gap for _, _, gap, _ in _batches([log], None)] == [
        False, False, False, True, True, False]
