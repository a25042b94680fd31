"""The share partition (KIP-932, Kafka's SharePartition): one share group's view of one
topic-partition on its leader.

A window [start_offset, end_offset) of in-flight records. Each record in it is AVAILABLE
(may be handed out), ACQUIRED (locked to one member until its acquisition lock expires),
or terminal: ACKNOWLEDGED (accepted) or ARCHIVED (rejected, or its delivery count reached
the limit). Terminal records are dropped at once, so `start_offset` is the first record
that is still AVAILABLE or ACQUIRED (the window slides as soon as its first records are
done) and never passes a record that is neither acknowledged nor archived.

The records not done are kept per batch (`inflight.py`, Kafka's `InFlightBatch`): a whole
batch acquired, accepted, released or expired is one operation on one entry; a batch is
split only where an operation covers part of it (acknowledgement types per offset, a
partial acquisition). New records are always taken at `end_offset`, so batches are
appended in offset order. In-flight records are bounded by
`group.share.partition.max.record.locks`.

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

from collections.abc import Callable, Iterable, Sequence, Sized
from dataclasses import dataclass
from enum import IntEnum

from yak.clock import Clock
from yak.share.inflight import Batch, InFlight
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
# Below that, an acquisition reads what `max_records` records take at the bytes per record
# seen so far, half again as much and READ_SLACK more: 500 records of 100 B are ~80 KiB,
# and a 1 MiB pread per fetch was the largest single cost left of a share fetch of 100 B
# records. A read that falls short acquires fewer records; the next fetch reads on.
READ_SLACK = 16 << 10

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
        # batch's `deadline` is then when it becomes ready; 0: at once).
        self.redelivery_delay_ms = redelivery_delay_ms
        self._next_ready: int | None = None  # earliest ready time of a delayed record
        # Archived records to copy to the group's dead-letter topic:
        # (first, last, delivery count, reason), taken by the manager.
        self.dead: list[tuple[int, int, int, str]] = []
        self.end_offset = -1  # -1: not initialized (no fetch yet)
        self._inflight = InFlight()
        self._next_deadline: int | None = None
        self._changes: list[tuple[int, int, int, int]] = []  # state batches to persist
        self._persisted_start = -1
        self._taken = 0  # changes handed out by take_changes so far
        self.state_epoch = 0
        self.leader_epoch = -1  # the partition's leader epoch this window was loaded at
        self.durable = 0  # `noted()` as of the last successful write (the manager's)
        self.stats = PartitionStats()  # the manager hands in the broker's (metrics.py)
        self.record_bytes = 0.0  # log bytes per record read so far (0: no read yet)

    # ------------------------------------------------------------------ durability

    def restore(self, start_offset: int, batches: Sequence[tuple[int, int, int, int]],
                state_epoch: int = 0) -> None:
        """The persisted state (start offset, state batches): records not done come back
        AVAILABLE with their delivery counts (their locks died with the old leader), except
        those that had reached the delivery limit, which are archived as their lock's
        expiry would have; done ones stay done; the window ends after the last batch.
        One in-flight batch per persisted batch (they arrive sorted and disjoint)."""
        fl = self._inflight
        fl.clear()
        self.state_epoch = state_epoch
        end = start_offset
        limit = self.delivery_count_limit
        for first, last, state, count in batches:
            end = max(end, last + 1)
            if state != 0 or last < start_offset:
                continue
            lo = max(first, start_offset)
            if count >= limit:
                self._changes.append((lo, last, 4, count))
                self.dead.append((lo, last, count, DELIVERY_LIMIT))
                continue
            fl.append(lo, last, RecordState.AVAILABLE, count, "", 0)
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
        """Acquisitions whose state write failed: the records never went out, so they are
        AVAILABLE again at the delivery count they had before (a delivery that did not
        happen is not counted, or a few failed writes while the share coordinator moves
        would dead-letter records nobody received). Kafka's SharePartition persists no
        acquisition at all and rolls back a state change whose write failed
        (`rollbackOrProcessStateUpdates`). The lower count is noted as a change after the
        failed one, which waits to be written again: a write that failed may have landed,
        and the next one corrects it."""
        acquired = RecordState.ACQUIRED

        def undo(i: int) -> bool:
            b = self._inflight.batches[i]
            b.count = max(0, b.count - 1)
            self._changes.append((b.first, b.last, 0, b.count))
            return self._release_at(i)  # below the limit now: never archives

        for a in ranges:
            self._each(a.first_offset, a.last_offset,
                       lambda b: b.state is acquired and b.member == member_id, undo)

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
        b = self._inflight.batches
        return b[0].first if b else self.end_offset

    def in_flight(self) -> int:
        return self._inflight.records

    def delivery_counts(self) -> tuple[int, dict[int, int]]:
        """(records acquired now, in-flight records by delivery count): a metrics scrape's
        walk of the window, never on a request's path."""
        acquired = 0
        by: dict[int, int] = {}
        for b in self._inflight:
            n = b.last - b.first + 1
            if b.state is RecordState.ACQUIRED:
                acquired += n
            by[b.count] = by.get(b.count, 0) + n
        return acquired, by

    def state_of(self, offset: int) -> tuple[RecordState, int, str] | None:
        """(state, delivery count, holder) of an in-flight record; None once terminal or
        outside the window."""
        b = self._inflight.find(offset)
        return None if b is None else (RecordState(b.state), b.count, b.member)

    def log_start_moved(self, log_start: int) -> None:
        """Records below the log start (retention, DeleteRecords) cannot be delivered:
        archived, and the window starts at the log start."""
        if self.start_offset < log_start:
            self._inflight.drop_below(log_start)
        if self.end_offset < log_start:
            self.end_offset = log_start

    # ------------------------------------------------------------------ acquisition

    def read_bytes(self, bytes_left: int, max_records: int) -> int:
        """How many bytes of the log the next acquisition of `max_records` reads."""
        want = READ_MAX_BYTES
        if self.record_bytes:
            want = int(max_records * self.record_bytes * 1.5) + READ_SLACK
        return min(bytes_left, READ_MAX_BYTES, want)

    def read_seen(self, batches: Sequence[tuple[int, int, bool, Sized]]) -> None:
        """What a log read returned, as (base, last, gap, bytes) per batch: the bytes per
        record `read_bytes` plans with follow it (the mean of the last and this one)."""
        if batches:
            x = sum(len(b[3]) for b in batches) / (batches[-1][1] + 1 - batches[0][0])
            self.record_bytes = (self.record_bytes + x) / 2 if self.record_bytes else x

    def next_fetch_offset(self) -> int:
        """Where the log read for an acquisition starts: the first AVAILABLE record (a
        redelivery), else the window's end."""
        now = self.clock.now_ms()
        self.expire(now)
        available = RecordState.AVAILABLE
        for b in self._inflight:
            if b.state is available and b.deadline <= now:
                return b.first
        return self.end_offset

    def acquire(
        self, member_id: str, batches: Iterable[tuple[int, ...]], max_records: int,
        record_limit: bool = True,
    ) -> list[AcquiredRange]:
        """Acquire for `member_id` the records of the log batches read (each as
        (base offset, last offset[, gap]), ascending): AVAILABLE ones inside the window and
        new ones at its end, at most `max_records`, and never more in flight than
        `max_record_locks`. `record_limit` False is ShareFetch's batch-optimized acquire
        mode (KIP-1206's default, mode 0, and Kafka's only behaviour before it): for new
        records `max_records` is a soft limit, the log batch holding the last record it
        allows is taken to its end, as Kafka's `SharePartition.acquireNewBatchRecords`
        does. The batch goes back whole either way; a strict limit that stops inside it
        leaves its rest to the next fetch, which sends the whole batch again (with 1 MB
        batches of 1 KiB records and 500 records a fetch, every byte went out twice:
        docs/benchmarks/share-groups.md). Redeliveries and the lock cap stay exact. Each
        acquired record's delivery count goes up by one and its
        lock runs `lock_duration_ms` from now. A batch marked as a gap (a control batch,
        an aborted transaction's batch under read_committed) is never handed out: it is
        archived as the window reaches it, so it cannot stall the window. Per in-flight
        batch: one taken whole is one entry changed, one taken in part is split."""
        now = self.clock.now_ms()
        self.expire(now)
        deadline = now + self.lock_duration_ms
        runs: list[list[int]] = []  # [first, last, delivery count]
        taken = 0
        fl = self._inflight
        held = fl.batches
        acquired = RecordState.ACQUIRED
        available = RecordState.AVAILABLE
        for batch in batches:
            if taken >= max_records:
                break
            base, last = batch[0], batch[1]
            if len(batch) > 2 and batch[2]:
                self._archive_gap(base, last)
                continue
            end = self.end_offset
            offset = max(base, self.start_offset)
            stop = min(last + 1, end)
            if offset < stop:
                # Inside the window: only AVAILABLE records (redeliveries), per batch.
                i = fl.index(offset)
                while i < len(held) and held[i].first < stop and taken < max_records:
                    b = held[i]
                    if b.state is available and b.deadline <= now:
                        lo = max(b.first, offset)
                        hi = min(b.last, stop - 1, lo + max_records - taken - 1)
                        i = fl.isolate(i, lo, hi)
                        b = held[i]
                        b.state = acquired
                        b.count += 1
                        b.member = member_id
                        b.deadline = deadline
                        _extend(runs, lo, hi, b.count)
                        taken += hi - lo + 1
                    i += 1
                if taken >= max_records:
                    continue
            if last < end:
                continue
            # New records at the end, as one run. Offsets skipped between the old end and
            # this batch do not exist (compacted away), so the end jumps.
            offset = max(base, end)
            n = min(last + 1 - offset, self.max_record_locks - fl.records)
            if record_limit:
                n = min(n, max_records - taken)
            if n <= 0:
                break  # the record-lock cap: nothing more until the window moves
            fl.append(offset, offset + n - 1, acquired, 1, member_id, deadline)
            _extend(runs, offset, offset + n - 1, 1)
            taken += n
            self.end_offset = offset + n
        if runs and (self._next_deadline is None or deadline < self._next_deadline):
            self._next_deadline = deadline
        self._changes.extend((a, b, 0, c) for a, b, c in runs)
        self.stats.acquired += taken
        return [AcquiredRange(a, b, c) for a, b, c in runs]

    def _archive_gap(self, base: int, last: int) -> None:
        lo = max(base, self.start_offset)
        if lo <= last:
            self._changes.append((lo, last, 4, 0))
        hi = min(last, self.end_offset - 1)
        if lo <= hi:
            available = RecordState.AVAILABLE
            self._each(lo, hi, lambda b: b.state is available, self._drop)
        if last >= self.end_offset:
            self.end_offset = last + 1

    # ------------------------------------------------------------------ acknowledgement

    def acknowledge(
        self, member_id: str, first_offset: int, last_offset: int, types: Sequence[int]
    ) -> None:
        """Apply one acknowledgement batch: `types` has one type for the whole range or
        one per offset. Every record must be ACQUIRED by `member_id` with its lock still
        held (a gap may also be already done); otherwise InvalidRecordState and nothing
        of the batch changes. One type for the range: per in-flight batch; types per
        offset: per run of equal types."""
        count = last_offset - first_offset + 1
        n = len(types)
        if count <= 0 or n not in (1, count):
            raise InvalidRecordState("acknowledgement batch and types do not match")
        try:
            if n == 1 or types.count(types[0]) == n:  # one type (per offset, all equal)
                one: AckType | None = AckType(types[0])
                kinds: list[AckType] = []
            else:
                one = None
                kinds = [AckType(t) for t in types]
        except ValueError as e:
            raise InvalidRecordState(f"unknown acknowledge type: {e}") from None
        self.expire()
        self._check(member_id, first_offset, last_offset, one, kinds)
        if n == 1 and one not in (AckType.RELEASE, AckType.RENEW):
            # The common case: the whole range accepted (or rejected, or gaps): terminal.
            counts: list[int] = []

            def drop(i: int) -> bool:
                counts.append(self._drop(i))
                return True

            self._each(first_offset, last_offset, _ANY, drop)
            self._changes.append((first_offset, last_offset,
                                  2 if one is AckType.ACCEPT else 4, 0))
            if counts and one is AckType.REJECT:
                self.dead.append((first_offset, last_offset, max(counts), REJECTED))
            self.stats.acked(one, count)
            return
        if one is not None:  # one type, or one per offset all equal: per in-flight batch
            self.stats.acked(one, count)
            self._apply(first_offset, last_offset, one)
            return
        for kind in set(kinds):  # per type, not per record
            self.stats.acked(kind, kinds.count(kind))
        lo = first_offset
        for k in range(1, count + 1):  # runs of equal types
            if k == count or kinds[k] is not kinds[lo - first_offset]:
                self._apply(lo, first_offset + k - 1, kinds[lo - first_offset])
                lo = first_offset + k

    def _check(self, member_id: str, first: int, last: int, one: AckType | None,
               kinds: list[AckType]) -> None:
        """InvalidRecordState unless every offset first..last is ACQUIRED by `member_id`,
        or not in flight, inside the window and acknowledged as a GAP."""
        fl = self._inflight
        held = fl.batches
        start, end = self.start_offset, self.end_offset
        acquired = RecordState.ACQUIRED
        gap = AckType.GAP
        i = fl.index(first)
        pos = first
        while pos <= last:
            b = held[i] if i < len(held) else None
            if b is None or b.first > pos:  # pos..hole not in flight
                hole = last if b is None else min(last, b.first - 1)
                if one is not None:
                    bad = pos if one is not gap or pos < start else (
                        end if hole >= end else None)
                else:
                    bad = next((o for o in range(pos, hole + 1)
                                if kinds[o - first] is not gap or not start <= o < end), None)
                if bad is not None:
                    raise InvalidRecordState(f"offset {bad} is not acquired")
                pos = hole + 1
                continue
            if b.state is not acquired or b.member != member_id:
                raise InvalidRecordState(f"offset {pos} is not acquired by this member")
            pos = b.last + 1
            i += 1

    def _apply(self, lo: int, hi: int, kind: AckType) -> None:
        """One acknowledge type over lo..hi (already checked)."""
        if kind is AckType.RELEASE:
            self._each(lo, hi, _ANY, self._release_at)
        elif kind is AckType.RENEW:
            deadline = self.clock.now_ms() + self.lock_duration_ms

            def renew(i: int) -> bool:
                self._inflight.batches[i].deadline = deadline
                return False

            self._each(lo, hi, _ANY, renew)
        else:  # ACCEPT -> ACKNOWLEDGED, REJECT and GAP -> ARCHIVED: both terminal
            state = 2 if kind is AckType.ACCEPT else 4
            reject = kind is AckType.REJECT

            def done(i: int) -> bool:
                b = self._inflight.remove(i)
                self._changes.append((b.first, b.last, state, 0))
                if reject:
                    self.dead.append((b.first, b.last, b.count, REJECTED))
                return True

            self._each(lo, hi, _ANY, done)

    def release_member(self, member_id: str) -> int:
        """A member left (or its share session closed): its acquired records become
        available again (or archived at the delivery limit). Returns how many."""
        first = self._inflight.first_offset()
        if first is None:
            return 0
        acquired = RecordState.ACQUIRED
        return self._each(first, self.end_offset,
                          lambda b: b.state is acquired and b.member == member_id,
                          self._release_at)

    # ------------------------------------------------------------------ locks

    def expire(self, now_ms: int | None = None) -> int:
        """Release every record whose acquisition lock has expired. Returns how many."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        if self._next_deadline is None or now < self._next_deadline:
            return 0
        n = 0
        nxt: int | None = None
        held = self._inflight.batches
        acquired = RecordState.ACQUIRED
        i = 0
        while i < len(held):
            b = held[i]
            if b.state is acquired:
                if b.deadline <= now:
                    n += b.last - b.first + 1
                    if self._release_at(i):
                        continue
                elif nxt is None or b.deadline < nxt:
                    nxt = b.deadline
            i += 1
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
        later = [b.deadline for b in self._inflight
                 if b.state is RecordState.AVAILABLE and b.deadline > now]
        return min(later) if later else None

    # ------------------------------------------------------------------ per batch

    def _each(self, lo: int, hi: int, match: Callable[[Batch], bool],
              act: Callable[[int], bool]) -> int:
        """For each in-flight batch overlapping lo..hi that `match`es: split off its part
        inside lo..hi and `act` on that batch's index (True: it removed the batch).
        Returns how many records were acted on."""
        fl = self._inflight
        held = fl.batches
        i = fl.index(lo)
        n = 0
        while i < len(held) and held[i].first <= hi:
            b = held[i]
            if match(b):
                i = fl.isolate(i, max(lo, b.first), min(hi, b.last))
                b = held[i]
                n += b.last - b.first + 1
                if act(i):
                    continue
            i += 1
        return n

    def _drop(self, i: int) -> int:
        """Batch `i` is done (no change noted here); its delivery count."""
        return self._inflight.remove(i).count

    def _release_at(self, i: int) -> bool:
        """Release batch `i` (acquired): AVAILABLE again, or ARCHIVED at the delivery
        limit (True: removed)."""
        b = self._inflight.batches[i]
        if b.count >= self.delivery_count_limit:
            self._inflight.remove(i)  # ARCHIVED: the delivery limit is reached
            self.stats.archived_limit += b.last - b.first + 1
            self._changes.append((b.first, b.last, 4, b.count))
            dead = self.dead
            if dead and dead[-1][1] + 1 == b.first and dead[-1][2:] == (b.count,
                                                                        DELIVERY_LIMIT):
                dead[-1] = (dead[-1][0], b.last, b.count, DELIVERY_LIMIT)
            else:
                dead.append((b.first, b.last, b.count, DELIVERY_LIMIT))
            return True
        b.state = RecordState.AVAILABLE
        b.member = ""
        if self.redelivery_delay_ms > 0:
            b.deadline = ready = self.clock.now_ms() + self.redelivery_delay_ms
            if self._next_ready is None or ready < self._next_ready:
                self._next_ready = ready
        else:
            b.deadline = 0
        return False


def _ANY(_b: Batch) -> bool:
    return True


def _extend(runs: list[list[int]], first: int, last: int, delivery_count: int) -> None:
    if runs:
        run = runs[-1]
        if run[1] + 1 == first and run[2] == delivery_count:
            run[1] = last
            return
    runs.append([first, last, delivery_count])
