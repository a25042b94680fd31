"""A share partition's in-flight records, kept per batch (Kafka's SharePartition
`cachedState` of `InFlightBatch`es).

The window's records that are neither acknowledged nor archived, as an ordered list of
disjoint batches, each a run of offsets in one state: AVAILABLE or ACQUIRED, one delivery
count, one holder and one deadline (the lock's expiry, or for an AVAILABLE record when it
may be redelivered). A batch is what one acquisition took of one log batch (consecutive
acquisitions by the same member at the same time are one batch), or one persisted state
batch after a restore. Records done (ACKNOWLEDGED, ARCHIVED) are not kept: their offsets
are holes between batches.

Why per batch: a ShareFetch acquires whole log batches and a consumer accepts what it got
as whole ranges, so acquiring, accepting, expiring and releasing cost O(batches), not
O(records) (a dict entry per record was the largest cost of a share fetch,
docs/benchmarks/share-groups.md). Where an operation covers part of a batch (a partial
acquisition, acknowledgement types per offset, a hand-back of part of a range), the batch
is split at the range's ends (`isolate`) into batches of their own; Kafka instead gives
such a batch a map of per-offset states. Splitting down to single offsets is the
per-record cost, paid only when the acknowledgements of a batch's records differ.

This module is the storage only (find, split, append, drop); the rules (who may acquire,
locks, delivery limits, what is persisted) are `partition.py`'s.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from operator import attrgetter

__all__ = ["Batch", "InFlight"]

_FIRST = attrgetter("first")


class Batch:
    """Offsets first..last, all in one state (partition.RecordState's AVAILABLE or
    ACQUIRED), with one delivery count, holder ("" when available) and deadline (ms)."""

    __slots__ = ("count", "deadline", "first", "last", "member", "state")

    def __init__(self, first: int, last: int, state: int, count: int, member: str,
                 deadline: int) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.count = count
        self.member = member
        self.deadline = deadline

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def __repr__(self) -> str:
        return (f"Batch({self.first}-{self.last}, state={self.state}, count={self.count}, "
                f"member={self.member!r}, deadline={self.deadline})")


class InFlight:
    """Disjoint batches in offset order, and how many records they hold."""

    __slots__ = ("batches", "records")

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.records = 0

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.batches)

    def clear(self) -> None:
        self.batches.clear()
        self.records = 0

    def first_offset(self) -> int | None:
        b = self.batches
        return b[0].first if b else None

    def index(self, offset: int) -> int:
        """The index of the first batch that ends at or after `offset`."""
        b = self.batches
        i = bisect_right(b, offset, key=_FIRST) - 1
        if i < 0 or b[i].last < offset:
            i += 1
        return i

    def find(self, offset: int) -> Batch | None:
        """The batch holding `offset`, or None (done, or outside the window)."""
        b = self.batches
        i = bisect_right(b, offset, key=_FIRST) - 1
        if i >= 0 and b[i].last >= offset:
            return b[i]
        return None

    def append(self, first: int, last: int, state: int, count: int, member: str,
               deadline: int) -> None:
        """A batch after every batch held (`first` beyond the last one's end); joined to
        the last one when it continues it in the same state, count, holder and deadline."""
        b = self.batches
        self.records += last - first + 1
        if b:
            p = b[-1]
            if (p.last + 1 == first and p.state == state and p.count == count
                    and p.member == member and p.deadline == deadline):
                p.last = last
                return
        b.append(Batch(first, last, state, count, member, deadline))

    def isolate(self, i: int, lo: int, hi: int) -> int:
        """Split batch `i` so that its part within lo..hi is a batch of its own; returns
        that batch's index. The parts outside keep the batch's state."""
        b = self.batches
        x = b[i]
        if x.last > hi:
            b.insert(i + 1, Batch(hi + 1, x.last, x.state, x.count, x.member, x.deadline))
            x.last = hi
        if x.first < lo:
            b.insert(i + 1, Batch(lo, x.last, x.state, x.count, x.member, x.deadline))
            x.last = lo - 1
            i += 1
        return i

    def remove(self, i: int) -> Batch:
        """Batch `i` is done (acknowledged or archived)."""
        x = self.batches.pop(i)
        self.records -= x.last - x.first + 1
        return x

    def drop_below(self, offset: int) -> None:
        """Forget every record below `offset` (gone from the log)."""
        b = self.batches
        k = 0
        while k < len(b) and b[k].last < offset:
            self.records -= b[k].last - b[k].first + 1
            k += 1
        del b[:k]
        if b and b[0].first < offset:
            self.records -= offset - b[0].first
            b[0].first = offset
