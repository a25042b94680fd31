"""PartitionLog: the log of one partition, the facade the partition layer and the LogManager
use (Kafka's UnifiedLog). Its public API is the whole of the storage layer's log API.

It composes the log's parts, each in its own module with one job:
- `yak.storage.loader` (LogLoader): start-up, recovery after a crash, producer-state replay;
- `yak.storage.local_log` (LocalLog, which PartitionLog extends): the segments, the log end
  offset and the recovery point; write, roll, flush, read, truncate, retire, swap;
- `yak.storage.validator` (LogValidator): what may be written, checked before any byte is;
- `yak.storage.retention`: which old segments `retention.ms` / `retention.bytes` let go.
What stays here is what gives the bytes their meaning: the appends (offsets, leader epochs,
producer state and idempotence), transactions, the log start offset and the high watermark.

Transactions: client batches carry the transactional bit and open a transaction in the
producer state (per batch, from its header: no per-record work); `append_txn_marker` writes
the coordinator's COMMIT/ABORT control batch, ends it, and records an aborted one in the
`.txnindex` of the segment the marker lands in. The last stable offset is the first offset
of the oldest open transaction; `collect_aborted_txns` answers read_committed fetches.

Threading model: see `yak.storage.local_log` (one lock for writers, lock-free reads on an
immutable view of the segment list).
"""

from __future__ import annotations

import dataclasses
import os
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

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
from yak.storage.local_log import LocalLog, ReadResult, now_ms
from yak.storage.producer_state import ProducerStateManager
from yak.storage.retention import segments_to_delete
from yak.storage.segment import INT32_MAX, LogSegment
from yak.storage.txn_index import AbortedTxn
from yak.storage.validator import max_timestamp_header, records_max_timestamps, validate_batches

# Names other modules import from here (the facade), defined in the parts.
__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "PRODUCER_ID_EXPIRATION_MS",
    "AppendResult",
    "PartitionLog",
    "ReadResult",
    "RecoveryStats",
    "now_ms",
]

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default


