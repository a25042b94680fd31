"""`.txnindex`: the aborted transactions whose ABORT marker is in one segment.

Kafka's format, so its `kafka-dump-log` reads Yak's files: 34-byte big-endian entries

    int16 version (0) | int64 producer id | int64 first offset | int64 last offset
    | int64 last stable offset

`first offset` is where the transaction's first batch in this partition landed, `last
offset` the offset of its ABORT marker, `last stable offset` the partition's LSO right
after the marker (the first offset of the oldest transaction still open, or the marker's
offset + 1). A read_committed Fetch collects the entries that overlap the range it
returns (Kafka's `collectAbortedTxns`), and the consumer drops those producers' batches
from `first offset` until the marker.

Aborts are rare next to appends, so the entries live in memory (loaded lazily from the
file) and the file is only created when the first entry arrives: a partition that never
saw an aborted transaction has no `.txnindex` at all, and costs nothing to read.
"""

from __future__ import annotations

import contextlib
import os
import struct
from typing import NamedTuple

from yak.storage.index import sync_file

__all__ = ["ENTRY", "AbortedTxn", "TransactionIndex"]

ENTRY = struct.Struct(">hqqqq")
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: str) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None  # None: not read from the file yet
        self._written = 0  # entries already in the file
        self.dirty = False

    # --- reading ----------------------------------------------------------------------------

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
            self._written = len(self._entries)
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        usable = len(data) - len(data) % ENTRY.size  # a torn last entry is dropped
        out = []
        for version, pid, first, last, lso in ENTRY.iter_unpack(data[:usable]):
            if version != VERSION:
                break
            out.append(AbortedTxn(pid, first, last, lso))
        return out

    def __len__(self) -> int:
        return len(self.entries)

    def collect(
        self, fetch_offset: int, upper_bound: int, into: list[AbortedTxn]
    ) -> bool:
        """Add the entries overlapping [fetch_offset, upper_bound) to `into`; True once an
        entry's last stable offset reaches `upper_bound` (no later segment can hold a
        transaction that overlaps the range: Kafka's `isComplete`)."""
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                into.append(e)
            if e.last_stable_offset >= upper_bound:
                return True
        return False

    # --- writing ----------------------------------------------------------------------------

    def append(self, entry: AbortedTxn) -> None:
        """Record one aborted transaction (written to the file at the next `flush`)."""
        entries = self.entries
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"aborted transaction at {entry.last_offset} is not after "
                f"{entries[-1].last_offset} in {self.path}"
            )
        entries.append(entry)
        self.dirty = True

    def flush(self, sync: bool) -> None:
        """Write new entries to the file (append-only; under the log lock, like the other
        indexes' entries) and optionally fsync."""
        entries = self.entries
        n = len(entries)
        if self._written < n:
            data = b"".join(ENTRY.pack(VERSION, *e) for e in entries[self._written : n])
            with open(self.path, "ab") as f:
                f.write(data)
            self._written = n
        if sync:
            self.sync()

    def sync(self) -> None:
        """fsync what `flush` wrote; writes nothing, so it is safe outside the log lock."""
        if not self.dirty:
            return
        self.dirty = False
        try:
            sync_file(self.path)
        except OSError:
            self.dirty = True
            raise
        if self._written < len(self.entries):
            self.dirty = True  # appended meanwhile: not on disk yet

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after `offset` (the log was cut there)."""
        entries = self.entries
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) == len(entries):
            return
        self._entries = keep
        self._rewrite()

    def reset(self) -> None:
        """Forget everything (recovery rebuilds the entries by replaying the segment)."""
        self._entries = []
        self._written = 0
        self.dirty = False
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)

    def replace(self, entries: list[AbortedTxn]) -> None:
        self._entries = list(entries)
        self._rewrite()

    def _rewrite(self) -> None:
        entries = self.entries
        if not entries:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
        else:
            tmp = self.path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(b"".join(ENTRY.pack(VERSION, *e) for e in entries))
            os.replace(tmp, self.path)
        self._written = len(entries)
        self.dirty = True

    def rename(self, new_path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)
