"""A failed acquisition write does not use up a delivery (issue 24).

The share-partition leader writes an acquisition's delivery count before the records go
out; when that write fails the records are handed back and never reach a consumer. Kafka's
SharePartition persists no acquisition and rolls back a state change whose write failed,
so a delivery that did not happen is not counted: here `hand_back` takes the count back
down and notes the lower count for the next write. Before, every failed write kept its
count, and with a delivery limit of 3 a share-coordinator failover (a few failed writes)
dead-lettered records no consumer ever received (the share chaos workload saw it)."""

from __future__ import annotations

from yak.clock import ManualClock
from yak.share import records as rec
from yak.share.partition import AckType, AcquiredRange, RecordState, SharePartition


def _sp(limit: int = 3) -> SharePartition:
    sp = SharePartition("g", "t", 0, ManualClock(), lock_duration_ms=1000,
                        delivery_count_limit=limit)
    sp.initialize(0, 0, "earliest")
    return sp


def _persisted(sp: SharePartition, base: list[tuple[int, int, int, int]]
               ) -> list[tuple[int, int, int, int]]:
    changes = sp.take_changes()
    return base if changes is None else rec.overlay(base, changes[1], changes[0])


def test_failed_writes_never_dead_letter_a_record_nobody_received() -> None:
    sp = _sp(limit=3)
    for _ in range(5):  # five acquisitions whose state write failed, over the limit
        got = sp.acquire("a", [(0, 9)], 100)
        assert got == [AcquiredRange(0, 9, 1)]
        changes = sp.take_changes()
        assert changes is not None
        sp.untake(changes[1])  # what ShareManager._flush does with a failed write
        sp.hand_back("a", got)
        assert sp.state_of(0) == (RecordState.AVAILABLE, 0, "")
    assert sp.dead == []
    # Delivered for real now: count 1, and the limit still takes three deliveries.
    assert sp.acquire("b", [(0, 9)], 100) == [AcquiredRange(0, 9, 1)]
    sp.acknowledge("b", 0, 9, [AckType.RELEASE])
    assert sp.acquire("b", [(0, 9)], 100) == [AcquiredRange(0, 9, 2)]
    assert sp.dead == []


def test_a_redelivery_handed_back_keeps_the_deliveries_that_happened() -> None:
    sp = _sp(limit=3)
    sp.acquire("a", [(0, 4)], 100)
    sp.acknowledge("a", 0, 4, [AckType.RELEASE])  # delivered once
    got = sp.acquire("a", [(0, 4)], 100)
    assert got == [AcquiredRange(0, 4, 2)]
    sp.hand_back("a", got)  # its write failed: back to one delivery
    assert sp.state_of(2) == (RecordState.AVAILABLE, 1, "")
    assert sp.acquire("a", [(0, 4)], 100) == [AcquiredRange(0, 4, 2)]


def test_the_lower_count_is_what_the_next_write_persists() -> None:
    sp = _sp(limit=3)
    sp.acquire("a", [(0, 9)], 100)
    first = sp.take_changes()
    assert first is not None
    sp.untake(first[1])  # failed (it may still have landed: the next write corrects it)
    sp.hand_back("a", [AcquiredRange(3, 5, 1)])  # part of it handed back
    # The rest (0-2, 6-9) went out at count 1; 3-5 did not.
    state = _persisted(sp, [(0, 9, 0, 1)])  # as if the failed write had landed
    assert state == [(0, 2, 0, 1), (3, 5, 0, 0), (6, 9, 0, 1)]