@dataclass(slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int


class PartitionLog(LocalLog):
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
        super().__init__(directory, topic, partition, config, on_retire)
        self._compact = config.compact  # cleanup.policy has compact: keys are checked
        # Called with (log, new segment base) after a roll: the LogManager's flusher fsyncs
        # the rolled segment off the append path (None: `maintenance` does it later).
        self._on_roll = on_roll
        # Called after a truncation, outside the lock: the recovery point went down, and a
        # stale checkpoint above it would let recovery skip rewritten data (Kafka's
        # LogManager.truncateTo checkpoints at once too).
        self._on_truncate = on_truncate
        self.producer_state = ProducerStateManager(directory)
        self.leader_epoch_cache = LeaderEpochCache(
            os.path.join(directory, checkpoint.LEADER_EPOCH_FILE)
        )
        self.first_dirty_offset = -1  # cleaner checkpoint, set by the LogManager
        # Tiered storage (yak.tiered): the offset below which every record is in the remote
        # log, set by the remote log manager after each manifest commit. None: this log is
        # not tiered (or the manager has not read its manifest yet): ordinary retention.
        # Set: local retention (`local.retention.*`) and never a segment not wholly below it.
        self.tiered_upto: int | None = None
        self._load(recovery_point, log_start_offset, high_watermark, clean)

    # --- loading and recovery ---------------------------------------------------------------

    def _load(self, recovery_point: int, log_start: int, hw: int, clean: bool) -> None:
        """Adopt what the loader found on disk (see `yak.storage.loader`)."""
        loaded = load_log(self.directory, self.topic, self.partition, self._new_segment,
                          self.leader_epoch_cache, self.producer_state, recovery_point,
                          log_start, hw, clean, now_ms())
        self._adopt(loaded.segments, loaded.log_end_offset, loaded.recovery_point)
        self.recovery_stats: RecoveryStats = loaded.stats
        self.log_start_offset = loaded.log_start_offset
        self.high_watermark = loaded.high_watermark
        self._rebuild_producer_state(loaded.txn_rebuild_from)
        # After a crash the recovery point stays where the checkpoint had it, so each later
        # crash would scan and replay the same tail again, and more. The state replayed up
        # to the log end gets its snapshot (as Kafka's rebuildProducerState takes one), and
        # `recovered_upto` asks the LogManager's flusher for `flush_upto(log end)`, which
        # fsyncs the recovered segments and that snapshot, then moves the point there.
        self.recovered_upto: int | None = None
        if not clean and loaded.recovery_point < self.log_end_offset:
            self.producer_state.take_snapshot(self.log_end_offset)
            self._dir_dirty = True
            self.recovered_upto = self.log_end_offset

    def _rebuild_producer_state(self, txn_rebuild_from: int | None = None) -> None:
        view = self._view
        rebuild_producer_state(self.producer_state, view.segments, view.bases,
                               self.log_start_offset, self.log_end_offset, txn_rebuild_from,
                               self.topic, self.partition)

    def _follow_marker(self, batch: memoryview, h: BatchHeader) -> None:
        end_txn_from_batch(self.producer_state, batch, h, self._active, h.base_offset,
                           self.topic, self.partition)

    # --- LocalLog's hooks -------------------------------------------------------------------

    def _rolled(self, base: int) -> None:
        self.producer_state.take_snapshot(base)
        if self._on_roll is not None:
            self._on_roll(self, base)

    def _sync_state(self, snapshot: int | None) -> None:
        self.leader_epoch_cache.flush()
        if snapshot is not None:
            self.producer_state.flush_snapshot(snapshot)

    # --- properties -------------------------------------------------------------------------

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
        # MaxTimestamp as Kafka stores it: the records' maximum (records_max_timestamps).
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
            prev = self.log_end_offset
            if first < prev:
                raise InvalidRecordError(f"offset {first} is below the log end offset {prev}")
            meta = []
            for h in headers:
                base = h.base_offset
                if base < prev:
                    raise InvalidRecordError("batch offsets are not increasing")
                prev = base + h.last_offset_delta + 1
                meta.append((base, prev - 1, h.max_timestamp, h.batch_length + LOG_OVERHEAD))
            active = self._active
            if active.size == 0 and first != active.base_offset:
                # An empty active segment must be based where its first batch is.
                self._replace_empty_active(first)
                if len(self._view.segments) == 1:
                    self.log_start_offset = max(self.log_start_offset, first)
            elif meta[-1][1] - active.base_offset > INT32_MAX:
                self._roll(first, now)
            try:
                self._write([mv], len(mv), meta, now, base_override=first)
                # Per batch, so kept to plain reads: producer state only for batches with
                # a producer (`update` ignores the others), and the epoch cache only when
                # a batch starts a newer epoch than its latest (`assign` ignores the rest,
                # under its lock).
                update = self.producer_state.update
                cache = self.leader_epoch_cache
                pos = 0
                for h in headers:
                    size = h.batch_length + LOG_OVERHEAD
                    if h.producer_id >= 0:
                        attrs = h.attributes
                        update(h, h.base_offset,
                               h.max_timestamp if attrs & TIMESTAMP_TYPE_BIT else -1)
                        if attrs & CONTROL_BIT:
                            # A replicated marker: end the transaction here as the leader did.
                            self._follow_marker(mv[pos : pos + size], h)
                    ple = h.partition_leader_epoch
                    if ple > cache.latest:
                        cache.assign(ple, h.base_offset)
                    pos += size
            except OSError as e:
                raise KafkaStorageError(f"append to {self.topic}-{self.partition}: {e}") from e
            self.unflushed_messages += prev - first
            flush_due = self.unflushed_messages >= self.config.flush_messages
        if flush_due:
            self.flush()
        return AppendResult(first, meta[-1][1], -1, self.log_start_offset)

    # --- read -------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_message: bool = True,
        regions: bool = False,
    ) -> ReadResult:
        """Whole batches from the one holding `offset`, below `max_offset` (the broker passes
        the high watermark), at most `max_bytes` unless `min_one_message` and the first batch
        alone is larger. `regions`: the buffers are `FileRegion`s left in the segment file,
        for a connection that sends them with `sendfile` (yak/storage/file_region.py)."""
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
        got = self._read_batches(offset, max_bytes, limit, min_one_message, regions)
        if got is not None:
            result.buffers, result.size, result.first_offset, result.next_offset = got
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
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_offset()
        return self._offset_for_timestamp(timestamp, self.log_start_offset)

    # --- shrinking --------------------------------------------------------------------------

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
        new_end = self._truncate_segments_to(offset)
        self.log_start_offset = min(self.log_start_offset, new_end)
        self.high_watermark = min(self.high_watermark, new_end)
        self.leader_epoch_cache.truncate_from_end(new_end)
        self._rebuild_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at `offset` (a follower far behind the leader)."""
        with self.lock:
            self._truncate_fully_locked(offset)
        if self._on_truncate is not None:
            self._on_truncate(self)

    def _truncate_fully_locked(self, offset: int) -> None:
        self._reset_segments_at(offset)
        self.log_start_offset = offset
        self.high_watermark = offset
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
        self._remove_segments_below(self.log_start_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.producer_state.delete_snapshots_before(self.log_start_offset)

    def apply_retention(self, now: int | None = None) -> int:
        """Delete whole segments past `retention.ms` / over `retention.bytes` (only those
        entirely below the high watermark; see `yak.storage.retention`). A tiered log
        (`remote.storage.enable` and `tiered_upto` known) uses `local.retention.*` and keeps
        every segment not wholly below `tiered_upto` (docs/tiered.md). Returns how many
        went."""
        cfg = self.config
        if not cfg.delete:
            return 0
        now = now_ms() if now is None else now
        bound = self.high_watermark
        tiered_upto = self.tiered_upto
        if cfg.remote_storage_enable and tiered_upto is not None:
            # A tiered log: only what the remote log holds may go, by local retention.
            ms, size = cfg.local_retention
            cfg = dataclasses.replace(cfg, retention_ms=ms, retention_bytes=size)
            bound = min(bound, tiered_upto)
        with self.lock:
            segs = self._view.segments
            n_drop = segments_to_delete(segs, self.log_end_offset, bound, cfg, now)
            if n_drop == len(segs) and bound < self.log_end_offset:
                n_drop -= 1  # the active segment is not uploaded: keep it, never roll it
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

    def expire_producers(self, now: int, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> int:
        with self.lock:
            return self.producer_state.remove_expired(now, expiration_ms)

    def close(self) -> None:
        """Clean close: indexes written, producer snapshot at the log end offset."""
        with self._flush_lock, self.lock:
            self.flush()
            active = self._active
            active.on_become_inactive()
            self.producer_state.take_snapshot(self.log_end_offset)
            self._close_segments()
