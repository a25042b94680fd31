"""Writing a connection's responses, Fetch records as `FileRegion`s among them (issue 28:
zero-copy fetch), for `yak.broker.connection.KafkaConnection`.

Synchronous, so responses stay in request order and no await is added on the pipelined
path. On a plaintext socket with sendfile, while nothing is queued before it (uvloop
writes at once when it can, so a transport buffer of 0 means the kernel has every byte
written before), a response goes straight to the socket: the memory buffers (framed head,
per-partition fields) with `os.writev`, each region with `os.sendfile` from the segment
file, page cache to socket with no copy through Python.

When the socket's send buffer fills part-way (a consumer slower than the broker, a
response larger than the buffer), what is left waits in this writer's backlog, regions
still as regions, as Kafka's channel keeps its unsent `FileRecords` and waits for
OP_WRITE: the writer watches a duplicate of the socket's descriptor for writability
(uvloop owns the socket's own descriptor) and goes on with `sendfile` when the consumer
has read. Every response written meanwhile joins the backlog behind it, so the stream
stays in order; the connection reads no new request while a backlog exists (its
`on_blocked` callback), as it reads none while the transport's buffer is above its high
water mark. Before this, whatever the socket did not take at once was read into Python
(`pread`) and queued on the transport: at 1 KiB records that was most of a large
response, the copy sendfile is there to avoid.

Without sendfile (TLS listeners, `socket.sendfile.enable` false) regions are read into
bytes and everything goes through the transport. Regions are released (their descriptors
closed) once sent or when the connection drops.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
from collections.abc import Callable
from typing import Any

from yak.errors import KafkaStorageError
from yak.storage.file_region import FileRegion

HAVE_SENDFILE = hasattr(os, "sendfile")
_IOV_MAX = 1024  # writev's limit on buffers per call (Linux's IOV_MAX)


class ResponseWriter:
    """A connection's response stream. `fd` is its socket's descriptor when regions may go
    out by sendfile, else -1. `on_blocked(True)` when a backlog starts, `(False)` when it
    is drained; `on_error(exc)` when a direct write fails (part of a response may have
    gone: the caller closes the connection)."""

    __slots__ = ("_transport", "_fd", "_on_blocked", "_on_error", "_backlog", "_watch_fd",
                 "deferred")

    def __init__(self, transport: asyncio.Transport, fd: int,
                 on_blocked: Callable[[bool], None],
                 on_error: Callable[[Exception], None]) -> None:
        self._transport = transport
        self._fd = fd if HAVE_SENDFILE else -1
        self._on_blocked = on_blocked
        self._on_error = on_error
        self._backlog: collections.deque[Any] = collections.deque()
        self._watch_fd = -1
        self.deferred = 0  # responses that waited in the backlog (tests, diagnostics)

    @property
    def backlogged(self) -> bool:
        return bool(self._backlog)

    def write(self, buffers: list[Any]) -> None:
        """Write one response's buffers (bytes-like and `FileRegion`s) after everything
        written before."""
        if self._backlog:
            self._backlog.extend(buffers)
            return
        for b in buffers:
            if type(b) is FileRegion:
                break
        else:  # no region: the transport writes it (at once when it can)
            self._transport.writelines(buffers)
            return
        if self._fd < 0:
            self._transport.writelines(_as_bytes(buffers))
            return
        if self._transport.get_write_buffer_size():
            self._defer(buffers)
            return
        try:
            self._send_direct(buffers)
        except (OSError, KafkaStorageError) as e:
            for buf in buffers:
                if type(buf) is FileRegion:
                    buf.release()
            self.discard()
            self._on_error(e)

    def _send_direct(self, buffers: list[Any]) -> None:
        """`_send` for a response that starts on an empty socket queue, in one pass over
        `buffers`: each run of memory buffers in one `writev` as given, each region by
        `sendfile`, no per-buffer view or deque (a follower's fetch answer at RF=3 is one
        such response per append, issue 28). The first short write hands what is left to
        `_send`, which keeps the backlog."""
        fd = self._fd
        run: list[Any] = []
        for i, buf in enumerate(buffers):
            if type(buf) is not FileRegion:
                if len(run) < _IOV_MAX:
                    run.append(buf)
                    continue
                left = _write_run(fd, run)
                run = [buf]
                if left:
                    self._send(collections.deque([*left, *buffers[i:]]))
                    return
                continue
            if run:
                left = _write_run(fd, run)
                run = []
                if left:
                    self._send(collections.deque([*left, *buffers[i:]]))
                    return
            sent = _sendfile_some(fd, buf)
            if sent < buf.size:
                buf.position += sent
                buf.size -= sent
                self._send(collections.deque(buffers[i:]))
                return
            buf.release()
        if run:
            left = _write_run(fd, run)
            if left:
                self._send(collections.deque(left))

    def _send(self, queue: collections.deque[Any]) -> None:
        """Send `queue`'s buffers directly until the socket would block; what is left
        becomes the backlog (or, when called for the backlog, stays in it)."""
        fd = self._fd
        while queue:
            buf = queue[0]
            if type(buf) is FileRegion:
                sent = _sendfile_some(fd, buf)
                if sent < buf.size:
                    buf.position += sent
                    buf.size -= sent
                    break
                queue.popleft()
                buf.release()
                continue
            views = []  # the run of memory buffers up to the next region, in one writev
            while queue and type(queue[0]) is not FileRegion and len(views) < _IOV_MAX:
                views.append(memoryview(queue.popleft()).cast("B"))
            left = _writev_some(fd, views)
            if left:
                queue.extendleft(reversed(left))
                break
        if queue and queue is not self._backlog:
            self._defer(queue)

    def _defer(self, buffers: Any) -> None:
        self._backlog.extend(buffers)
        self.deferred += 1
        if self._watch_fd < 0:
            self._watch_fd = os.dup(self._fd)
            asyncio.get_running_loop().add_writer(self._watch_fd, self._drain)
            self._on_blocked(True)

    def _drain(self) -> None:
        """The socket can take more: go on with the backlog, unless the transport still
        holds bytes written before it (they leave first; uvloop sends them on the same
        writability)."""
        if self._transport.is_closing():
            self.discard()
            return
        if self._transport.get_write_buffer_size():
            return
        try:
            self._send(self._backlog)
        except (OSError, KafkaStorageError) as e:
            self.discard()
            self._on_error(e)
            return
        if not self._backlog:
            self._unwatch()
            self._on_blocked(False)

    def flush_to_transport(self) -> None:
        """Hand the backlog to the transport as bytes (a close that flushes)."""
        if self._backlog:
            with contextlib.suppress(OSError, KafkaStorageError):
                self._transport.writelines(_as_bytes(list(self._backlog)))
            self._backlog.clear()
        self._unwatch()

    def discard(self) -> None:
        """Drop the backlog and stop watching (the connection is gone)."""
        for buf in self._backlog:
            if type(buf) is FileRegion:
                buf.release()
        self._backlog.clear()
        self._unwatch()

    def _unwatch(self) -> None:
        fd, self._watch_fd = self._watch_fd, -1
        if fd >= 0:
            with contextlib.suppress(RuntimeError):  # no running loop: it is closing
                asyncio.get_running_loop().remove_writer(fd)
            os.close(fd)


def _as_bytes(buffers: list[Any]) -> list[Any]:
    """`buffers` with each region read into bytes and released."""
    out = []
    try:
        for buf in buffers:
            out.append(bytes(buf) if type(buf) is FileRegion else buf)
    finally:
        for buf in buffers:
            if type(buf) is FileRegion:
                buf.release()
    return out


def _writev_some(fd: int, views: list[memoryview]) -> list[memoryview]:
    """Write `views` to the non-blocking socket `fd` as far as it takes them; returns
    what it did not take (empty when all went out)."""
    while views:
        try:
            n = os.writev(fd, views)
        except (BlockingIOError, InterruptedError):
            return views
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]
    return views


def _write_run(fd: int, run: list[Any]) -> list[memoryview]:
    """One `writev` of the memory buffers `run`; what it did not take, as byte views
    (empty when all went out: the usual case, with no view built)."""
    try:
        n = os.writev(fd, run)
    except (BlockingIOError, InterruptedError):
        n = 0
    total = 0
    for b in run:
        total += b.nbytes if type(b) is memoryview else len(b)
    if n == total:
        return []
    views = [memoryview(b).cast("B") for b in run]
    while views and n >= len(views[0]):
        n -= len(views[0])
        views.pop(0)
    if n:
        views[0] = views[0][n:]
    return views


def _sendfile_some(fd: int, region: FileRegion) -> int:
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
