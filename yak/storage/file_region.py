"""A run of whole batches in a segment file, handed to the network without passing
through Python (issue 28: zero-copy fetch).

`LogSegment.read(..., regions=True)` walks the batch headers only and returns one
`FileRegion` instead of the bytes: the broker's connection writer sends it with
`os.sendfile` after the response's framed header, so the data goes from the page cache to
the socket without a copy into user space (Kafka's `FileRecords.writeTo`).

The region holds its own duplicate of the segment's file descriptor, taken at read time:
a segment that is closed or deleted before the response leaves (retention, a roll's
replacement by the cleaner) cannot make the send read another file that reused the
descriptor's number. It covers only the bytes the read found as whole batches below the
segment's size at that moment; a truncation after the read (a follower truncating to its
leader's epoch) shortens the file under it, which the sender sees as a short `sendfile`
or `pread` and answers by closing the connection (the frame length already went out, so
nothing else is correct), as Kafka does when FileRecords was truncated during a write.

`bytes(region)` reads the data (`os.pread`): the path for TLS listeners and for any
in-process reader (coordinator loaders) that wants the bytes themselves.
"""

from __future__ import annotations

import os

from yak.errors import KafkaStorageError


class FileRegion:
    """`size` bytes at `position` of a file; `record_count` records in its batches (for the
    fetch metrics, counted from the headers the read walked anyway)."""

    __slots__ = ("fd", "position", "size", "record_count")

    def __init__(self, fd: int, position: int, size: int, record_count: int) -> None:
        self.fd = fd
        self.position = position
        self.size = size
        self.record_count = record_count

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return self.read(0, self.size)

    def read(self, start: int, count: int) -> bytes:
        """`count` bytes from `start` within the region; raises if the file was cut."""
        if self.fd < 0:
            raise KafkaStorageError("file region already released")
        data = os.pread(self.fd, count, self.position + start)
        if len(data) < count:
            raise KafkaStorageError("segment truncated under a fetch in flight")
        return data

    def release(self) -> None:
        """Close the duplicate descriptor (idempotent)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, position={self.position}, size={self.size})"
