"""Sending a Fetch response whose records are `FileRegion`s (issue 28: zero-copy fetch),
for `yak.broker.connection.KafkaConnection`'s response writer.

Synchronous, so responses stay in request order and no await is added on the pipelined
path. When the transport holds nothing queued (uvloop writes at once when it can, so a
buffer size of 0 means the kernel has every byte written before), the bytes go straight to
the socket: the memory buffers (framed head, per-partition fields) with `os.writev`, each
region with `os.sendfile` from the segment file, page cache to socket with no copy through
Python. Whatever the socket does not take at once (its send buffer full), and everything
when the transport already holds queued bytes, is handed to the transport as bytes
(`pread`) after what went out directly, so the stream stays in order. Regions are released
(their descriptors closed) however the write ends.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from yak.errors import KafkaStorageError
from yak.storage.file_region import FileRegion

HAVE_SENDFILE = hasattr(os, "sendfile")
_IOV_MAX = 1024  # writev's limit on buffers per call (Linux's IOV_MAX)


def write_regions(fd: int, transport: asyncio.Transport, buffers: list[Any]) -> None:
    """Write `buffers` (bytes-like and `FileRegion`s) to `transport`, whose socket is `fd`
    (-1: never directly). Raises OSError or KafkaStorageError (a region's file was cut
    under it) once part of the response may have gone: the caller closes the connection."""
    direct = fd >= 0 and transport.get_write_buffer_size() == 0
    rest: list[Any] = []
    pending: list[Any] = []
    try:
        for buf in buffers:
            if not direct:
                rest.append(bytes(buf) if type(buf) is FileRegion else buf)
                continue
            if type(buf) is not FileRegion:
                pending.append(buf)
                continue
            if pending:
                left = _writev_all(fd, pending)
                pending = []
                if left:
                    direct = False
                    rest.extend(left)
                    rest.append(bytes(buf))
                    continue
            sent = _sendfile_all(fd, buf)
            if sent < buf.size:
                direct = False
                rest.append(buf.read(sent, buf.size - sent))
        if pending:
            rest.extend(_writev_all(fd, pending))
    finally:
        for buf in buffers:
            if type(buf) is FileRegion:
                buf.release()
    if rest:
        transport.writelines(rest)


def _writev_all(fd: int, buffers: list[Any]) -> list[Any]:
    """Write `buffers` to the non-blocking socket `fd` as far as it takes them; returns
    what it did not take (empty when all went out)."""
    views = [memoryview(b).cast("B") for b in buffers]
    while views:
        try:
            n = os.writev(fd, views[:_IOV_MAX])
        except (BlockingIOError, InterruptedError):
            return views
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]
    return views


def _sendfile_all(fd: int, region: FileRegion) -> int:
    """Send `region` to the non-blocking socket `fd` as far as it takes it; returns the
    bytes sent. Raises if the file ends before the region does (truncated under us)."""
    sent = 0
    size = region.size
    while sent < size:
        try:
            n = os.sendfile(fd, region.fd, region.position + sent, size - sent)
        except (BlockingIOError, InterruptedError):
            return sent
        if n == 0:
            raise KafkaStorageError("segment truncated under a fetch in flight")
        sent += n
    return sent
