"""The share partition (KIP-932, Kafka's SharePartition): one share group's view of one
topic-partition on its leader.

A window [start_offset, end_offset) of in-flight records. Each record in it is AVAILABLE
(may be handed out), ACQUIRED (locked to one member until its acquisition lock expires),
or terminal: ACKNOWLEDGED (accepted) or ARCHIVED (rejected, or its delivery count reached
the limit). Terminal records are dropped from the map at once, so `start_offset` is the
first record that is still AVAILABLE or ACQUIRED (the window slides as soon as its first
records are done) and never passes a record that is neither acknowledged nor archived.

The map is keyed by offset and filled in ascending order only (new records are always
taken at `end_offset`), so a dict's insertion order is offset order and its first key is
the start. Kafka keeps whole batches and splits them per offset only on partial
acknowledgement; this first layer keeps one entry per record (a known cost, see
docs/share-groups.md), bounded by `group.share.partition.max.record.locks`.

Time comes from an injected `Clock` (ManualClock in tests): locks expire lazily, before
every acquire and acknowledgement, and `next_deadline_ms()` tells a waiting fetch when
the next lock will expire.

Durability (`records.py`, the share coordinator): every change a restart must not lose is
also noted as a state batch in `_changes` (per run of offsets, never per record where a
whole range changes at once): an acquisition (the delivery count went up: persisted as
available with that count, since a lock does not outlive its leader), an acknowledgement
(2) or an archive (4); a release or an expiry changes nothing durable unless it archives.
`take_changes()` hands them to the manager, which writes them before answering;
`restore()` rebuilds the window from the persisted state on first use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from yak.clock import Clock
from yak.share.metrics import PartitionStats

__all__ = ["AckType", "AcquiredRange", "RecordState", "SharePartition"]


class RecordState(IntEnum):
    """Kafka's RecordState values (the ones the state topic will store)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """ShareFetch/ShareAcknowledge acknowledge types (KIP-932)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # v2 (KIP-1222): keep the record, restart its lock


@dataclass(slots=True)
class _InFlight:
    state: RecordState
    delivery_count: int
    member_id: str
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """What ShareFetch's AcquiredRecords carries: offsets first..last, one delivery count."""

    first_offset: int
    last_offset: int
    delivery_count: int


# The most of the log one acquisition reads per share partition (Kafka consumers'
# max.partition.fetch.bytes default): a ShareFetch asks for up to ~500 records but up
# to 50 MiB, and reading (pread, into memory) all that to hand out 500 records cost
# more than everything else of a share fetch of 1 KiB records (docs/benchmarks/
# share-groups.md). A first batch larger than this is still read whole.
READ_MAX_BYTES = 1 << 20

# Why a record went to the dead-letter topic (its `__dlq.errors.reason` header).
DELIVERY_LIMIT = "delivery count limit reached"
REJECTED = "rejected"


class InvalidRecordState(Exception):
    """An acknowledgement of a record this member does not hold (INVALID_RECORD_STATE)."""


