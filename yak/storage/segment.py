"""One segment: `<base offset>.log` plus its `.index` and `.timeindex` (and `.txnindex`, the
aborted transactions whose marker it holds, only once there is one).

A segment only ever grows at its end (appends) or shrinks from its end (truncation, recovery);
the cleaner never edits one in place but writes a replacement. That is what lets readers on the
event loop run without a lock: a position they found stays valid while they use it, and a
removed segment keeps its file descriptor open until `file.delete.delay.ms` has passed.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

import crc32c

from yak.errors import KafkaStorageError
from yak.protocol.records import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    read_header,
)
from yak.storage.file_region import FileRegion
from yak.storage.index import OffsetIndex, TimeIndex, sync_file
from yak.storage.txn_index import TransactionIndex

INT32_MAX = 2**31 - 1
_SCAN_CHUNK = 4 * 1024 * 1024
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

    def recover(self, on_batch=None) -> int:  # type: ignore[no-untyped-def]
        """Validate every batch (framing, CRC, increasing offsets), cut the file at the first
        invalid byte and rebuild both indexes. Returns the number of bytes cut. The
        transaction index is emptied too: the log rebuilds it while replaying producer state
        over the recovered segments (it needs the transactions open before them)."""
        self.index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_last_index = 0
        self.next_offset = self.base_offset
        file_size = os.fstat(self.fd).st_size
        valid_end = 0
        for pos, batch, h in self._iter_raw(0, file_size):
            base = h.base_offset
            lod = h.last_offset_delta
            if (
                lod < 0
                or base < self.next_offset
                or base + lod - self.base_offset > INT32_MAX
                or crc32c.crc32c(batch[ATTRIBUTES_OFFSET:]) != h.crc
            ):
                break
            size = h.batch_length + LOG_OVERHEAD
            self._index_batch(pos, base, base + lod, h.max_timestamp, size)
            self.next_offset = base + lod + 1
            valid_end = pos + size
            if on_batch is not None:
                on_batch(h)
        cut = file_size - valid_end
        if cut:
            os.ftruncate(self.fd, valid_end)
        self.size = valid_end
        self._indexes_ready = True
        self._refresh_full()
        return cut

    def _iter_raw(self, start: int, end: int) -> Iterator[tuple[int, memoryview, BatchHeader]]:
        """(position, batch bytes, header) for each framed batch; stops at bad framing."""
        pos = start
        while pos + HEADER_SIZE <= end:
            chunk = os.pread(self.fd, min(_SCAN_CHUNK, end - pos), pos)
            mv = memoryview(chunk)
            rel = 0
            while rel + HEADER_SIZE <= len(chunk):
                h = read_header(chunk, rel)
                size = h.batch_length + LOG_OVERHEAD
                if not h.framing_ok or pos + rel + size > end:
                    return
                if rel + size > len(chunk):
                    if rel == 0:  # a batch bigger than the chunk
                        big = os.pread(self.fd, size, pos)
                        if len(big) < size:
                            return
                        yield pos, memoryview(big), h
                        rel = size
                    break
                yield pos + rel, mv[rel : rel + size], h
                rel += size
            if rel == 0:
                return
            pos += rel

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
        pos = start
        for base, last, max_ts, size in batches:
            self._index_batch(pos, base, last, max_ts, size)
            pos += size
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
        """fsync the log and, once the segment is immutable, its index files. Index entries
        are written to the files by the caller under the log lock (`flush_indexes`); this
        only syncs, so it runs outside the lock. The caller also clears `unflushed` under
        the lock before calling, so an append racing with the fsync marks the segment dirty
        again instead of being forgotten."""
        try:
            os.fdatasync(self.fd)
            if sync_indexes:
                sync_file(self.index.path)
                sync_file(self.time_index.path)
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
