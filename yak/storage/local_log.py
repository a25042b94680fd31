"""The segments of one partition on local disk (Kafka's LocalLog): one job, keep the list of
segments and the offsets that only they decide, the log end offset and the recovery point,
and do the file work on them: write, roll, flush, read, truncate, retire, swap.

Separate from `PartitionLog` because none of this knows what a batch means: producers,
transactions, leader epochs, the high watermark and the log start offset are the
PartitionLog's. Two hooks let it add its part: `_rolled(base)` after a roll (the producer
snapshot, the flusher's notice) and `_sync_state(snapshot)` inside a flush's fsyncs (the epoch
checkpoint, the producer snapshot). PartitionLog extends this class rather than holding one:
the append and fetch paths read `log_end_offset`, `_view` and `lock` as plain attributes of
one object, as before the split, so the split costs them no call and no lookup.

Threading model: appends, truncation, retention and the cleaner's segment swap take
`self.lock`; reads (on the broker's event loop) take no lock at all. They work on an immutable
snapshot of the segment list (`self._view`, replaced, never mutated), and a segment removed from
the view keeps its file open until `file.delete.delay.ms` has passed (see `_retire`), so a read
that started on it finishes correctly.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

from yak.errors import KafkaStorageError
from yak.protocol.records import LOG_OVERHEAD, decode_records
from yak.storage import checkpoint
from yak.storage.config import LogConfig
from yak.storage.segment import INT32_MAX, LogSegment

_IOV_MAX = 1000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


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


class LocalLog:
    """Segments, log end offset, recovery point. `_adopt` installs the segments a
    `yak.storage.loader.load_log` found; until then the log has none."""

    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        on_retire: Callable[[LogSegment], None] | None = None,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
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
        self._retired: list[tuple[float, LogSegment]] = []
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms()
        self.deleted = False
        os.makedirs(directory, exist_ok=True)

    def _adopt(self, segments: list[LogSegment], log_end: int, recovery_point: int) -> None:
        self._view = _View(tuple(segments), tuple(s.base_offset for s in segments))
        self.log_end_offset = log_end
        self.recovery_point = recovery_point
        self._durable_end = recovery_point

    def _new_segment(self, base: int, suffix: str = "") -> LogSegment:
        return LogSegment(
            self.directory,
            base,
            self.config.segment_index_bytes,
            self.config.index_interval_bytes,
            suffix,
            now_ms(),
        )

    # --- hooks (PartitionLog adds its state here) --------------------------------------------

    def _rolled(self, base: int) -> None:
        """Called under the lock after a roll to a new segment at `base`."""

    def _sync_state(self, snapshot: int | None) -> None:
        """Called by a flush, outside the lock, after its segments' fsyncs; an OSError
        fails the flush like theirs."""

    # --- segments ---------------------------------------------------------------------------

    @property
    def _active(self) -> LogSegment:
        return self._view.segments[-1]

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._view.segments

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._view.segments)

    # --- write and roll ---------------------------------------------------------------------

    def _replace_empty_active(self, base: int) -> None:
        self._generation += 1
        self._dir_dirty = True
        old = self._active
        new = self._new_segment(base)
        segs = self._view.segments[:-1] + (new,)
        self._view = _View(segs, tuple(s.base_offset for s in segs))
        self._retire([old])
        self.log_end_offset = base

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
            self._rolled(base)
            return new

    def roll(self, now: int | None = None) -> None:
        with self.lock:
            self._roll(self.log_end_offset, now_ms() if now is None else now)

    def maybe_roll_by_time(self, now: int) -> None:
        active = self._active
        if (
            active.size > 0
            and active.first_append_ms >= 0
            and now - active.first_append_ms > self.config.segment_ms
        ):
            with self.lock:
                self._roll(self.log_end_offset, now)

    # --- durability -------------------------------------------------------------------------

    def flush(self) -> int:
        """fsync everything appended so far; advances the recovery point. Returns it."""
        with self._flush_lock:
            with self.lock:
                target = self.log_end_offset
                generation = self._generation
                dirty = [s for s in self._view.segments if s.unflushed]
                for seg in dirty:
                    seg.unflushed = False
                    # Index entries reach the files under the lock (appends extend them);
                    # the fsyncs below cover the active segment's indexes too: recovery
                    # trusts the index entries below the recovery point and starts its
                    # scan at the last of them (`LogSegment.recover`).
                    seg.flush_indexes(sync=False)
                self.unflushed_messages = 0
                self.last_flush_ms = now_ms()
                sync_dir, self._dir_dirty = self._dir_dirty, False
            self._sync_segments(dirty, sync_dir)
            with self.lock:
                if generation == self._generation:
                    target = min(target, self.log_end_offset)
                    if target > self.recovery_point:
                        self.recovery_point = target
                    if target > self._durable_end:
                        self._durable_end = target
            return self.recovery_point

    def flush_upto(self, offset: int) -> int:
        """fsync every segment holding data below `offset` with its indexes, the producer
        snapshot taken at `offset` and the epoch checkpoint, then advance the recovery point
        to `offset` (Kafka's flushUptoOffsetExclusive, scheduled by a roll with the new
        segment's base offset, so the new active segment is not synced; and after an
        unclean start with the log end offset, see `PartitionLog._load`). Returns the
        recovery point. Thread-safe; runs on the LogManager's flusher thread."""
        with self._flush_lock:
            with self.lock:
                if self.deleted or offset <= self.recovery_point:
                    return self.recovery_point
                generation = self._generation
                segs = self._view.segments
                dirty = []
                bound = self.recovery_point
                for i, seg in enumerate(segs):
                    if seg.base_offset >= offset:
                        break
                    if seg.unflushed:
                        seg.unflushed = False
                        seg.flush_indexes(sync=False)
                        dirty.append(seg)
                    nxt = segs[i + 1].base_offset if i + 1 < len(segs) else offset
                    bound = min(nxt, offset)
                sync_dir, self._dir_dirty = self._dir_dirty, False
            self._sync_segments(dirty, sync_dir, snapshot=bound)
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
        sync_dir: bool,
        snapshot: int | None = None,
    ) -> None:
        """The fsyncs of a flush, outside the log lock (appends go on meanwhile). On failure
        the segments not synced are marked dirty again and KafkaStorageError is raised."""
        done = 0
        try:
            for seg in dirty:
                if not seg.closed:
                    seg.flush()
                done += 1
            self._sync_state(snapshot)
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

    def flush_if_due(self, now: int) -> None:
        """`flush.ms`; and inactive segments not yet fsynced (the roll's own flush failed or
        had no flusher, or recovery rebuilt them): synced up to the active segment."""
        if self.unflushed_messages and now - self.last_flush_ms >= self.config.flush_ms:
            self.flush()
            return
        segs = self._view.segments
        if any(s.unflushed for s in segs[:-1]):
            self.flush_upto(segs[-1].base_offset)

    # --- read -------------------------------------------------------------------------------

    def _read_batches(
        self, offset: int, max_bytes: int, limit: int, min_one_message: bool,
        regions: bool = False,
    ) -> tuple[list, int, int, int] | None:
        """(buffers, size, first offset, next offset) of whole batches from the one holding
        `offset`, below `limit`; None if there are none. Lock-free (see the module doc).
        `regions`: `FileRegion`s instead of bytes (zero-copy fetch)."""
        view = self._view
        i = max(bisect_right(view.bases, offset) - 1, 0)
        while i < len(view.segments):
            got = view.segments[i].read(offset, max_bytes, limit, min_one_message,
                                        regions=regions)
            if got is not None:
                return got
            i += 1
        return None

    def _max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp, None if none has one."""
        best: tuple[int, int] | None = None
        for seg in self._view.segments:
            seg.ensure_indexes()
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best[1]):
                best = (seg.offset_of_max_timestamp, seg.max_timestamp)
        return best

    def _offset_for_timestamp(self, timestamp: int, start: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `start` with a timestamp
        >= `timestamp`, through the time indexes; None if no record is that recent."""
        for seg in self._view.segments:
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

    def _truncate_segments_to(self, offset: int) -> int:
        """Drop every record at or after `offset` (above the first segment's base); returns
        the new log end offset. Under the lock."""
        self._generation += 1
        segs = list(self._view.segments)
        i = bisect_right(self._view.bases, offset) - 1
        drop = segs[i + 1 :]
        keep = segs[: i + 1]
        self._view = _View(tuple(keep), tuple(s.base_offset for s in keep))
        self._retire(drop)
        new_end = keep[-1].truncate_to(offset)
        self.log_end_offset = new_end
        self.recovery_point = min(self.recovery_point, new_end)
        self._durable_end = min(self._durable_end, new_end)
        return new_end

    def _reset_segments_at(self, offset: int) -> None:
        """Retire every segment and start one empty segment at `offset`. Under the lock."""
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
        self.recovery_point = offset
        self._durable_end = offset

    def _remove_segments_below(self, offset: int) -> None:
        """Retire the oldest segments that lie wholly below `offset` (never the active one).
        Under the lock."""
        segs = list(self._view.segments)
        drop = []
        while len(segs) > 1 and segs[1].base_offset <= offset:
            drop.append(segs.pop(0))
        if drop:
            self._view = _View(tuple(segs), tuple(s.base_offset for s in segs))
            self._retire(drop)

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

    # --- closing ----------------------------------------------------------------------------

    def _close_segments(self) -> None:
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
