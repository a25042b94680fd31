"""One segment: `<base offset>.log` plus its `.index` and `.timeindex` (and `.txnindex`, the
aborted transactions whose marker it holds, only once there is one).

A segment only ever grows at its end (appends) or shrinks from its end (truncation, recovery);
the cleaner never edits one in place but writes a replacement. That is what lets readers on the
event loop run without a lock: a position they found stays valid while they use it, and a
removed segment keeps its file descriptor open until `file.delete.delay.ms` has passed.

A little over 600 lines, for one reason: crash recovery (`recover`) stays beside the append
path whose index state it rebuilds (`_index_batch`, inlined in its scan for speed), so the
two cannot drift apart.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterator

import crc32c

from yak.errors import KafkaStorageError
from yak.protocol.records import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    read_header,
)
from yak.storage.file_region import FileRegion
from yak.storage.index import OffsetIndex, TimeIndex
from yak.storage.txn_index import TransactionIndex

INT32_MAX = 2**31 - 1
_SCAN_CHUNK = 4 * 1024 * 1024
# The header fields recovery's scan reads (HEADER up to maxTimestamp): fewer objects per batch.
_SCAN_HEADER = struct.Struct(HEADER.format[:10])
_READ_SLACK = 8192
# Header walk of a zero-copy read: one pread of this many bytes finds the headers of the
# batches it spans (many small batches) or one header (large batches).
_HEADER_WINDOW = 4096


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class LogSegment:
    def __init__(
        self,
        directory: str,
        base_offset: int,
        index_bytes: int,
        index_interval_bytes: int,
        suffix: str = "",
        now_ms: int = 0,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.suffix = suffix
        self.index_interval_bytes = index_interval_bytes
        name = os.path.join(directory, segment_name(base_offset))
        self.log_path = name + ".log" + suffix
        self.index = OffsetIndex(name + ".index" + suffix, base_offset, index_bytes // 8)
        self.time_index = TimeIndex(name + ".timeindex" + suffix, base_offset, index_bytes // 12)
        self.txn_index = TransactionIndex(name + ".txnindex" + suffix)
        created = False
        try:
            try:
                self.fd = os.open(self.log_path, os.O_RDWR)
            except FileNotFoundError:
                created = True
                # A new segment. Its index files come first, as Kafka creates all three
                # together: a crash at any moment leaves no `.log` without its indexes (an
                # index without its `.log` is removed when the log loads).
                self.index.reset()
                self.time_index.reset()
                self.txn_index.reset()
                self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
            self.size = os.fstat(self.fd).st_size
        except OSError as e:
            raise KafkaStorageError(f"cannot open {self.log_path}: {e}") from e
        self.next_offset = base_offset  # valid once `load_tail`/`recover` ran (active segment)
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_last_index = 0
        self.created_ms = now_ms
        self.first_append_ms = -1
        self.unflushed = False
        # An index at its `segment.index.bytes` capacity forces a roll; kept as a flag (see
        # `_refresh_full`) so the append path does not ask both indexes on every append.
        self.indexes_full = False
        self._indexes_ready = False
        self.closed = False
        # After `recover`: (position, offset) where its scan started.
        self.recovered_from = (0, base_offset)
        if self.size == 0:
            # A new (or empty) segment: nothing to load; stale index files must not survive.
            if not created:
                self.index.reset()
                self.time_index.reset()
                self.txn_index.reset()
            self._indexes_ready = True

    # --- loading ---------------------------------------------------------------------------

    def ensure_indexes(self) -> None:
        """Load the index files on first use, so a clean start-up reads nothing it won't use."""
        if self._indexes_ready:
            return
        if self.index.load() and self.time_index.load():
            last_off, last_pos = self.index.last_entry()
            if last_pos <= self.size and last_off >= self.base_offset:
                self._indexes_ready = True
                self._refresh_full()
                self.max_timestamp = self.time_index.max_timestamp
                if len(self.time_index):
                    self.offset_of_max_timestamp = (
                        self.base_offset + self.time_index.rel_offsets[-1]
                    )
                return
        self.rebuild_indexes()

    def rebuild_indexes(self) -> None:
        self.index.reset()
        self.time_index.reset()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_last_index = 0
        self.next_offset = self.base_offset
        for pos, h in self.iter_headers(0):
            last = h.base_offset + h.last_offset_delta
            size = h.batch_length + LOG_OVERHEAD
            self._index_batch(pos, h.base_offset, last, h.max_timestamp, size)
            self.next_offset = last + 1
        self._indexes_ready = True
        self._refresh_full()

    def _refresh_full(self) -> None:
        self.indexes_full = self.index.is_full or self.time_index.is_full

    def load_tail(self) -> None:
        """Find the next offset by scanning from the last index entry (bounded work)."""
        self.ensure_indexes()
        last_off, last_pos = self.index.last_entry()
        self.next_offset = self.base_offset
        self.bytes_since_last_index = 0
        for pos, h in self.iter_headers(last_pos):
            last = h.base_offset + h.last_offset_delta
            self.next_offset = last + 1
            self.bytes_since_last_index = pos + h.batch_length + LOG_OVERHEAD - last_pos
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = last

    def recover(
        self,
        on_epoch: Callable[[int, int], None] | None = None,
        recovery_point: int | None = None,
    ) -> int:
        """Validate every batch (framing, CRC, increasing offsets) from the recovery start,
        cut the file at the first invalid byte and rebuild both indexes from there. Returns
        the number of bytes cut. `on_epoch(epoch, base offset)` is called for the first
        batch and at every change of partition leader epoch.

        The recovery start: with `recovery_point` (the segment holds it), the last
        offset-index entry below it, else the segment's start. Everything before that
        entry's batch is trusted as it is on disk, with the index and time-index entries
        that describe it, because the recovery point only passes data after an fsync of the
        segment and of both its indexes (`LocalLog.flush`, `flush_upto`); and an index entry
        on disk is never stale, since an index is only cut together with the log and the
        cut reaches the disk before the recovery point passes the cut again. The start
        batch itself must be where its entry says (framing, base offset, CRC), or the whole
        segment is scanned as before. The transaction index is left to the loader, which
        keeps the entries below what the producer-state replay rebuilds."""
        file_size = os.fstat(self.fd).st_size
        start = None
        if recovery_point is not None:
            start = self._recovery_start(recovery_point, file_size)
        if start is None:
            self.index.reset()
            self.time_index.reset()
            self.max_timestamp = -1
            self.offset_of_max_timestamp = self.base_offset
            self.next_offset = self.base_offset
            start = 0
        self.recovered_from = (start, self.next_offset)
        self.bytes_since_last_index = 0
        valid_end = self._scan_batches(start, file_size, on_epoch)
        cut = file_size - valid_end
        if cut:
            os.ftruncate(self.fd, valid_end)
        self.size = valid_end
        self._indexes_ready = True
        self._refresh_full()
        return cut

    def _recovery_start(self, recovery_point: int, file_size: int) -> int | None:
        """Position of the last batch below `recovery_point` that the offset index on disk
        points at, checked (framing, base offset, CRC), with the in-memory state set as it
        was right after that entry was written: both indexes cut after it, the segment's
        max timestamp from the time index. None: scan the segment from its start."""
        if recovery_point <= self.base_offset + 1:
            return None  # no entry can lie below it: nothing to read
        if not (self.index.load() and self.time_index.load()):
            return None
        i = bisect_right(self.index.rel_offsets, recovery_point - 1 - self.base_offset)
        if i == 0:
            return None
        off = self.base_offset + self.index.rel_offsets[i - 1]
        pos = self.index.positions[i - 1]
        if pos + HEADER_SIZE > file_size:
            return None
        head = os.pread(self.fd, HEADER_SIZE, pos)
        if len(head) < HEADER_SIZE:
            return None
        h = read_header(head, 0)
        size = h.batch_length + LOG_OVERHEAD
        if not h.framing_ok or h.base_offset != off or h.last_offset_delta < 0 \
                or pos + size > file_size:
            return None
        batch = os.pread(self.fd, size, pos)
        if len(batch) < size or crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]) != h.crc:
            return None
        # Time-index entries written at or before this entry are those whose offset is in
        # this batch or earlier (a later entry only comes with a larger max timestamp,
        # reached in a later batch); the last of them is the max timestamp so far.
        self.index.truncate_to_position(pos + 1)
        self.time_index.truncate_to_offset(off + h.last_offset_delta + 1)
        self.max_timestamp = self.time_index.max_timestamp
        if len(self.time_index):
            self.offset_of_max_timestamp = self.base_offset + self.time_index.rel_offsets[-1]
        else:
            self.offset_of_max_timestamp = self.base_offset
        self.next_offset = off
        return pos

    def _scan_batches(
        self, start: int, file_size: int, on_epoch: Callable[[int, int], None] | None
    ) -> int:
        """Recovery's scan from `start`: returns the end of the last valid batch.

        Per batch, one header unpack, the checks, one CRC over a memoryview of the chunk
        and the index bookkeeping, inline: no per-record work, no call per batch but the
        CRC's. Reads are `_SCAN_CHUNK` sequential preads (one batch larger than that is
        read whole)."""
        fd = self.fd
        base_offset = self.base_offset
        limit = base_offset + INT32_MAX
        interval = self.index_interval_bytes
        index = self.index
        time_index = self.time_index
        since = self.bytes_since_last_index
        max_ts = self.max_timestamp
        max_off = self.offset_of_max_timestamp
        nxt = self.next_offset
        epoch = -2
        unpack = _SCAN_HEADER.unpack_from
        crc = crc32c.crc32c
        min_length = HEADER_SIZE - LOG_OVERHEAD
        pos = start
        bad = False
        while not bad and pos + HEADER_SIZE <= file_size:
            chunk = os.pread(fd, min(_SCAN_CHUNK, file_size - pos), pos)
            n = len(chunk)
            if n < HEADER_SIZE:
                break
            first = unpack(chunk, 0)[1] + LOG_OVERHEAD
            if first > n and pos + first <= file_size:
                chunk = os.pread(fd, first, pos)  # one batch larger than the chunk
                n = len(chunk)
            mv = memoryview(chunk)
            rel = 0
            while rel + HEADER_SIZE <= n:
                base, length, ple, magic, want_crc, _attrs, lod, _bts, batch_max_ts = \
                    unpack(chunk, rel)
                size = length + LOG_OVERHEAD
                if magic != MAGIC or length < min_length or pos + rel + size > file_size:
                    bad = True
                    break
                if rel + size > n:
                    break  # continues in the next chunk
                last = base + lod
                if lod < 0 or base < nxt or last > limit \
                        or crc(mv[rel + ATTRIBUTES_OFFSET : rel + size]) != want_crc:
                    bad = True
                    break
                if batch_max_ts > max_ts:
                    max_ts = batch_max_ts
                    max_off = last
                if since > interval:
                    index.append(base, pos + rel)
                    time_index.maybe_append(max_ts, max_off)
                    since = 0
                since += size
                nxt = last + 1
                if ple != epoch:
                    epoch = ple
                    if on_epoch is not None:
                        on_epoch(ple, base)
                rel += size
            if rel == 0:
                break
            pos += rel
        self.bytes_since_last_index = since
        self.max_timestamp = max_ts
        self.offset_of_max_timestamp = max_off
        self.next_offset = nxt
        return pos

    def iter_headers(
        self, start: int, end: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from `start`, reading headers only."""
        end = self.size if end is None else end
        pos = start
        chunk = b""
        cpos = start
        while pos + HEADER_SIZE <= end:
            rel = pos - cpos
            if rel + HEADER_SIZE > len(chunk):
                chunk = os.pread(self.fd, min(65536, end - pos), pos)
                cpos, rel = pos, 0
                if len(chunk) < HEADER_SIZE:
                    return
            h = read_header(chunk, rel)
            size = h.batch_length + LOG_OVERHEAD
            if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
                return
            yield pos, h
            pos += size

    # --- appending -------------------------------------------------------------------------

    def _index_batch(self, pos: int, base: int, last: int, max_ts: int, size: int) -> None:
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.offset_of_max_timestamp = last
        if self.bytes_since_last_index > self.index_interval_bytes:
            self.index.append(base, pos)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index = 0
            self._refresh_full()
        self.bytes_since_last_index += size

    def append(self, iovecs: list, total: int, batches: list[tuple[int, int, int, int]]) -> None:
        """Write `iovecs` (whole batches) at the end; all or nothing.

        `batches` holds (base offset, last offset, max timestamp, size) per batch. On any I/O
        error the file is cut back to its old size so no partial batch is ever readable.
        """
        start = self.size
        try:
            written = 0
            while written < total:
                n = os.pwritev(self.fd, iovecs, start + written)
                if n <= 0:
                    raise OSError(errno.EIO, "short write")
                written += n
                if written < total:
                    iovecs = _skip(iovecs, n)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)
            raise KafkaStorageError(f"append to {self.log_path} failed: {e}") from e
        # `_index_batch` per batch, inlined: this runs once per batch of every append
        # (leader and follower), and the method call was most of its cost.
        pos = start
        interval = self.index_interval_bytes
        since = self.bytes_since_last_index
        for base, last, max_ts, size in batches:
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                self.offset_of_max_timestamp = last
            if since > interval:
                index = self.index
                index.append(base, pos)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                since = 0
                self.indexes_full = index.is_full or self.time_index.is_full
            since += size
            pos += size
        self.bytes_since_last_index = since
        self.size = start + total
        self.next_offset = batches[-1][1] + 1
        self.unflushed = True

    # --- reading ---------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, max_offset: int, min_one: bool, _retry: bool = True,
        regions: bool = False,
    ) -> tuple[list, int, int, int] | None:
        """Whole batches from the one holding `offset`: (buffers, size, first base offset,
        the offset after the last batch returned).

        None if this segment holds nothing at or after `offset` (look in the next one).
        `regions`: the buffer is a `FileRegion` (headers read, data left in the file, for
        `sendfile`) instead of the bytes.
        """
        if regions:
            return self._read_region(offset, max_bytes, max_offset, min_one, _retry)
        self.ensure_indexes()
        end = self.size
        pos = self.index.lookup(offset)
        cpos = pos
        chunk = os.pread(self.fd, min(end - pos, max_bytes + _READ_SLACK), pos)
        h = None
        while pos + HEADER_SIZE <= end:
            rel = pos - cpos
            if rel + HEADER_SIZE > len(chunk):
                chunk = os.pread(self.fd, min(end - pos, max_bytes + _READ_SLACK), pos)
                cpos, rel = pos, 0
                if len(chunk) < HEADER_SIZE:
                    return None
            h = read_header(chunk, rel)
            if not h.framing_ok:
                # Not a batch start: the index is wrong (a plausible-looking corrupt file).
                # Rebuild it from the log once; if that does not help, the log is damaged.
                if not _retry:
                    raise KafkaStorageError(f"{self.log_path}: no batch at position {pos}")
                self.rebuild_indexes()
                return self.read(offset, max_bytes, max_offset, min_one, _retry=False)
            if h.base_offset + h.last_offset_delta >= offset:
                break
            pos += h.batch_length + LOG_OVERHEAD
        else:
            return None
        if h is None:
            return None
        start = pos
        first = h.base_offset
        nxt = first
        total = 0
        while True:
            size = h.batch_length + LOG_OVERHEAD
            if h.base_offset + h.last_offset_delta >= max_offset:
                break
            if total + size > max_bytes and not (total == 0 and min_one):
                break
            total += size
            nxt = h.base_offset + h.last_offset_delta + 1
            pos += size
            if pos + HEADER_SIZE > end:
                break
            rel = pos - cpos
            if rel + HEADER_SIZE <= len(chunk):
                h = read_header(chunk, rel)
            else:
                raw = os.pread(self.fd, HEADER_SIZE, pos)
                if len(raw) < HEADER_SIZE:
                    break
                h = read_header(raw, 0)
        if total == 0:
            return [], 0, first, first
        if start >= cpos and start + total <= cpos + len(chunk):
            data: bytes | memoryview = memoryview(chunk)[start - cpos : start - cpos + total]
        else:
            data = os.pread(self.fd, total, start)
            if len(data) < total:  # cut under us by a truncation: serve nothing rather than junk
                return [], 0, first, first
        return [data], total, first, nxt

    def _read_region(
        self, offset: int, max_bytes: int, max_offset: int, min_one: bool, retry: bool
    ) -> tuple[list, int, int, int] | None:
        """`read` for zero-copy: the same batches, found by reading their headers only
        (one small pread per `_HEADER_WINDOW`), returned as one `FileRegion`."""
        self.ensure_indexes()
        end = self.size
        pos = self.index.lookup(offset)
        wpos, window = pos, b""
        start = -1
        first = nxt = -1
        total = records = 0
        while pos + HEADER_SIZE <= end:
            rel = pos - wpos
            if rel < 0 or rel + HEADER_SIZE > len(window):
                window = os.pread(self.fd, min(end - pos, _HEADER_WINDOW), pos)
                wpos, rel = pos, 0
                if len(window) < HEADER_SIZE:
                    break
            h = read_header(window, rel)
            if not h.framing_ok:
                if not retry:
                    raise KafkaStorageError(f"{self.log_path}: no batch at position {pos}")
                self.rebuild_indexes()
                return self._read_region(offset, max_bytes, max_offset, min_one, False)
            size = h.batch_length + LOG_OVERHEAD
            last = h.base_offset + h.last_offset_delta
            if start < 0:
                if last < offset:
                    pos += size
                    continue
                start, first, nxt = pos, h.base_offset, h.base_offset
            if last >= max_offset or pos + size > end:
                break
            if total + size > max_bytes and not (total == 0 and min_one):
                break
            total += size
            records += max(h.record_count, 0)
            nxt = last + 1
            pos += size
        if start < 0:
            return None
        if total == 0:
            return [], 0, first, first
        return [FileRegion(os.dup(self.fd), start, total, records)], total, first, nxt

    def find_position(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset >= `offset`."""
        self.ensure_indexes()
        for pos, h in self.iter_headers(self.index.lookup(offset)):
            if h.base_offset + h.last_offset_delta >= offset:
                return pos, h
        return None

    def read_batch(self, pos: int, size: int) -> bytes:
        return os.pread(self.fd, size, pos)

    # --- shrinking, flushing, closing -------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset >= `offset`; returns the new next offset."""
        found = self.find_position(offset)
        if found is None:
            return self.next_offset
        pos, _h = found
        os.ftruncate(self.fd, pos)
        self.size = pos
        self.index.truncate_to_position(pos)
        self.time_index.truncate_to_offset(offset)
        self.txn_index.truncate_to(offset)
        self._refresh_full()
        self.rebuild_tail_state()
        return self.next_offset

    def rebuild_tail_state(self) -> None:
        self.max_timestamp = self.time_index.max_timestamp
        if len(self.time_index):
            self.offset_of_max_timestamp = self.base_offset + self.time_index.rel_offsets[-1]
        else:
            self.offset_of_max_timestamp = self.base_offset
        self.load_tail()

    def on_become_inactive(self) -> None:
        """Kafka adds a final time-index entry at roll so the segment's max timestamp is known
        from its time index alone after a restart (retention needs it)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.flush_indexes(sync=False)

    def flush_indexes(self, sync: bool) -> None:
        if self._indexes_ready:
            self.index.flush(sync)
            self.time_index.flush(sync)
        self.txn_index.flush(sync)

    def flush(self, sync_indexes: bool = True) -> None:
        """fsync the log and its index files (all of them: recovery trusts the index entries
        below the recovery point, see `recover`). Index entries are written to the files by
        the caller under the log lock (`flush_indexes`); this only syncs, so it runs outside
        the lock, and an index file that did not change since its last fsync is skipped. The
        caller also clears `unflushed` under the lock before calling, so an append racing
        with the fsync marks the segment dirty again instead of being forgotten."""
        try:
            os.fdatasync(self.fd)
            if sync_indexes:
                self.index.sync()
                self.time_index.sync()
            # Aborted transactions are rare; their entries reach the disk with the data
            # they describe (also for the active segment: recovery rebuilds only from the
            # recovery point, and the entries of synced segments must be there).
            self.txn_index.sync()
        except OSError as e:
            self.unflushed = True
            raise KafkaStorageError(f"flush of {self.log_path} failed: {e}") from e

    def close(self) -> None:
        if self.closed:
            return
        with contextlib.suppress(OSError):
            self.flush_indexes(sync=False)
        self.closed = True
        os.close(self.fd)

    def paths(self) -> list[str]:
        return [self.log_path, self.index.path, self.time_index.path, self.txn_index.path]

    def rename_suffix(self, new_suffix: str) -> None:
        """Rename all files (e.g. to `.deleted`, or `.swap` -> ``)."""
        old = self.suffix
        for attr_holder, attr in (
            (self, "log_path"),
            (self.index, "path"),
            (self.time_index, "path"),
        ):
            path = getattr(attr_holder, attr)
            stem = path[: len(path) - len(old)] if old else path
            new = stem + new_suffix
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, new)
            setattr(attr_holder, attr, new)
        path = self.txn_index.path
        stem = path[: len(path) - len(old)] if old else path
        self.txn_index.rename(stem + new_suffix)
        self.suffix = new_suffix

    def delete_files(self) -> None:
        self.close()
        for p in self.paths():
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)

    @property
    def largest_timestamp(self) -> int:
        """For retention: the max timestamp, or the file's mtime if it holds no timestamps."""
        self.ensure_indexes()
        if self.max_timestamp >= 0:
            return self.max_timestamp
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except OSError:
            return 0


def _skip(iovecs: list, n: int) -> list:
    out = []
    for b in iovecs:
        ln = len(b)
        if n >= ln:
            n -= ln
            continue
        out.append(memoryview(b)[n:] if n else b)
        n = 0
    return out