class SharePartition:
    def __init__(
        self,
        group_id: str,
        topic: str,
        partition: int,
        clock: Clock,
        *,
        lock_duration_ms: int = 30_000,
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
        # A released or expired record is AVAILABLE again only this long after (its
        # `deadline_ms` is then when it becomes ready; 0: at once).
        self.redelivery_delay_ms = redelivery_delay_ms
        self._next_ready: int | None = None  # earliest ready time of a delayed record
        # Archived records to copy to the group's dead-letter topic:
        # (first, last, delivery count, reason), taken by the manager.
        self.dead: list[tuple[int, int, int, str]] = []
        self.end_offset = -1  # -1: not initialized (no fetch yet)
        self._records: dict[int, _InFlight] = {}
        self._next_deadline: int | None = None
        self._changes: list[tuple[int, int, int, int]] = []  # state batches to persist
        self._persisted_start = -1
        self._taken = 0  # changes handed out by take_changes so far
        self.state_epoch = 0
        self.leader_epoch = -1  # the partition's leader epoch this window was loaded at
        self.durable = 0  # `noted()` as of the last successful write (the manager's)
        self.stats = PartitionStats()  # the manager hands in the broker's (metrics.py)

    # ------------------------------------------------------------------ durability

    def restore(self, start_offset: int, batches: Sequence[tuple[int, int, int, int]],
                state_epoch: int = 0) -> None:
        """The persisted state (start offset, state batches): records not done come back
        AVAILABLE with their delivery counts (their locks died with the old leader), except
        those that had reached the delivery limit, which are archived as their lock's
        expiry would have; done ones stay done; the window ends after the last batch."""
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
        # batches arrive sorted and disjoint, so the dict is in offset order
        self.end_offset = end
        self._persisted_start = start_offset

    def take_changes(self) -> tuple[int, list[tuple[int, int, int, int]]] | None:
        """(start offset, state batches) changed since the last call, or None. The
        caller writes them at once, before any await (the order of the writes)."""
        start = self.start_offset
        if not self._changes and start == self._persisted_start:
            return None
        changes, self._changes = self._changes, []
        self._persisted_start = start
        self._taken += len(changes)
        return start, changes

    def untake(self, changes: list[tuple[int, int, int, int]]) -> None:
        """A write of `changes` failed: they go back in front, to be written again."""
        self._changes[:0] = changes
        self._taken -= len(changes)
        self._persisted_start = -1

    def noted(self) -> int:
        """How many changes were ever noted (a sequence number for 'written up to')."""
        return self._taken + len(self._changes)

    def has_changes(self) -> bool:
        return bool(self._changes) or self.start_offset != self._persisted_start

    def hand_back(self, member_id: str, ranges: Sequence[AcquiredRange]) -> None:
        """Acquisitions that could not be made durable: released again (their delivery
        counts stay up: a count never goes down)."""
        for a in ranges:
            for offset in range(a.first_offset, a.last_offset + 1):
                r = self._records.get(offset)
                if r is not None and r.state is RecordState.ACQUIRED \
                        and r.member_id == member_id:
                    self._release(offset, r)

    # ------------------------------------------------------------------ the window

    @property
    def initialized(self) -> bool:
        return self.end_offset >= 0

    def initialize(self, log_start: int, log_end: int, reset: str = "latest") -> None:
        """The first fetch: the window starts at the log end (`latest`, Kafka's default)
        or start (`earliest`)."""
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
        """(records acquired now, in-flight records by delivery count): a metrics scrape's
        walk of the window, never on a request's path."""
        acquired = 0
        by: dict[int, int] = {}
        for r in self._records.values():
            acquired += r.state is RecordState.ACQUIRED
            by[r.delivery_count] = by.get(r.delivery_count, 0) + 1
        return acquired, by

    def state_of(self, offset: int) -> tuple[RecordState, int, str] | None:
        """(state, delivery count, holder) of an in-flight record; None once terminal or
        outside the window."""
        r = self._records.get(offset)
        return None if r is None else (r.state, r.delivery_count, r.member_id)

    def log_start_moved(self, log_start: int) -> None:
        """Records below the log start (retention, DeleteRecords) cannot be delivered:
        archived, and the window starts at the log start."""
        for offset in [o for o in self._records if o < log_start]:
            del self._records[offset]
        if self.end_offset < log_start:
            self.end_offset = log_start

    # ------------------------------------------------------------------ acquisition

    @staticmethod
    def read_bytes(bytes_left: int) -> int:
        """How many bytes of the log the next acquisition reads."""
        return min(bytes_left, READ_MAX_BYTES)

    def next_fetch_offset(self) -> int:
        """Where the log read for an acquisition starts: the first AVAILABLE record (a
        redelivery), else the window's end."""
        now = self.clock.now_ms()
        self.expire(now)
        for offset, r in self._records.items():
            if r.state is RecordState.AVAILABLE and r.deadline_ms <= now:
                return offset
        return self.end_offset

    def acquire(
        self, member_id: str, batches: Iterable[tuple[int, ...]], max_records: int
    ) -> list[AcquiredRange]:
        """Acquire for `member_id` the records of the log batches read (each as
        (base offset, last offset[, gap]), ascending): AVAILABLE ones inside the window and
        new ones at its end, at most `max_records`, and never more in flight than
        `max_record_locks`. Each acquired record's delivery count goes up by one and its
        lock runs `lock_duration_ms` from now. A batch marked as a gap (a control batch,
        an aborted transaction's batch under read_committed) is never handed out: it is
        archived as the window reaches it, so it cannot stall the window."""
        now = self.clock.now_ms()
        self.expire(now)
        deadline = now + self.lock_duration_ms
        runs: list[list[int]] = []  # [first, last, delivery count]
        taken = 0
        records = self._records
        acquired = RecordState.ACQUIRED
        available = RecordState.AVAILABLE
        for batch in batches:
            if taken >= max_records:
                break
            base, last = batch[0], batch[1]
            if len(batch) > 2 and batch[2]:
                self._archive_gap(base, last)
                continue
            offset = max(base, self.start_offset)
            # Inside the window: only AVAILABLE records (redeliveries), one by one.
            stop = min(last + 1, self.end_offset)
            while offset < stop and taken < max_records:
                r = records.get(offset)
                if r is not None and r.state is available and r.deadline_ms <= now:
                    r.state = acquired
                    r.delivery_count += 1
                    r.member_id = member_id
                    r.deadline_ms = deadline
                    _extend(runs, offset, offset, r.delivery_count)
                    taken += 1
                offset += 1
            if offset > last or taken >= max_records:
                continue
            # New records at the end, as one run. Offsets skipped between the old end and
            # this batch do not exist (compacted away), so the end jumps.
            n = min(last + 1 - offset, max_records - taken,
                    self.max_record_locks - len(records))
            if n <= 0:
                break  # the record-lock cap: nothing more until the window moves
            for o in range(offset, offset + n):
                records[o] = _InFlight(acquired, 1, member_id, deadline)
            _extend(runs, offset, offset + n - 1, 1)
            taken += n
            self.end_offset = offset + n
        if runs and (self._next_deadline is None or deadline < self._next_deadline):
            self._next_deadline = deadline
        self._changes.extend((a, b, 0, c) for a, b, c in runs)
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

    # ------------------------------------------------------------------ acknowledgement

    def acknowledge(
        self, member_id: str, first_offset: int, last_offset: int, types: Sequence[int]
    ) -> None:
        """Apply one acknowledgement batch: `types` has one type for the whole range or
        one per offset. Every record must be ACQUIRED by `member_id` with its lock still
        held (a gap may also be already done); otherwise InvalidRecordState and nothing
        of the batch changes."""
        count = last_offset - first_offset + 1
        if count <= 0 or len(types) not in (1, count):
            raise InvalidRecordState("acknowledgement batch and types do not match")
        try:
            kinds = [AckType(t) for t in types]
        except ValueError as e:
            raise InvalidRecordState(f"unknown acknowledge type: {e}") from None
        self.expire()
        records = self._records
        start, end = self.start_offset, self.end_offset
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
            # The common case: the whole range accepted (or rejected, or gaps): terminal.
            counts = [r.delivery_count for o in range(first_offset, last_offset + 1)
                      if (r := records.pop(o, None)) is not None] \
                if one is AckType.REJECT else ()
            self._changes.append((first_offset, last_offset,
                                  2 if one is AckType.ACCEPT else 4, 0))
            if counts:
                self.dead.append((first_offset, last_offset, max(counts), REJECTED))
            else:
                for offset in range(first_offset, last_offset + 1):
                    records.pop(offset, None)
            self.stats.acked(one, count)
            return
        for kind in set(kinds):  # per type, not per record
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
            else:  # ACCEPT -> ACKNOWLEDGED, REJECT and GAP -> ARCHIVED: both terminal
                del records[offset]
                self._changes.append((offset, offset, 2 if kind is AckType.ACCEPT else 4, 0))
                if kind is AckType.REJECT:
                    self.dead.append((offset, offset, r.delivery_count, REJECTED))

    def release_member(self, member_id: str) -> int:
        """A member left (or its share session closed): its acquired records become
        available again (or archived at the delivery limit). Returns how many."""
        mine = [(o, r) for o, r in self._records.items()
                if r.state is RecordState.ACQUIRED and r.member_id == member_id]
        for offset, r in mine:
            self._release(offset, r)
        return len(mine)

    # ------------------------------------------------------------------ locks

    def expire(self, now_ms: int | None = None) -> int:
        """Release every record whose acquisition lock has expired. Returns how many."""
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
        """When something changes by itself: a lock expires or a delayed record becomes
        ready (a waiting fetch wakes then)."""
        ready = self._next_ready
        if ready is not None and ready <= self.clock.now_ms():
            ready = self._next_ready = self._recompute_ready()
        if ready is None:
            return self._next_deadline
        return ready if self._next_deadline is None else min(ready, self._next_deadline)

    def _recompute_ready(self) -> int | None:
        now = self.clock.now_ms()
        later = [r.deadline_ms for r in self._records.values()
                 if r.state is RecordState.AVAILABLE and r.deadline_ms > now]
        return min(later) if later else None

    def _release(self, offset: int, r: _InFlight) -> None:
        if r.delivery_count >= self.delivery_count_limit:
            del self._records[offset]  # ARCHIVED: the delivery limit is reached
            self.stats.archived_limit += 1
            self._changes.append((offset, offset, 4, r.delivery_count))
            dead = self.dead
            if dead and dead[-1][1] + 1 == offset and dead[-1][2:] == (r.delivery_count,
                                                                       DELIVERY_LIMIT):
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
