"""Sparse indexes of a segment, in Kafka's file format.

`.index`: 8-byte entries (offset relative to the segment base int32, file position int32);
`.timeindex`: 12-byte entries (timestamp int64, relative offset int32); all big-endian.
Both files exist from the moment the segment does (created empty, before its `.log`). Entries
live in memory (`array`, searched with `bisect`) and are appended to the file lazily, at
flush/roll/close: a crash may lose recent entries, but the recovery point only passes data
once the segment and both its indexes are fsynced (`LocalLog.flush`, `flush_upto`), and
recovery rebuilds the entries from the last one below the recovery point on
(`LogSegment.recover`). An entry on disk is never stale: entries are only appended, and an
index is cut only with its log, below the recovery point's checkpoint, which passes the cut
again only after the next fsync has written the index as it is in memory.
Unlike Kafka the files are not pre-allocated, so there is nothing to trim and no mmap to
SIGBUS on truncation.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from array import array
from bisect import bisect_right

_OFF_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class OffsetIndex:
    ENTRY_SIZE = 8

    def __init__(self, path: str, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self.rel_offsets = array("i")
        self.positions = array("i")
        self._written = 0  # entries already in the file
        self._unsynced = False  # the file changed since its last fsync

    def __len__(self) -> int:
        return len(self.rel_offsets)

    @property
    def is_full(self) -> bool:
        return len(self.rel_offsets) >= self.max_entries

    def append(self, offset: int, position: int) -> None:
        # Position first: a reader on another thread that sees the offset sees its position.
        self.positions.append(position)
        self.rel_offsets.append(offset - self.base_offset)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch at or before `offset` (0 if none)."""
        i = bisect_right(self.rel_offsets, offset - self.base_offset)
        positions = self.positions
        if i > len(positions):  # a concurrent truncation shrank the arrays
            i = len(positions)
        return positions[i - 1] if i else 0

    def last_entry(self) -> tuple[int, int]:
        if not self.rel_offsets:
            return self.base_offset, 0
        return self.base_offset + self.rel_offsets[-1], self.positions[-1]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries that point at or past `position` (the log was cut there)."""
        i = bisect_right(self.positions, position - 1)
        del self.rel_offsets[i:]
        del self.positions[i:]
        if self._written > i:
            self._written = i
            self._unsynced = True
            _truncate_file(self.path, i * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Empty the index, in memory and on disk (the file exists afterwards)."""
        del self.rel_offsets[:]
        del self.positions[:]
        self._written = 0
        self._unsynced = True
        _create_empty(self.path)

    def load(self) -> bool:
        """Read the file; False if it is missing or fails the sanity check (rebuild it)."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return False
        if len(data) % self.ENTRY_SIZE:
            return False
        raw = array("i", data)
        if sys.byteorder == "little":
            raw.byteswap()
        rel = raw[0::2]
        pos = raw[1::2]
        for i in range(1, len(rel)):
            if rel[i] <= rel[i - 1] or pos[i] <= pos[i - 1]:
                return False
        if rel and (rel[0] < 0 or pos[0] < 0):
            return False
        self.rel_offsets, self.positions = rel, pos
        self._written = len(rel)
        return True

    def flush(self, sync: bool) -> None:
        """Append the entries not yet in the file; `sync`: fdatasync it too."""
        n = len(self.rel_offsets)
        w = self._written
        if w < n:
            # Interleave (relative offset, position) big-endian at C speed: a rolled 1 GiB
            # segment has ~260k entries.
            both = array("i", bytes(8 * (n - w)))
            both[0::2] = self.rel_offsets[w:n]
            both[1::2] = self.positions[w:n]
            if sys.byteorder == "little":
                both.byteswap()
            self._unsynced = True
            _write_at(self.path, w * self.ENTRY_SIZE, both.tobytes())
            self._written = n
        if sync:
            self.sync()

    def sync(self) -> None:
        """fdatasync the file if it changed since the last one. An fsync with nothing to
        write is not free (ext4 still flushes the disk's cache), and the log's flush syncs
        both indexes of every dirty segment (`LogSegment.flush`). Writes nothing, so it is
        safe outside the log lock; a change made meanwhile marks the file again."""
        _sync_if_changed(self)


class TimeIndex:
    ENTRY_SIZE = 12

    def __init__(self, path: str, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self.timestamps = array("q")
        self.rel_offsets = array("i")
        self._written = 0
        self._unsynced = False

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def is_full(self) -> bool:
        return len(self.timestamps) >= self.max_entries

    @property
    def max_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Entries only grow: (max timestamp so far, offset where it was reached)."""
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self.timestamps.append(timestamp)
        self.rel_offsets.append(offset - self.base_offset)

    def lookup_before(self, timestamp: int) -> int:
        """Offset of the last entry with a timestamp strictly below `timestamp`: every record
        up to it is older, so a search for the first record >= timestamp may start there."""
        i = bisect_right(self.timestamps, timestamp - 1)
        return self.base_offset + self.rel_offsets[i - 1] if i else self.base_offset

    def truncate_to_offset(self, offset: int) -> None:
        rel = offset - self.base_offset
        i = len(self.rel_offsets)
        while i and self.rel_offsets[i - 1] >= rel:
            i -= 1
        del self.timestamps[i:]
        del self.rel_offsets[i:]
        if self._written > i:
            self._written = i
            self._unsynced = True
            _truncate_file(self.path, i * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Empty the index, in memory and on disk (the file exists afterwards)."""
        del self.timestamps[:]
        del self.rel_offsets[:]
        self._written = 0
        self._unsynced = True
        _create_empty(self.path)

    def load(self) -> bool:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return False
        if len(data) % self.ENTRY_SIZE:
            return False
        ts = array("q")
        rel = array("i")
        for t, r in _TIME_ENTRY.iter_unpack(data):
            if ts and (t <= ts[-1] or r < rel[-1]):
                return False
            ts.append(t)
            rel.append(r)
        self.timestamps, self.rel_offsets = ts, rel
        self._written = len(ts)
        return True

    def flush(self, sync: bool) -> None:
        """Append the entries not yet in the file; `sync`: fdatasync it too."""
        n = len(self.timestamps)
        w = self._written
        if w < n:
            data = b"".join(map(_TIME_ENTRY.pack, self.timestamps[w:n], self.rel_offsets[w:n]))
            self._unsynced = True
            _write_at(self.path, w * self.ENTRY_SIZE, data)
            self._written = n
        if sync:
            self.sync()

    def sync(self) -> None:
        """As `OffsetIndex.sync`."""
        _sync_if_changed(self)


def _sync_if_changed(index: OffsetIndex | TimeIndex) -> None:
    if not index._unsynced:
        return
    index._unsynced = False
    try:
        sync_file(index.path)
    except OSError:
        index._unsynced = True
        raise


def _write_at(path: str, position: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, position)
        os.pwrite(fd, data, position)
    finally:
        os.close(fd)


def sync_file(path: str) -> None:
    """fdatasync a file by path (writes nothing, so it is safe outside the log lock)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:  # renamed or removed by retention/truncation meanwhile
        return
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _create_empty(path: str) -> None:
    """Create or empty the file: Kafka's segments have both index files from the start."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))


def _truncate_file(path: str, size: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.truncate(path, size)
