"""The in-flight state per batch (yak/share/inflight.py under SharePartition) against a
per-record model: the share partition as it was before batches (one entry per in-flight
record, each operation a walk of its offsets), kept here as the oracle. A random sequence
of acquisitions (whole and partial log batches, gaps, the record-lock cap), acknowledgements
(one type per range or one per offset), lock expiry, releases, member departures, renewals,
hand-backs, log-start moves and restores must leave both with the same per-offset states,
the same answers and errors, the same persisted state and the same dead letters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yak.clock import Clock, ManualClock
from yak.share.inflight import InFlight
from yak.share.metrics import PartitionStats
from yak.share.partition import (
    DELIVERY_LIMIT,
    REJECTED,
    AckType,
    AcquiredRange,
    InvalidRecordState,
    RecordState,
    SharePartition,
)
from yak.share.records import overlay


@dataclass(slots=True)
class _InFlight:
    state: RecordState
    delivery_count: int
    member_id: str
    deadline_ms: int


class RecordModel:
    """SharePartition as it was with one entry per in-flight record (before inflight.py)."""

    def __init__(
        self,
        group_id: str,
        topic: str,
        partition: int,
        clock: Clock,
        *,
        lock_duration_ms: int = 30000,
        delivery_count_limit: int = 5,
        max_record_locks: int = 2000,
        redelivery_delay_ms: int = 0,
    ) -> None:
        self.group_id = group_id
        self.topic = topic
        self.partition = partition
        self.clock = clock
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_record_locks = max_record_locks
        self.redelivery_delay_ms = redelivery_delay_ms
        self._next_ready: int | None = None
        self.dead: list[tuple[int, int, int, str]] = []
        self.end_offset = -1
        self._records: dict[int, _InFlight] = {}
        self._next_deadline: int | None = None
        self._changes: list[tuple[int, int, int, int]] = []
        self._persisted_start = -1
        self._taken = 0
        self.state_epoch = 0
        self.leader_epoch = -1
        self.durable = 0
        self.stats = PartitionStats()

    def restore(
        self, start_offset: int, batches: Sequence[tuple[int, int, int, int]], state_epoch: int = 0
    ) -> None:
        self._records.clear()
        self.state_epoch = state_epoch
        end = start_offset
        limit = self.delivery_count_limit
        for first, last, state, count in batches:
            end = max(end, last + 1)
            if state != 0 or last < start_offset:
                continue
            if count >= limit:
                self._changes.append((max(first, start_offset), last, 4, count))
                self.dead.append((max(first, start_offset), last, count, DELIVERY_LIMIT))
                continue
            for offset in range(max(first, start_offset), last + 1):
                self._records[offset] = _InFlight(RecordState.AVAILABLE, count, "", 0)
        self.end_offset = end
        self._persisted_start = start_offset

    def take_changes(self) -> tuple[int, list[tuple[int, int, int, int]]] | None:
        start = self.start_offset
        if not self._changes and start == self._persisted_start:
            return None
        changes, self._changes = (self._changes, [])
        self._persisted_start = start
        self._taken += len(changes)
        return (start, changes)

    def untake(self, changes: list[tuple[int, int, int, int]]) -> None:
        self._changes[:0] = changes
        self._taken -= len(changes)
        self._persisted_start = -1

    def noted(self) -> int:
        return self._taken + len(self._changes)

    def has_changes(self) -> bool:
        return bool(self._changes) or self.start_offset != self._persisted_start

    def hand_back(self, member_id: str, ranges: Sequence[AcquiredRange]) -> None:
        for a in ranges:
            for offset in range(a.first_offset, a.last_offset + 1):
                r = self._records.get(offset)
                if r is not None and r.state is RecordState.ACQUIRED and (r.member_id == member_id):
                    r.delivery_count = max(0, r.delivery_count - 1)  # the failed delivery
                    self._changes.append((offset, offset, 0, r.delivery_count))
                    self._release(offset, r)

    @property
    def initialized(self) -> bool:
        return self.end_offset >= 0

    def initialize(self, log_start: int, log_end: int, reset: str = "latest") -> None:
        if not self.initialized:
            self.end_offset = log_start if reset == "earliest" else log_end

    @property
    def start_offset(self) -> int:
        for offset in self._records:
            return offset
        return self.end_offset

    def in_flight(self) -> int:
        return len(self._records)

    def delivery_counts(self) -> tuple[int, dict[int, int]]:
        acquired = 0
        by: dict[int, int] = {}
        for r in self._records.values():
            acquired += r.state is RecordState.ACQUIRED
            by[r.delivery_count] = by.get(r.delivery_count, 0) + 1
        return (acquired, by)

    def state_of(self, offset: int) -> tuple[RecordState, int, str] | None:
        r = self._records.get(offset)
        return None if r is None else (r.state, r.delivery_count, r.member_id)

    def log_start_moved(self, log_start: int) -> None:
        for offset in [o for o in self._records if o < log_start]:
            del self._records[offset]
        if self.end_offset < log_start:
            self.end_offset = log_start

    def next_fetch_offset(self) -> int:
        now = self.clock.now_ms()
        self.expire(now)
        for offset, r in self._records.items():
            if r.state is RecordState.AVAILABLE and r.deadline_ms <= now:
                return offset
        return self.end_offset

    def acquire(
        self, member_id: str, batches: Iterable[tuple[int, ...]], max_records: int,
        record_limit: bool = True,
    ) -> list[AcquiredRange]:
        now = self.clock.now_ms()
        self.expire(now)
        deadline = now + self.lock_duration_ms
        runs: list[list[int]] = []
        taken = 0
        records = self._records
        acquired = RecordState.ACQUIRED
        available = RecordState.AVAILABLE
        for batch in batches:
            if taken >= max_records:
                break
            base, last = (batch[0], batch[1])
            if len(batch) > 2 and batch[2]:
                self._archive_gap(base, last)
                continue
            offset = max(base, self.start_offset)
            stop = min(last + 1, self.end_offset)
            while offset < stop and taken < max_records:
                r = records.get(offset)
                if r is not None and r.state is available and (r.deadline_ms <= now):
                    r.state = acquired
                    r.delivery_count += 1
                    r.member_id = member_id
                    r.deadline_ms = deadline
                    _extend(runs, offset, offset, r.delivery_count)
                    taken += 1
                offset += 1
            if offset > last or taken >= max_records:
                continue
            n = min(last + 1 - offset, self.max_record_locks - len(records))
            if record_limit:  # else batch-optimized: the new records' batch to its end
                n = min(n, max_records - taken)
            if n <= 0:
                break
            for o in range(offset, offset + n):
                records[o] = _InFlight(acquired, 1, member_id, deadline)
            _extend(runs, offset, offset + n - 1, 1)
            taken += n
            self.end_offset = offset + n
        if runs and (self._next_deadline is None or deadline < self._next_deadline):
            self._next_deadline = deadline
        self._changes.extend(((a, b, 0, c) for a, b, c in runs))
        self.stats.acquired += taken
        return [AcquiredRange(a, b, c) for a, b, c in runs]

    def _archive_gap(self, base: int, last: int) -> None:
        records = self._records
        lo = max(base, self.start_offset)
        if lo <= last:
            self._changes.append((lo, last, 4, 0))
        for offset in range(max(base, self.start_offset), min(last + 1, self.end_offset)):
            r = records.get(offset)
            if r is not None and r.state is RecordState.AVAILABLE:
                del records[offset]
        if last >= self.end_offset:
            self.end_offset = last + 1

    def acknowledge(
        self, member_id: str, first_offset: int, last_offset: int, types: Sequence[int]
    ) -> None:
        count = last_offset - first_offset + 1
        if count <= 0 or len(types) not in (1, count):
            raise InvalidRecordState("acknowledgement batch and types do not match")
        try:
            kinds = [AckType(t) for t in types]
        except ValueError as e:
            raise InvalidRecordState(f"unknown acknowledge type: {e}") from None
        self.expire()
        records = self._records
        start, end = (self.start_offset, self.end_offset)
        acquired = RecordState.ACQUIRED
        one = kinds[0] if len(kinds) == 1 else None
        for i, offset in enumerate(range(first_offset, last_offset + 1)):
            r = records.get(offset)
            if r is None:
                kind = one if one is not None else kinds[i]
                if kind is AckType.GAP and start <= offset < end:
                    continue
                raise InvalidRecordState(f"offset {offset} is not acquired")
            if r.state is not acquired or r.member_id != member_id:
                raise InvalidRecordState(f"offset {offset} is not acquired by this member")
        if one is not None and one not in (AckType.RELEASE, AckType.RENEW):
            counts = (
                [
                    r.delivery_count
                    for o in range(first_offset, last_offset + 1)
                    if (r := records.pop(o, None)) is not None
                ]
                if one is AckType.REJECT
                else ()
            )
            self._changes.append((first_offset, last_offset, 2 if one is AckType.ACCEPT else 4, 0))
            if counts:
                self.dead.append((first_offset, last_offset, max(counts), REJECTED))
            else:
                for offset in range(first_offset, last_offset + 1):
                    records.pop(offset, None)
            self.stats.acked(one, count)
            return
        for kind in set(kinds):
            self.stats.acked(kind, count if one is not None else kinds.count(kind))
        for i, offset in enumerate(range(first_offset, last_offset + 1)):
            kind = one if one is not None else kinds[i]
            r = records.get(offset)
            if r is None:
                continue
            if kind is AckType.RELEASE:
                self._release(offset, r)
            elif kind is AckType.RENEW:
                r.deadline_ms = self.clock.now_ms() + self.lock_duration_ms
            else:
                del records[offset]
                self._changes.append((offset, offset, 2 if kind is AckType.ACCEPT else 4, 0))
                if kind is AckType.REJECT:
                    self.dead.append((offset, offset, r.delivery_count, REJECTED))

    def release_member(self, member_id: str) -> int:
        mine = [
            (o, r)
            for o, r in self._records.items()
            if r.state is RecordState.ACQUIRED and r.member_id == member_id
        ]
        for offset, r in mine:
            self._release(offset, r)
        return len(mine)

    def expire(self, now_ms: int | None = None) -> int:
        now = self.clock.now_ms() if now_ms is None else now_ms
        if self._next_deadline is None or now < self._next_deadline:
            return 0
        n = 0
        nxt: int | None = None
        for offset, r in list(self._records.items()):
            if r.state is not RecordState.ACQUIRED:
                continue
            if r.deadline_ms <= now:
                self._release(offset, r)
                n += 1
            elif nxt is None or r.deadline_ms < nxt:
                nxt = r.deadline_ms
        self._next_deadline = nxt
        self.stats.lock_timeouts += n
        return n

    def next_deadline_ms(self) -> int | None:
        ready = self._next_ready
        if ready is not None and ready <= self.clock.now_ms():
            ready = self._next_ready = self._recompute_ready()
        if ready is None:
            return self._next_deadline
        return ready if self._next_deadline is None else min(ready, self._next_deadline)

    def _recompute_ready(self) -> int | None:
        now = self.clock.now_ms()
        later = [
            r.deadline_ms
            for r in self._records.values()
            if r.state is RecordState.AVAILABLE and r.deadline_ms > now
        ]
        return min(later) if later else None

    def _release(self, offset: int, r: _InFlight) -> None:
        if r.delivery_count >= self.delivery_count_limit:
            del self._records[offset]
            self.stats.archived_limit += 1
            self._changes.append((offset, offset, 4, r.delivery_count))
            dead = self.dead
            if (
                dead
                and dead[-1][1] + 1 == offset
                and (dead[-1][2:] == (r.delivery_count, DELIVERY_LIMIT))
            ):
                dead[-1] = (dead[-1][0], offset, r.delivery_count, DELIVERY_LIMIT)
            else:
                dead.append((offset, offset, r.delivery_count, DELIVERY_LIMIT))
        else:
            r.state = RecordState.AVAILABLE
            r.member_id = ""
            if self.redelivery_delay_ms > 0:
                r.deadline_ms = ready = self.clock.now_ms() + self.redelivery_delay_ms
                if self._next_ready is None or ready < self._next_ready:
                    self._next_ready = ready
            else:
                r.deadline_ms = 0


def _extend(runs: list[list[int]], first: int, last: int, delivery_count: int) -> None:
    if runs:
        run = runs[-1]
        if run[1] + 1 == first and run[2] == delivery_count:
            run[1] = last
            return
    runs.append([first, last, delivery_count])


# ---------------------------------------------------------------------- the structure


def _check_structure(fl: InFlight) -> None:
    prev = None
    for b in fl.batches:
        assert b.first <= b.last, b
        assert prev is None or prev.last < b.first, (prev, b)
        prev = b
    assert fl.records == sum(b.size for b in fl.batches)


def test_isolate_splits_at_the_range_ends() -> None:
    fl = InFlight()
    fl.append(0, 9, RecordState.ACQUIRED, 1, "a", 100)
    i = fl.isolate(0, 3, 5)
    assert i == 1
    assert [(b.first, b.last) for b in fl.batches] == [(0, 2), (3, 5), (6, 9)]
    assert all(b.member == "a" and b.count == 1 for b in fl.batches)
    assert fl.find(4) is fl.batches[1] and fl.find(10) is None
    assert fl.index(7) == 2 and fl.index(10) == 3
    fl.remove(1)
    assert fl.find(4) is None and fl.index(4) == 1 and fl.records == 7
    fl.drop_below(8)
    assert [(b.first, b.last) for b in fl.batches] == [(8, 9)] and fl.records == 2
    _check_structure(fl)


def test_append_joins_what_continues_the_last_batch() -> None:
    fl = InFlight()
    fl.append(0, 4, RecordState.ACQUIRED, 1, "a", 100)
    fl.append(5, 9, RecordState.ACQUIRED, 1, "a", 100)  # the same acquisition
    fl.append(10, 11, RecordState.ACQUIRED, 1, "b", 100)  # another holder
    fl.append(14, 15, RecordState.ACQUIRED, 1, "b", 100)  # not adjacent
    assert [(b.first, b.last) for b in fl.batches] == [(0, 9), (10, 11), (14, 15)]
    assert fl.records == 14


def test_whole_batches_are_one_entry_each() -> None:
    """Acquiring 500 records of 10 log batches and accepting them as ranges never
    splits: O(batches) entries, none per record."""
    clock = ManualClock()
    sp = SharePartition("g", "t", 0, clock, max_record_locks=2000)
    sp.initialize(0, 0, "earliest")
    got = sp.acquire("a", [(i * 50, i * 50 + 49) for i in range(10)], 500)
    assert got == [AcquiredRange(0, 499, 1)]
    assert len(sp._inflight.batches) == 1 and sp.in_flight() == 500
    sp.acknowledge("a", 0, 249, [AckType.ACCEPT])
    assert len(sp._inflight.batches) == 1 and sp.start_offset == 250
    sp.acknowledge("a", 250, 499, [AckType.ACCEPT])
    assert sp._inflight.batches == [] and sp.start_offset == 500


def test_types_per_offset_split_only_where_they_differ() -> None:
    clock = ManualClock()
    sp = SharePartition("g", "t", 0, clock)
    sp.initialize(0, 0, "earliest")
    sp.acquire("a", [(0, 99)], 100)
    kinds = [AckType.ACCEPT] * 40 + [AckType.RELEASE] * 20 + [AckType.ACCEPT] * 40
    sp.acknowledge("a", 0, 99, kinds)
    assert [(b.first, b.last, b.state) for b in sp._inflight.batches] == [
        (40, 59, RecordState.AVAILABLE)
    ]
    assert sp.start_offset == 40 and sp.in_flight() == 20


# ---------------------------------------------------------------------- against the model

MEMBERS = ("m0", "m1", "m2")
LOCK_MS = 500

# The log: batches of 1-8 records, some gaps (control / aborted), some offsets missing
# (compacted away) between batches.
LOG = st.lists(
    st.tuples(st.integers(1, 8), st.integers(0, 3), st.integers(0, 9)), min_size=1, max_size=14
)

TYPES = st.sampled_from(list(AckType))
OPS = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 30), st.integers(1, 6),
              st.booleans()),
    st.tuples(
        st.just("ack"), st.sampled_from(MEMBERS), st.integers(-5, 25), st.integers(0, 12), TYPES
    ),
    st.tuples(
        st.just("acks"),
        st.sampled_from(MEMBERS),
        st.integers(-5, 25),
        st.lists(TYPES, min_size=1, max_size=12),
    ),
    # an acknowledgement of something acquired before (by its holder, or not), in part
    # or whole, one type or types per offset
    st.tuples(
        st.just("held"),
        st.integers(0, 50),
        st.integers(0, 4),
        st.integers(0, 3),
        st.integers(0, 3),
        st.lists(TYPES, min_size=1, max_size=3),
    ),
    st.tuples(
        st.just("held"),
        st.integers(0, 50),
        st.integers(1, 4),
        st.just(0),
        st.just(0),
        st.sampled_from([[AckType.ACCEPT], [AckType.RELEASE], [AckType.REJECT]]),
    ),
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 30), st.integers(1, 6),
              st.booleans()),
    st.tuples(st.just("tick"), st.integers(0, 2 * LOCK_MS)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
    st.tuples(
        st.just("hand_back"), st.sampled_from(MEMBERS), st.integers(-5, 25), st.integers(0, 12)
    ),
    st.tuples(st.just("log_start"), st.integers(0, 4)),
    st.tuples(st.just("restore")),
)


def _log(spec: list[tuple[int, int, int]]) -> list[tuple[int, int, bool]]:
    out = []
    offset = 0
    for n, skip, gap_roll in spec:
        offset += skip if skip >= 2 else 0  # now and then offsets missing
        out.append((offset, offset + n - 1, gap_roll == 0))  # ~1 in 10 a gap
        offset += n
    return out


def _expand(changes: Iterable[tuple[int, int, int, int]]) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for first, last, state, count in changes:
        for o in range(first, last + 1):
            out[o] = (state, count)
    return out


def _dead(dead: Sequence[tuple[int, int, int, str]]) -> list[tuple[int, int, str]]:
    return [(o, c, why) for first, last, c, why in dead for o in range(first, last + 1)]


def _same(a: SharePartition, m: RecordModel) -> None:
    assert (a.start_offset, a.end_offset, a.in_flight()) == (
        m.start_offset,
        m.end_offset,
        m.in_flight(),
    )
    for o in range(max(0, a.start_offset - 2), a.end_offset + 3):
        assert a.state_of(o) == m.state_of(o), o
    assert a.delivery_counts() == m.delivery_counts()
    assert a.next_deadline_ms() == m.next_deadline_ms()
    assert _dead(a.dead) == _dead(m.dead)
    assert a.noted() >= 0 and a.has_changes() == m.has_changes()
    for slot in PartitionStats.__slots__:
        assert getattr(a.stats, slot) == getattr(m.stats, slot), slot
    _check_structure(a._inflight)


def _call(f, *args):  # type: ignore[no-untyped-def]
    try:
        return f(*args)
    except InvalidRecordState:
        return InvalidRecordState


@settings(max_examples=300, deadline=None)
@given(
    LOG,
    st.lists(OPS, min_size=10, max_size=60),
    st.integers(1, 4),
    st.integers(2, 40),
    st.sampled_from([0, 0, 300]),
)
def test_batches_behave_as_records(
    spec: list, ops: list[tuple], limit: int, cap: int, delay: int
) -> None:
    clock = ManualClock()
    kw = {
        "lock_duration_ms": LOCK_MS,
        "delivery_count_limit": limit,
        "max_record_locks": cap,
        "redelivery_delay_ms": delay,
    }
    a = SharePartition("g", "t", 0, clock, **kw)
    m = RecordModel("g", "t", 0, clock, **kw)
    a.initialize(0, 0, "earliest")
    m.initialize(0, 0, "earliest")
    log = _log(spec)
    log_start = 0
    persisted: tuple[int, list[tuple[int, int, int, int]]] = (0, [])
    changes_a: list[tuple[int, int, int, int]] = []
    changes_m: list[tuple[int, int, int, int]] = []
    acquired: list[tuple[str, AcquiredRange]] = []
    for op in ops:
        kind = op[0]
        if kind == "acquire":
            at = a.next_fetch_offset()
            assert at == m.next_fetch_offset()
            read = [b for b in log if b[1] >= at][: op[3]]
            got = a.acquire(op[1], read, op[2], op[4])
            assert got == m.acquire(op[1], read, op[2], op[4]), (read, op)
            acquired += [(op[1], r) for r in got]
        elif kind == "held":
            if not acquired:
                continue
            # mostly one of the last few acquisitions (older ones are often done)
            holder, rng = acquired[-1 - op[1] % min(len(acquired), 3 + op[1] // 40)]
            member = holder if op[2] else MEMBERS[(MEMBERS.index(holder) + 1) % len(MEMBERS)]
            first = min(rng.first_offset + op[3], rng.last_offset)
            last = max(rng.last_offset - op[4], first)
            kinds = op[5]
            types = (
                kinds
                if len(kinds) == 1
                else [kinds[i % len(kinds)] for i in range(last - first + 1)]
            )
            assert _call(a.acknowledge, member, first, last, types) == _call(
                m.acknowledge, member, first, last, types
            )
        elif kind == "ack":
            types = [op[4]]
            first = max(0, a.start_offset + op[2])  # near the window, where records are
            assert _call(a.acknowledge, op[1], first, first + op[3], types) == _call(
                m.acknowledge, op[1], first, first + op[3], types
            )
        elif kind == "acks":
            first = max(0, a.start_offset + op[2])
            last = first + len(op[3]) - 1
            assert _call(a.acknowledge, op[1], first, last, op[3]) == _call(
                m.acknowledge, op[1], first, last, op[3]
            )
        elif kind == "tick":
            clock.advance(op[1])
            assert a.expire() == m.expire()
        elif kind == "leave":
            assert a.release_member(op[1]) == m.release_member(op[1])
        elif kind == "hand_back":
            first = max(0, a.start_offset + op[2])
            rng = [AcquiredRange(first, first + op[3], 1)]
            a.hand_back(op[1], rng)
            m.hand_back(op[1], rng)
        elif kind == "log_start":
            log_start = min(log_start + op[1], max(0, a.end_offset))
            a.log_start_moved(log_start)
            m.log_start_moved(log_start)
        else:  # a new leader: both from what was persisted
            a = SharePartition("g", "t", 0, clock, **kw)
            m = RecordModel("g", "t", 0, clock, **kw)
            a.restore(*persisted)
            m.restore(*persisted)
            a.log_start_moved(log_start)
            m.log_start_moved(log_start)
        _same(a, m)
        ta, tm = a.take_changes(), m.take_changes()
        assert (ta is None) == (tm is None)
        if ta is not None and tm is not None:
            assert ta[0] == tm[0]
            changes_a += ta[1]
            changes_m += tm[1]
            assert _expand(changes_a) == _expand(changes_m)
            assert overlay(persisted[1], ta[1], ta[0]) == overlay(persisted[1], tm[1], tm[0])
            persisted = (ta[0], overlay(persisted[1], ta[1], ta[0]))


@pytest.mark.parametrize("batch", [1, 7, 500])
def test_redelivery_of_part_of_a_batch(batch: int) -> None:
    """A redelivery bounded by max_records takes part of an available batch; the rest
    stays available with its count."""
    clock = ManualClock()
    sp = SharePartition("g", "t", 0, clock, lock_duration_ms=LOCK_MS)
    sp.initialize(0, 0, "earliest")
    sp.acquire("a", [(0, batch - 1)], batch)
    clock.advance(LOCK_MS)
    half = max(1, batch // 2)
    assert sp.acquire("b", [(0, batch - 1)], half) == [AcquiredRange(0, half - 1, 2)]
    if batch > 1:
        assert sp.state_of(half) == (RecordState.AVAILABLE, 1, "")
    assert sp.state_of(0) == (RecordState.ACQUIRED, 2, "b")


def test_the_log_read_is_planned_from_the_record_size_seen() -> None:
    """The first read takes up to READ_MAX_BYTES; later ones what max_records records take
    at the bytes per record seen, with room to spare (a 1 MiB pread per fetch of 500 small
    records was the largest cost left of a share fetch)."""
    from yak.share.partition import READ_MAX_BYTES, READ_SLACK

    sp = SharePartition("g", "t", 0, ManualClock())
    assert sp.read_bytes(50 << 20, 500) == READ_MAX_BYTES
    assert sp.read_bytes(1000, 500) == 1000  # never past what the request has left
    sp.read_seen([(0, 99, False, b"x" * 10_000), (100, 199, False, b"x" * 10_000)])
    assert sp.record_bytes == 100
    assert sp.read_bytes(50 << 20, 500) == 75_000 + READ_SLACK
    sp.read_seen([(200, 209, False, b"x" * 30_000)])  # records grew: the plan follows
    assert sp.record_bytes == (100 + 3000) / 2
    assert sp.read_bytes(50 << 20, 500) == READ_MAX_BYTES


def test_batch_optimized_acquisition_takes_the_batch_to_its_end() -> None:
    """ShareFetch's default acquire mode (batch-optimized, Kafka's): new records are taken
    to the end of the log batch holding the max_records-th one, never into the next
    batch; record-limit mode stops at max_records; the lock cap is exact either way."""
    sp = SharePartition("g", "t", 0, ManualClock(), max_record_locks=900)
    sp.initialize(0, 0, "earliest")
    log = [(0, 599), (600, 1199)]
    assert sp.acquire("a", log, 500, record_limit=False) == [AcquiredRange(0, 599, 1)]
    # the lock cap (900 in flight) cuts the next batch where it stands
    assert sp.acquire("b", log[1:], 500, record_limit=False) == [AcquiredRange(600, 899, 1)]
    strict = SharePartition("g", "t", 0, ManualClock())
    strict.initialize(0, 0, "earliest")
    assert strict.acquire("a", log, 500, record_limit=True) == [AcquiredRange(0, 499, 1)]
    # 100 records left in the first batch, so the second is taken too, to its end
    assert strict.acquire("a", log, 500, record_limit=False) == [AcquiredRange(500, 1199, 1)]
