"""PartitionLog: the segmented, append-only log of one partition.

Transactions: client batches carry the transactional bit and open a transaction in the
producer state (per batch, from its header: no per-record work); `append_txn_marker` writes
the coordinator's COMMIT/ABORT control batch, ends it, and records an aborted one in the
`.txnindex` of the segment the marker lands in. The last stable offset is the first offset
of the oldest open transaction; `collect_aborted_txns` answers read_committed fetches.

Threading model: appends, truncation, retention and the cleaner's segment swap take
`self.lock`; reads (on the broker's event loop) take no lock at all. They work on an immutable
snapshot of the segment list (`self._view`, replaced, never mutated), and a segment removed from
the view keeps its file open until `file.delete.delay.ms` has passed (see `_retire`), so a read
that started on it finishes correctly.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

from yak.errors import (
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
)
from yak.protocol.control_records import build_marker_batch
from yak.protocol.records import (
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    OFFSET_PREFIX,
    OFFSET_PREFIX_SIZE,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    decode_records,
    log_append_time_header,
    parse_header,
)
from yak.storage import checkpoint
from yak.storage.config import LogConfig
from yak.storage.epoch_cache import LeaderEpochCache
from yak.storage.loader import (
    RecoveryStats,
    end_txn_from_batch,
    load_log,
    rebuild_producer_state,
)
from yak.storage.producer_state import ProducerStateManager
from yak.storage.retention import segments_to_delete
from yak.storage.segment import INT32_MAX, LogSegment
from yak.storage.txn_index import AbortedTxn
from yak.storage.validator import max_timestamp_header, records_max_timestamps, validate_batches

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default
_IOV_MAX = 1000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int


@dataclass(slots=True)
class ReadResult:
    """Whole batches, ready for `transport.writelines(result.buffers)`."""

    buffers: list = field(default_factory=list)
    size: int = 0
    first_offset: int = -1
    next_offset: int = -1  # the offset after the last batch returned
    log_start_offset: int = 0
    log_end_offset: int = 0
    high_watermark: int = 0

    def to_bytes(self) -> bytes:
        return b"".join(bytes(b) for b in self.buffers)


@dataclass(slots=True)
class _View:
    segments: tuple[LogSegment, ...]
    bases: tuple[int, ...]


class PartitionLog:
    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        clean: bool = False,
        on_retire: Callable[[LogSegment], None] | None = None,
        on_roll: Callable[[PartitionLog, int], None] | None = None,
        on_truncate: Callable[[PartitionLog], None] | None = None,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self._compact = config.compact  # cleanup.policy has compact: keys are checked
        self.lock = threading.RLock()
        # Held for the whole of a flush (fsyncs included), so flushes never overlap and the
        # recovery point never passes data another flush is still syncing. Lock order: the
        # flush lock before `lock`; nothing waits for it while holding `lock`.
        self._flush_lock = threading.RLock()
        # Bumped by every truncation: a flush that raced with one must not advance the
        # recovery point (the segments it synced may be gone, new ones not synced).
        self._generation = 0
        self._dir_dirty = False  # a segment file was created since the last directory fsync
        self._on_retire = on_retire
        # Called with (log, new segment base) after a roll: the LogManager's flusher fsyncs
        # the rolled segment off the append path (None: `maintenance` does it later).
        self._on_roll = on_roll
        # Called after a truncation, outside the lock: the recovery point went down, and a
        # stale checkpoint above it would let recovery skip rewritten data (Kafka's
        # LogManager.truncateTo checkpoints at once too).
        self._on_truncate = on_truncate
        self._retired: list[tuple[float, LogSegment]] = []
        self.producer_state = ProducerStateManager(directory)
        self.leader_epoch_cache = LeaderEpochCache(
            os.path.join(directory, checkpoint.LEADER_EPOCH_FILE)
        )
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms()
        self.first_dirty_offset = -1  # cleaner checkpoint, set by the LogManager
        self.deleted = False
        os.makedirs(directory, exist_ok=True)
        self._load(recovery_point, log_start_offset, high_watermark, clean)

    # --- loading and recovery ---------------------------------------------------------------

    def _new_segment(self, base: int, suffix: str = "") -> LogSegment:
        return LogSegment(
            self.directory,
            base,
            self.config.segment_index_bytes,
            self.config.index_interval_bytes,
            suffix,
            now_ms(),
        )

    def _load(self, recovery_point: int, log_start: int, hw: int, clean: bool) -> None:
        """Adopt what the loader found on disk (see `yak.storage.loader`)."""
        loaded = load_log(self.directory, self.topic, self.partition, self._new_segment,
                          self.leader_epoch_cache, self.producer_state, recovery_point,
                          log_start, hw, clean, now_ms())
        segs = loaded.segments
        self._view = _View(tuple(segs), tuple(s.base_offset for s in segs))
        self.recovery_stats: RecoveryStats = loaded.stats
        self.log_end_offset = loaded.log_end_offset
        self.recovery_point = loaded.recovery_point
        self.log_start_offset = loaded.log_start_offset
        self.high_watermark = loaded.high_watermark
        self._durable_end = self.recovery_point
        self._rebuild_producer_state(loaded.txn_rebuild_from)

    def _rebuild_producer_state(self, txn_rebuild_from: int | None = None) -> None:
        view = self._view
        rebuild_producer_state(self.producer_state, view.segments, view.bases,
                               self.log_start_offset, self.log_end_offset, txn_rebuild_from,
                               self.topic, self.partition)

    def _follow_marker(self, batch: memoryview, h: BatchHeader) -> None:
        end_txn_from_batch(self.producer_state, batch, h, self._active, h.base_offset,
                           self.topic, self.partition)

    # --- properties -------------------------------------------------------------------------

    @property
    def _active(self) -> LogSegment:
        return self._view.segments[-1]

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._view.segments

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._view.segments)

    def update_high_watermark(self, offset: int | None = None) -> int:
        """Set the high watermark (None: the log end offset, as a lone leader does), clamped
        to [log start, log end]."""
        target = self.log_end_offset if offset is None else offset
        self.high_watermark = min(max(target, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    @property
    def last_stable_offset(self) -> int:
        first = self.producer_state.first_unstable_offset()
        return self.high_watermark if first is None else min(first, self.high_watermark)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound), from the
        `.txnindex` of the segment holding `fetch_offset` on, until an entry shows that no
        later one can overlap (Kafka's `collectAbortedTransactions`). Lock-free, like reads."""
        view = self._view
        i = max(bisect_right(view.bases, fetch_offset) - 1, 0)
        out: list[AbortedTxn] = []
        for seg in view.segments[i:]:
            if seg.txn_index.collect(fetch_offset, upper_bound, out):
                break
        return out

    def aborted_txns(self) -> list[AbortedTxn]:
        """Every entry of every `.txnindex`, oldest marker first (the cleaner's input)."""
        return [e for seg in self._view.segments for e in seg.txn_index.entries]

    def update_config(self, config: LogConfig) -> None:
        with self.lock:
            self.config = config
            self._compact = config.compact
            for seg in self._view.segments:
                seg.index_interval_bytes = config.index_interval_bytes

    # --- append -----------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        *,
        now: int | None = None,
        header: BatchHeader | None = None,
    ) -> AppendResult:
        """Validate, assign offsets, write. All batches or none; never re-encodes records.

        `header`: the first batch's header if the caller parsed it (see `validate_batches`).
        """
        mv = records if type(records) is memoryview else memoryview(records)
        if now is None:
            now = now_ms()
        headers = validate_batches(mv, self.config, self._compact, True, now, header, self.topic,
                                   self.partition)
        log_append = self.config.log_append_time
        # MaxTimestamp as Kafka stores it: the records' maximum (see validator.records_max_timestamps).
        fixed_max = None if log_append else records_max_timestamps(mv, headers)
        if fixed_max is not None:
            headers = [h if ts is None else h._replace(max_timestamp=ts)
                       for h, ts in zip(headers, fixed_max, strict=True)]
        with self.lock:
            ps = self.producer_state
            staged: dict[int, tuple[int, int]] | None = None
            for h in headers:
                if h.producer_id >= 0:
                    if staged is None:
                        staged = {}
                    seq = h.base_sequence
                    last_seq = (seq + h.last_offset_delta) % (INT32_MAX + 1)
                    ps.check(h.producer_id, h.producer_epoch, seq, last_seq, staged)
            base = self.log_end_offset
            iov: list = []
            meta: list[tuple[int, int, int, int]] = []
            off = base
            pos = 0
            for i, h in enumerate(headers):
                size = h.batch_length + LOG_OVERHEAD
                end = pos + size
                last = off + h.last_offset_delta
                if log_append:
                    iov.append(log_append_time_header(mv, pos, h, off, leader_epoch, now))
                    iov.append(mv[pos + HEADER_SIZE : end])
                    meta.append((off, last, now, size))
                elif fixed_max is not None and fixed_max[i] is not None:
                    iov.append(max_timestamp_header(mv, pos, h, off, leader_epoch,
                                                    h.max_timestamp))
                    iov.append(mv[pos + HEADER_SIZE : end])
                    meta.append((off, last, h.max_timestamp, size))
                else:
                    # Offsets are assigned by a new 16-byte prefix (outside the CRC) in front
                    # of the untouched rest of the batch.
                    iov.append(OFFSET_PREFIX.pack(off, h.batch_length, leader_epoch))
                    iov.append(mv[pos + OFFSET_PREFIX_SIZE : end])
                    meta.append((off, last, h.max_timestamp, size))
                off = last + 1
                pos = end
            try:
                self._write(iov, pos, meta, now)
                if staged is not None:
                    ts = now if log_append else -1
                    for h, m in zip(headers, meta, strict=True):
                        ps.update(h, m[0], ts)
                if leader_epoch > self.leader_epoch_cache.latest:
                    self.leader_epoch_cache.assign(leader_epoch, base)
            except OSError as e:  # roll, snapshot or checkpoint I/O (the write itself cleans up)
                raise KafkaStorageError(f"append to {self.topic}-{self.partition}: {e}") from e
            self.unflushed_messages += off - base
            flush_due = self.unflushed_messages >= self.config.flush_messages
        if flush_due:
            self.flush()  # flush.messages: outside the log lock (flush takes the flush lock)
        return AppendResult(base, off - 1, now if log_append else -1, self.log_start_offset)

    def append_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        leader_epoch: int,
        *,
        now: int | None = None,
    ) -> AppendResult:
        """Write a COMMIT/ABORT control batch for the transaction coordinator (never for a
        client: Produce refuses control batches). It ends the producer's open transaction
        here; an ABORT becomes a `.txnindex` entry of the segment it lands in. A marker
        from an older producer epoch is INVALID_PRODUCER_EPOCH, one from an older
        coordinator epoch TRANSACTION_COORDINATOR_FENCED; nothing is written then."""
        if now is None:
            now = now_ms()
        batch = build_marker_batch(producer_id, producer_epoch, coordinator_epoch, commit,
                                   timestamp=now)
        h = parse_header(batch)
        mv = memoryview(batch)
        size = len(batch)
        with self.lock:
            ps = self.producer_state
            ps.check_marker(producer_id, producer_epoch, coordinator_epoch)
            base = self.log_end_offset
            iov = [OFFSET_PREFIX.pack(base, h.batch_length, leader_epoch),
                   mv[OFFSET_PREFIX_SIZE:]]
            try:
                self._write(iov, size, [(base, base, now, size)], now)
                ps.update(h, base, -1)
                done = ps.end_txn(producer_id, producer_epoch, coordinator_epoch, base)
                if done is not None and not commit:
                    self._active.txn_index.append(
                        AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                                   done.last_stable_offset)
                    )
                if leader_epoch > self.leader_epoch_cache.latest:
                    self.leader_epoch_cache.assign(leader_epoch, base)
            except OSError as e:
                raise KafkaStorageError(f"append to {self.topic}-{self.partition}: {e}") from e
            self.unflushed_messages += 1
            flush_due = self.unflushed_messages >= self.config.flush_messages
        if flush_due:
            self.flush()
        return AppendResult(base, base, -1, self.log_start_offset)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendResult:
        """Append batches that already carry offsets and epochs (replication, txn markers)."""
        mv = memoryview(records)
        now = now_ms()
        headers = validate_batches(mv, self.config, self._compact, False, now, None, self.topic,
                                   self.partition)
        with self.lock:
            first = headers[0].base_offset
            if first < self.log_end_offset:
                raise InvalidRecordError(
                    f"offset {first} is below the log end offset {self.log_end_offset}"
                )
            prev = self.log_end_offset
            meta = []
            for h in headers:
                if h.base_offset < prev:
                    raise InvalidRecordError("batch offsets are not increasing")
                last = h.base_offset + h.last_offset_delta
                prev = last + 1
                meta.append((h.base_offset, last, h.max_timestamp, h.batch_length + LOG_OVERHEAD))
            active = self._active
            if active.size == 0 and first != active.base_offset:
                # An empty active segment must be based where its first batch is.
                self._replace_empty_active(first)
            elif meta[-1][1] - self._active.base_offset > INT32_MAX:
                self._roll(first, now)
            try:
                self._write([mv], len(mv), meta, now, base_override=first)
                pos = 0
                for h in headers:
                    ts = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_BIT else -1
                    self.producer_state.update(h, h.base_offset, ts)
                    if h.attributes & CONTROL_BIT and h.producer_id >= 0:
                        # A replicated marker: end the transaction here as the leader did.
                        self._follow_marker(mv[pos : pos + h.batch_length + LOG_OVERHEAD], h)
                    self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
                    pos += h.batch_length + LOG_OVERHEAD
            except OSError as e:
                raise KafkaStorageError(f"append to {self.topic}-{self.partition}: {e}") from e
            self.unflushed_messages += prev - first
            flush_due = self.unflushed_messages >= self.config.flush_messages
        if flush_due:
            self.flush()
        return AppendResult(first, meta[-1][1], -1, self.log_start_offset)

    def _replace_empty_active(self, base: int) -> None:
        self._generation += 1
        self._dir_dirty = True
        old = self._active
        new = self._new_segment(base)
        segs = self._view.segments[:-1] + (new,)
        self._view = _View(segs, tuple(s.base_offset for s in segs))
        self._retire([old])
        self.log_end_offset = base
        if len(segs) == 1:
            self.log_start_offset = max(self.log_start_offset, base)

    def _write(
        self,
        iov: list,
        total: int,
        meta: list[tuple[int, int, int, int]],
        now: int,
        base_override: int | None = None,
    ) -> None:
        active = self._active
        cfg = self.config
        if active.size > 0 and (
            active.size + total > cfg.segment_bytes
            or (active.first_append_ms >= 0 and now - active.first_append_ms > cfg.segment_ms)
            or active.indexes_full
            or meta[-1][1] - active.base_offset > INT32_MAX
        ):
            active = self._roll(meta[0][0] if base_override is None else base_override, now)
        if len(iov) > _IOV_MAX:
            iov = [b"".join(bytes(b) for b in iov)]
        active.append(iov, total, meta)
        if active.first_append_ms < 0:
            active.first_append_ms = now
        self.log_end_offset = meta[-1][1] + 1

    def _roll(self, base: int, now: int) -> LogSegment:
        """Start a new active segment at `base`. The old one's indexes get their final
        entry and reach their files; its fsync, the snapshot's and the recovery point's
        advance happen off the append path (`on_roll` -> `flush_upto`, Kafka's Log.roll
        scheduling flushUptoOffsetExclusive)."""
        with self.lock:
            old = self._active
            if old.size == 0:
                return old
            old.on_become_inactive()
            new = self._new_segment(base)
            new.first_append_ms = -1
            segs = self._view.segments + (new,)
            self._view = _View(segs, tuple(s.base_offset for s in segs))
            self._dir_dirty = True
            self.producer_state.take_snapshot(base)
            if self._on_roll is not None:
                self._on_roll(self, base)
            return new

    def roll(self, now: int | None = None) -> None:
        with self.lock:
            self._roll(self.log_end_offset, now_ms() if now is None else now)

    # --- durability -------------------------------------------------------------------------

    def flush(self) -> int:
        """fsync everything appended so far; advances the recovery point. Returns it."""
        with self._flush_lock:
            with self.lock:
                target = self.log_end_offset
                generation = self._generation
                active = self._active
                dirty = [s for s in self._view.segments if s.unflushed]
                for seg in dirty:
                    seg.unflushed = False
                    # Index entries reach the files under the lock (appends extend them).
                    # The active segment's indexes are not fsynced: recovery always rescans
                    # the segment holding the recovery point, so they are rebuilt after a
                    # crash.
                    seg.flush_indexes(sync=False)
                self.unflushed_messages = 0
                self.last_flush_ms = now_ms()
                sync_dir, self._dir_dirty = self._dir_dirty, False
            self._sync_segments(dirty, active, sync_dir)
            with self.lock:
                if generation == self._generation:
                    target = min(target, self.log_end_offset)
                    if target > self.recovery_point:
                        self.recovery_point = target
                    if target > self._durable_end:
                        self._durable_end = target
            return self.recovery_point

    def flush_upto(self, offset: int) -> int:
        """fsync every segment wholly below `offset` with its indexes, the producer snapshot
        taken at `offset` and the epoch checkpoint, then advance the recovery point to
        `offset` (Kafka's flushUptoOffsetExclusive, scheduled by a roll with the new
        segment's base offset). The active segment is not synced. Returns the recovery
        point. Thread-safe; runs on the LogManager's flusher thread."""
        with self._flush_lock:
            with self.lock:
                if self.deleted or offset <= self.recovery_point:
                    return self.recovery_point
                generation = self._generation
                segs = self._view.segments
                dirty = []
                bound = self.recovery_point
                for i in range(len(segs) - 1):
                    if segs[i + 1].base_offset > offset:
                        break
                    if segs[i].unflushed:
                        segs[i].unflushed = False
                        segs[i].flush_indexes(sync=False)
                        dirty.append(segs[i])
                    bound = segs[i + 1].base_offset
                sync_dir, self._dir_dirty = self._dir_dirty, False
            self._sync_segments(dirty, None, sync_dir, snapshot=bound)
            with self.lock:
                if generation == self._generation:
                    bound = min(bound, self.log_end_offset)
                    if bound > self.recovery_point:
                        self.recovery_point = bound
                    if bound > self._durable_end:
                        self._durable_end = bound
            return self.recovery_point

    def _sync_segments(
        self,
        dirty: list[LogSegment],
        active: LogSegment | None,
        sync_dir: bool,
        snapshot: int | None = None,
    ) -> None:
        """The fsyncs of a flush, outside the log lock (appends go on meanwhile). On failure
        the segments not synced are marked dirty again and KafkaStorageError is raised."""
        done = 0
        try:
            for seg in dirty:
                if not seg.closed:
                    seg.flush(sync_indexes=seg is not active)
                done += 1
            self.leader_epoch_cache.flush()
            if snapshot is not None:
                self.producer_state.flush_snapshot(snapshot)
            if sync_dir:
                checkpoint.fsync_dir(self.directory)
        except OSError as e:
            self._mark_dirty(dirty[done:], sync_dir)
            raise KafkaStorageError(f"flush of {self.topic}-{self.partition}: {e}") from e
        except KafkaStorageError:
            self._mark_dirty(dirty[done:], sync_dir)
            raise

    def _mark_dirty(self, segs: list[LogSegment], dir_dirty: bool) -> None:
        with self.lock:
            for seg in segs:
                seg.unflushed = True
            self._dir_dirty = self._dir_dirty or dir_dirty

    def sync(self, offset: int) -> None:
        """Block until every record below `offset` is on disk (pass `last_offset + 1`).

        Group commit: callers queue on the flush lock; whoever holds it fsyncs everything
        appended so far, so the others usually find their offset already durable and return
        at once. Thread-safe: the broker calls it from a thread pool for
        `write.caching=false`.
        """
        if self._durable_end >= offset:
            return
        with self._flush_lock:
            if self._durable_end >= offset:
                return
            self.flush()

    # --- read -------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> ReadResult:
        """Whole batches from the one holding `offset`, below `max_offset` (the broker passes
        the high watermark), at most `max_bytes` unless `min_one_message` and the first batch
        alone is larger."""
        start = self.log_start_offset
        end = self.log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} outside [{start}, {end}] of {self.topic}-{self.partition}"
            )
        result = ReadResult(
            log_start_offset=start, log_end_offset=end, high_watermark=self.high_watermark
        )
        limit = end if max_offset is None else min(max_offset, end)
        if offset >= limit:
            return result
        view = self._view
        i = max(bisect_right(view.bases, offset) - 1, 0)
        while i < len(view.segments):
            got = view.segments[i].read(offset, max_bytes, limit, min_one_message)
            if got is not None:
                result.buffers, result.size, result.first_offset, result.next_offset = got
                return result
            i += 1
        return result

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp` (ListOffsets).

        -2 (earliest) and -1 (latest) give the log start / end offset; -3 the record with the
        largest timestamp. None if no record is that recent.
        """
        if timestamp == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        view = self._view
        if timestamp == MAX_TIMESTAMP:
            best: tuple[int, int] | None = None
            for seg in view.segments:
                seg.ensure_indexes()
                if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best[1]):
                    best = (seg.offset_of_max_timestamp, seg.max_timestamp)
            return best
        start = self.log_start_offset
        for seg in view.segments:
            seg.ensure_indexes()
            if seg.max_timestamp < timestamp:
                continue
            from_off = max(seg.time_index.lookup_before(timestamp), start)
            found = seg.find_position(from_off)
            if found is None:
                continue
            for pos, h in seg.iter_headers(found[0]):
                if h.max_timestamp < timestamp or h.base_offset + h.last_offset_delta < start:
                    continue
                batch = seg.read_batch(pos, h.batch_length + LOG_OVERHEAD)
                for rec in decode_records(batch):
                    if rec.offset is not None and rec.offset >= start:
                        ts = rec.timestamp if rec.timestamp is not None else -1
                        if ts >= timestamp:
                            return rec.offset, ts
        return None

    # --- shrinking --------------------------------------------------------------------------

    def _retire(self, segs: list[LogSegment]) -> None:
        """Remove segments from service: rename to `.deleted`, close/unlink after the delay."""
        due = time.monotonic() + self.config.file_delete_delay_ms / 1000
        for seg in segs:
            with contextlib.suppress(OSError):
                seg.rename_suffix(".deleted")
            self._retired.append((due, seg))

    def delete_retired(self, force: bool = False) -> None:
        """Close and unlink retired segments whose delay has passed (event-loop thread)."""
        if not self._retired:
            return
        now = time.monotonic()
        with self.lock:
            keep = []
            for due, seg in self._retired:
                if force or due <= now:
                    seg.delete_files()
                else:
                    keep.append((due, seg))
            self._retired = keep

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or after `offset` (a follower diverged from its leader)."""
        with self.lock:
            if offset >= self.log_end_offset:
                return
            if offset <= self._view.bases[0] or offset < self.log_start_offset:
                self._truncate_fully_locked(offset)
            else:
                self._truncate_to_locked(offset)
        if self._on_truncate is not None:
            self._on_truncate(self)

    def _truncate_to_locked(self, offset: int) -> None:
        self._generation += 1
        segs = list(self._view.segments)
        i = bisect_right(self._view.bases, offset) - 1
        drop = segs[i + 1 :]
        keep = segs[: i + 1]
        self._view = _View(tuple(keep), tuple(s.base_offset for s in keep))
        self._retire(drop)
        new_end = keep[-1].truncate_to(offset)
        self.log_end_offset = new_end
        self.log_start_offset = min(self.log_start_offset, new_end)
        self.high_watermark = min(self.high_watermark, new_end)
        self.recovery_point = min(self.recovery_point, new_end)
        self._durable_end = min(self._durable_end, new_end)
        self.leader_epoch_cache.truncate_from_end(new_end)
        self._rebuild_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at `offset` (a follower far behind the leader)."""
        with self.lock:
            self._truncate_fully_locked(offset)
        if self._on_truncate is not None:
            self._on_truncate(self)

    def _truncate_fully_locked(self, offset: int) -> None:
        # Retire (rename to .deleted) first: a segment with the same base offset must not
        # share its files with the new one.
        self._generation += 1
        self._dir_dirty = True
        self._retire(list(self._view.segments))
        new = self._new_segment(offset)
        new.rebuild_indexes()
        new.next_offset = offset
        self._view = _View((new,), (offset,))
        self.log_end_offset = offset
        self.log_start_offset = offset
        self.high_watermark = offset
        self.recovery_point = offset
        self._durable_end = offset
        self.leader_epoch_cache.clear()
        self.producer_state.clear()
        self.producer_state.delete_snapshots_after(-1)

    def delete_records(self, offset: int) -> int:
        """Advance the log start offset (DeleteRecords); whole segments below it go."""
        with self.lock:
            if offset > self.high_watermark or offset < 0:
                raise OffsetOutOfRangeError(
                    f"cannot delete records up to {offset}: high watermark {self.high_watermark}"
                )
            if offset > self.log_start_offset:
                self.log_start_offset = offset
                self._drop_segments_below_start()
            return self.log_start_offset

    def _drop_segments_below_start(self) -> None:
        segs = list(self._view.segments)
        drop = []
        while len(segs) > 1 and segs[1].base_offset <= self.log_start_offset:
            drop.append(segs.pop(0))
        if drop:
            self._view = _View(tuple(segs), tuple(s.base_offset for s in segs))
            self._retire(drop)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.producer_state.delete_snapshots_before(self.log_start_offset)

    def apply_retention(self, now: int | None = None) -> int:
        """Delete whole segments past `retention.ms` / over `retention.bytes` (only those
        entirely below the high watermark; see `yak.storage.retention`). Returns how many
        went."""
        cfg = self.config
        if not cfg.delete:
            return 0
        now = now_ms() if now is None else now
        with self.lock:
            segs = self._view.segments
            n_drop = segments_to_delete(segs, self.log_end_offset, self.high_watermark, cfg, now)
            if n_drop == len(segs):
                # The active segment expired: rolled, so it can go too (Kafka 2.x+).
                self._roll(self.log_end_offset, now)
                segs = self._view.segments
            n_drop = min(n_drop, len(segs) - 1)
            if not n_drop:
                return 0
            self.log_start_offset = max(self.log_start_offset, segs[n_drop].base_offset)
            self._drop_segments_below_start()
            return n_drop

    # --- maintenance hooks ------------------------------------------------------------------

    def maybe_roll_by_time(self, now: int) -> None:
        active = self._active
        if (
            active.size > 0
            and active.first_append_ms >= 0
            and now - active.first_append_ms > self.config.segment_ms
        ):
            with self.lock:
                self._roll(self.log_end_offset, now)

    def expire_producers(self, now: int, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> int:
        with self.lock:
            return self.producer_state.remove_expired(now, expiration_ms)

    def flush_if_due(self, now: int) -> None:
        """`flush.ms`; and inactive segments not yet fsynced (the roll's own flush failed or
        had no flusher, or recovery rebuilt them): synced up to the active segment."""
        if self.unflushed_messages and now - self.last_flush_ms >= self.config.flush_ms:
            self.flush()
            return
        segs = self._view.segments
        if any(s.unflushed for s in segs[:-1]):
            self.flush_upto(segs[-1].base_offset)

    def close(self) -> None:
        """Clean close: indexes written, producer snapshot at the log end offset."""
        with self._flush_lock, self.lock:
            self.flush()
            active = self._active
            active.on_become_inactive()
            self.producer_state.take_snapshot(self.log_end_offset)
            for seg in self._view.segments:
                seg.close()
            self.delete_retired(force=True)

    def close_without_flush(self) -> None:
        """Simulate a crash (tests): file descriptors closed, nothing flushed or snapshotted."""
        with self.lock:
            for seg in self._view.segments:
                if not seg.closed:
                    seg.closed = True
                    os.close(seg.fd)
            for _due, seg in self._retired:
                if not seg.closed:
                    seg.closed = True
                    os.close(seg.fd)
            self._retired = []

    def delete_all_files(self) -> None:
        with self.lock:
            for seg in self._view.segments:
                seg.delete_files()
            self.delete_retired(force=True)

    def replace_segments(self, old: list[LogSegment], new: list[LogSegment]) -> bool:
        """Atomically swap cleaned segments in for `old` (cleaner). False if the log changed
        under the cleaner (retention, truncation) and the result must be thrown away."""
        with self.lock:
            if self.deleted:
                return False
            segs = list(self._view.segments)
            try:
                i = segs.index(old[0])
            except ValueError:
                return False
            if segs[i : i + len(old)] != old or i + len(old) >= len(segs):
                return False
            for seg in new:  # `.cleaned` -> `.swap`: from here on recovery completes the swap
                seg.flush()
                seg.rename_suffix(".swap")
            checkpoint.fsync_dir(self.directory)
            self._retire(old)
            for seg in new:
                seg.rename_suffix("")
            checkpoint.fsync_dir(self.directory)
            segs[i : i + len(old)] = new
            self._view = _View(tuple(segs), tuple(s.base_offset for s in segs))
            return True
