"""What an acquisition read from the log, per batch, and the records a ShareFetch returns
from it (issue 24: share-group consumption at 1 KiB records).

The read is whole batches, either in memory (`pread` bytes: TLS listeners, tests) or, on
a plaintext connection, left in the segment files as `FileRegion`s (the zero-copy read
Fetch uses, yak/storage/file_region.py): the acquisition needs only each batch's header
(offsets; control and transactional flags for the gaps), read here with one small `pread`
per `_WINDOW` of the region, and the batches the member acquired go back as a region of
the file again, sent with `sendfile` by the connection's writer. The records are never
copied through Python: reading a share partition's 1 MiB into memory and copying it into
the socket was most of a 1 KiB share fetch's broker CPU (docs/benchmarks/share-groups.md).

`read_batches` gives (base offset, last offset, gap, piece) per batch, where a piece is a
memoryview of the batch or a `Span` of a region (both have a `len`); `acquired_records`
the buffers covering the batches that overlap the acquired offsets, contiguous spans of
one region joined into one `FileRegion` (its own duplicate descriptor; the read's regions
close theirs when dropped).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from yak.errors import KafkaStorageError
from yak.protocol.records import HEADER_SIZE, LOG_OVERHEAD, iter_batches, read_header
from yak.storage.file_region import FileRegion

__all__ = ["Span", "acquired_records", "read_batches"]

# Bytes of a region read per header window: with 1 MB batches one header per read, with
# small batches many (the storage read's own walk uses 4 KiB).
_WINDOW = 8192


class Span:
    """One batch inside a `FileRegion`: `size` bytes at file position `position`."""

    __slots__ = ("region", "position", "size", "records")

    def __init__(self, region: FileRegion, position: int, size: int, records: int) -> None:
        self.region = region
        self.position = position
        self.size = size
        self.records = records

    def __len__(self) -> int:
        return self.size


Batch = tuple[int, int, bool, Any]
"""(base offset, last offset, gap, memoryview or Span)."""


def read_batches(buffers: Iterable[Any], aborted: list[tuple[int, int]] | None,
                 ) -> list[Batch]:
    """(base, last, gap, piece) per batch read. Gaps are never handed out: control batches,
    and under read_committed (`aborted` given: (producer id, first offset) of the aborted
    transactions in the range, Kafka's FetchResponse list) the batches of an aborted
    transaction, from its first offset up to its abort marker (Kafka's consumer rule)."""
    pending = sorted(aborted or (), key=lambda a: a[1])
    open_aborts: set[int] = set()
    out: list[Batch] = []
    i = 0
    for buf in buffers:
        if type(buf) is FileRegion:
            headers: Iterable[tuple[Any, Any]] = _region_headers(buf)
        else:
            view = memoryview(buf)
            headers = ((view[pos:pos + h.size], h) for pos, h in iter_batches(view))
        for piece, h in headers:
            while i < len(pending) and pending[i][1] <= h.last_offset:
                open_aborts.add(pending[i][0])
                i += 1
            if h.is_control:
                open_aborts.discard(h.producer_id)  # the abort (or commit) marker
                gap = True
            else:
                gap = h.is_transactional and h.producer_id in open_aborts
            out.append((h.base_offset, h.last_offset, gap, piece))
    return out


def _region_headers(region: FileRegion) -> list[tuple[Span, Any]]:
    """(Span, header) of each batch of `region`, the headers read from the file a window
    at a time. A file cut under the read (a truncation) raises KafkaStorageError."""
    out: list[tuple[Span, Any]] = []
    pos = region.position
    end = pos + region.size
    wpos, window = pos, b""
    fd = region.fd
    while pos < end:
        rel = pos - wpos
        if rel + HEADER_SIZE > len(window):
            window = os.pread(fd, min(end - pos, _WINDOW), pos)
            wpos, rel = pos, 0
            if len(window) < HEADER_SIZE:
                raise KafkaStorageError("segment truncated under a share fetch's read")
        h = read_header(window, rel)
        size = h.batch_length + LOG_OVERHEAD
        out.append((Span(region, pos, size, max(h.record_count, 0)), h))
        pos += size
    return out


def acquired_records(batches: Sequence[Batch], lo: int, hi: int) -> list[Any]:
    """The buffers of the batches overlapping offsets lo..hi, whole, in order: memoryviews
    as read, spans joined into one `FileRegion` per run of adjacent batches of a region."""
    out: list[Any] = []
    run: Span | None = None  # the span run being joined: region, position, size, records
    for base, last, _gap, piece in batches:
        if last < lo or base > hi:
            continue
        if type(piece) is not Span:
            if run is not None:
                out.append(_region(run))
                run = None
            out.append(piece)
        elif run is not None and run.region is piece.region \
                and run.position + run.size == piece.position:
            run.size += piece.size
            run.records += piece.records
        else:
            if run is not None:
                out.append(_region(run))
            run = Span(piece.region, piece.position, piece.size, piece.records)
    if run is not None:
        out.append(_region(run))
    return out


def _region(run: Span) -> FileRegion:
    fd = run.region.fd
    if fd < 0:
        raise KafkaStorageError("file region already released")
    return FileRegion(os.dup(fd), run.position, run.size, run.records)
