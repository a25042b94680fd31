"""Kafka's framing and request header, sans-IO: bytes in, frames and headers out.

Every Kafka message is a 4-byte big-endian size followed by that many bytes. The
`FrameDecoder` is fed whatever the socket delivered and hands back the complete frames,
so the asyncio connection owns the socket and the ordering while this module owns the
byte arithmetic, and tests can split a stream at every position without a socket.

Memory follows the bytes that actually arrived, never the size a peer announces:

- the size is checked (at least `min_size`, by default 8 bytes, the fixed part of a
  request header; at most `socket.request.max.bytes`) before anything is kept for the
  frame; a bad one is reported as a `FrameError` value and the decoder stops, the
  connection then closes. The owner may lower `min_size` while the next frame is not a
  request: after a SaslHandshake v0 the client sends bare SASL tokens, and a PLAIN token
  can be shorter than 8 bytes (Kafka sets no minimum there);
- a frame wholly inside one fed chunk is a zero-copy `memoryview` slice of it (the
  common case: uvloop reads up to 256 KiB at a time);
- a frame spanning chunks keeps views of the received pieces and is joined into one
  buffer of exactly the frame's size when its last byte arrives. Allocating that buffer
  at the announced size up front would let a peer that sends 4 bytes claim 100 MiB
  (tests/broker/test_hostile.py::test_announced_but_unsent_frames_cost_nothing), and
  lazily-committed `mmap` memory costs 20-30x more CPU per MiB than the join (page
  faults on fresh memory; docs/benchmarks/protocol.md).

The caller must not modify a chunk after feeding it (uvloop hands each read over as a
new `bytes`): frames are views of it.

`FrameReceiver` is the same splitting for a reader that lets the socket write into its
buffer (asyncio's `BufferedProtocol`: `get_buffer()`, then `buffer_updated(n)`), which is
what a follower's connection wants: its Fetch responses are up to ~4 MiB, and joining
the pieces of each (a fresh 4 MiB buffer, its pages faulted, every byte copied) was a
fifth of a catch-up's CPU (docs/benchmarks/replication.md). The broker's client
connections use it too (issue 28): a leader's 1 MiB Produce requests span several reads,
and the socket then writes each request once, into the buffer it is handled from,
instead of the event loop copying each read into a new `bytes` and the decoder joining
those. Reads land in one buffer, front to back, and every frame is a read-only view of
it:

- it is never written where a frame was handed out while a view of that frame may be
  alive: once every frame handed out was dropped (the follower appended the response and
  let it go), the next read starts again at its front, so a steady stream of responses,
  large or small, lands in the same warm memory with no allocation and no copy in user
  space;
- a frame that does not fit in the room left moves to the front of this buffer (grown
  if the frame needs it) when nothing holds a view of it, else to one of the last
  `_SPARES` buffers it left that nothing holds any more, or a new one; what moves is the
  frame's part received so far, less than one read when it happens at the first read of
  the frame. (Several spares, not one: a broker's pipelined 64 KiB Produce requests
  waiting for their acks span more than two buffers, and a fresh zeroed 256 KiB buffer
  at every switch cost more than uvloop's per-read copy it replaces;
  benchmarks/broker_receive_bench.py. An owner that lets many frames wait may keep more
  (`spares`, within `spare_bytes`): a broker connection queues up to 16 requests while
  its in-flight window is full, frames leave in arrival order, and with 3 spares the ones
  kept were always the newest, still queued, while the oldest, freed first, had been
  dropped: an RF=3 leader then allocated a ~1 MiB buffer per Produce request, issue 28);
- a frame larger than the chunk size (256 KiB) grows the buffer with the bytes that
  arrived (doubling, from 1 MiB), never to a size a peer only announced; the buffer keeps
  the largest size it needed, until its owner `release()`s it while nothing is pending
  (a connection idle for a while), after which the next read allocates a chunk again.

Whether a view of a buffer is alive is asked of the bytearray itself: one cannot be
resized while a memoryview of it exists (`BufferError`), so growing it by one byte and
back is the test (`_unexported`; the buffers are allocated with a spare byte, so that is
never a reallocation).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TypeAlias

from yak.protocol.primitives import skip_tagged_fields

__all__ = ["MIN_FRAME_SIZE", "FrameDecoder", "FrameError", "FrameReceiver", "RequestHeader", "HeaderError",
           "parse_request_header", "skip_header_tagged_fields", "response_frame_head"]

MIN_FRAME_SIZE = 8
"""api_key (2) + api_version (2) + correlation_id (4): nothing shorter is a request."""

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_RESPONSE_HEAD = struct.Struct(">ii")  # size, correlation id
_RESPONSE_HEAD_V1 = struct.Struct(">iiB")  # + empty tagged fields


@dataclass(frozen=True, slots=True)
class FrameError:
    """A frame size the decoder refuses; the connection closes without answering."""

    size: int
    max_size: int
    min_size: int = MIN_FRAME_SIZE

    def __str__(self) -> str:
        return f"frame size {self.size} outside [{self.min_size}, {self.max_size}]"


class FrameDecoder:
    """Splits a byte stream into frames (without their 4-byte size prefix)."""

    __slots__ = ("max_size", "min_size", "error", "_head", "_parts", "_missing")

    def __init__(self, max_size: int, min_size: int = MIN_FRAME_SIZE) -> None:
        if max_size < MIN_FRAME_SIZE:
            raise ValueError(f"max frame size {max_size} below {MIN_FRAME_SIZE}")
        self.max_size = max_size
        self.min_size = min_size
        """Smallest size accepted; settable between feeds (0 for bare SASL v0 tokens)."""
        self.error: FrameError | None = None
        """Set once a bad size was seen; the decoder then ignores further input."""
        self._head = b""  # partial 4-byte size
        self._parts: list[memoryview] | None = None  # pieces of a frame spanning chunks
        self._missing = 0

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (size prefix included)."""
        held = len(self._head)
        if self._parts is not None:
            held += 4 + sum(len(p) for p in self._parts)
        return held

    def feed(self, data: bytes | memoryview) -> list[memoryview]:
        """The frames `data` completes, in order. On a bad size, the frames before it are
        returned and `error` is set."""
        frames: list[memoryview] = []
        if self.error is not None:
            return frames
        mv = data if type(data) is memoryview else memoryview(data)
        end = len(mv)
        pos = 0
        parts = self._parts
        if parts is not None and self._missing > end:
            # The whole chunk lies inside a large frame's body: just keep it.
            parts.append(mv)
            self._missing -= end
            return frames
        if parts is None and not self._head:
            # Fast path, nothing pending: whole frames one after another.
            max_size = self.max_size
            min_size = self.min_size
            unpack = _SIZE.unpack_from
            while end - pos >= 4:
                (size,) = unpack(mv, pos)
                if size < min_size or size > max_size:
                    self.error = FrameError(size, max_size, min_size)
                    return frames
                start = pos + 4
                if end - start < size:
                    break
                pos = start + size
                frames.append(mv[start:pos])  # zero-copy: wholly inside this chunk
            if pos == end:
                return frames
        self._feed_pieces(mv, pos, end, frames)
        return frames

    def _feed_pieces(self, mv: memoryview, pos: int, end: int,
                     frames: list[memoryview]) -> None:
        """The general case: a size prefix or a frame split across chunks."""
        while pos < end:
            parts = self._parts
            if parts is not None:
                n = min(self._missing, end - pos)
                parts.append(mv[pos : pos + n])
                self._missing -= n
                pos += n
                if not self._missing:
                    self._parts = None
                    frames.append(memoryview(b"".join(parts)))
                continue
            if self._head or end - pos < 4:
                need = 4 - len(self._head)
                self._head += bytes(mv[pos : pos + need])
                pos += min(need, end - pos)
                if len(self._head) < 4:
                    return
                (size,) = _SIZE.unpack(self._head)
                self._head = b""
            else:
                (size,) = _SIZE.unpack_from(mv, pos)
                pos += 4
            if size < self.min_size or size > self.max_size:
                self.error = FrameError(size, self.max_size, self.min_size)
                return
            if end - pos >= size:
                frames.append(mv[pos : pos + size])  # zero-copy: wholly inside this chunk
                pos += size
            else:
                self._parts = []
                self._missing = size


CHUNK_BUFFER = 256 << 10
"""A `FrameReceiver`'s buffer at first: as much as uvloop reads at a time."""
_MIN_READ = 16 << 10  # less room than this at the chunk buffer's end: make room first
_FRAME_BUFFER_START = 1 << 20  # a large frame's first room (then doubled as bytes arrive)
_SPARES = 3  # buffers left while still held, kept for reuse once nothing holds them


def _buffer(size: int) -> bytearray:
    """A bytearray of `size` with one spare byte allocated (see `_unexported`)."""
    buf = bytearray(size + 1)
    buf.pop()
    return buf


def _unexported(buf: bytearray) -> bool:
    """No memoryview of `buf` is alive: only then may it be resized, and so written over."""
    try:
        buf.append(0)
    except BufferError:
        return False
    buf.pop()
    return True


class FrameReceiver:
    """Splits a byte stream into frames, the socket writing into this object's buffer
    (asyncio's `BufferedProtocol`): `get_buffer()` is where the next read goes,
    `buffer_updated(n)` the frames those `n` bytes completed. Frames are read-only views,
    valid as long as the caller keeps them (see the module's docstring)."""

    __slots__ = ("max_size", "min_size", "error", "_buf", "_start", "_end", "_spares",
                 "_max_spares", "_spare_bytes",
                 "_chunk_size", "_scratch")

    def __init__(self, max_size: int, min_size: int = MIN_FRAME_SIZE,
                 chunk_size: int = CHUNK_BUFFER, spares: int = _SPARES,
                 spare_bytes: int | None = None) -> None:
        if max_size < MIN_FRAME_SIZE:
            raise ValueError(f"max frame size {max_size} below {MIN_FRAME_SIZE}")
        if chunk_size < 2 * _MIN_READ:
            raise ValueError(f"chunk buffer {chunk_size} below {2 * _MIN_READ}")
        self.max_size = max_size
        self.min_size = min_size
        self.error: FrameError | None = None
        self._chunk_size = chunk_size
        self._buf = _buffer(chunk_size)
        self._start = 0  # first byte not yet part of a frame handed out
        self._end = 0  # end of the bytes received
        self._spares: list[bytearray] = []  # buffers left, oldest first, reused once unexported
        self._max_spares = spares  # how many are kept, and their bytes at most (None: any)
        self._spare_bytes = spare_bytes
        self._scratch: bytearray | None = None  # where reads go once `error` is set

    @property
    def buffered(self) -> int:
        """Bytes received for an incomplete frame (size prefix included)."""
        return self._end - self._start

    def release(self) -> bool:
        """Let go of the buffers while no frame is partly received (a connection idle
        for a while: a broker's thousands of idle client connections would otherwise
        keep a chunk buffer each); the next `get_buffer` allocates again. Frames handed
        out stay valid (their views keep their buffer alive). False when bytes of a
        frame are pending, which stay where they are."""
        if self._end != self._start:
            return False
        self._buf = _buffer(0)
        self._start = self._end = 0
        self._spares = []
        return True

    def get_buffer(self) -> memoryview:
        """Where the socket's next read goes (never empty)."""
        if self.error is not None:
            if self._scratch is None:
                self._scratch = bytearray(_MIN_READ)
            return memoryview(self._scratch)
        buf = self._buf
        start, end = self._start, self._end
        need = _MIN_READ
        if start == end:
            # Every frame handed out was dropped: start again at the front (asked only
            # once a read's worth was used, so small answers do not pay the question).
            if start >= _MIN_READ and _unexported(buf):
                self._start = self._end = start = end = 0
        elif end - start >= 4:
            (size,) = _SIZE.unpack_from(buf, start)
            need = 4 + size  # (a bad size never gets here: buffer_updated stopped)
        if start + need > len(buf) or len(buf) - end < _MIN_READ:
            buf = self._make_room(need)
        return memoryview(buf)[self._end:]

    def buffer_updated(self, n: int) -> list[memoryview]:
        """The frames completed by the `n` bytes just written into `get_buffer()`'s
        buffer, in order. On a bad size, the frames before it are returned and `error`
        is set."""
        if self.error is not None:
            return []
        self._end += n
        buf = self._buf
        pos, end = self._start, self._end
        frames: list[memoryview] = []
        view: memoryview | None = None
        max_size, min_size = self.max_size, self.min_size
        unpack = _SIZE.unpack_from
        while end - pos >= 4:
            (size,) = unpack(buf, pos)
            if size < min_size or size > max_size:
                self.error = FrameError(size, max_size, min_size)
                break
            start = pos + 4
            if end - start < size:
                break
            pos = start + size
            if view is None:
                view = memoryview(buf).toreadonly()
            frames.append(view[start:pos])
        self._start = pos
        return frames

    def _make_room(self, need: int) -> bytearray:
        """A buffer with the pending bytes (less than one frame) at its front and room
        for the rest of that frame, or for one read: this one if nothing holds a view of
        it, else a spare or a new one. For a frame larger than the chunk size, the room
        grows with what arrived (to twice that, at least 1 MiB), never straight to the
        size a peer announced."""
        buf = self._buf
        start, end = self._start, self._end
        pending = end - start
        if need <= self._chunk_size:
            want = self._chunk_size
        else:  # (+ one read's room after the frame: a transport asking for a buffer
            # while the frame is still held then gets that, not a switch of buffers)
            want = _MIN_READ + max(pending,
                                   min(need, max(_FRAME_BUFFER_START, 2 * pending)))
        if not len(buf):  # released (idle): a fresh buffer, nothing to keep
            buf = self._buf = _buffer(want)
        elif _unexported(buf):
            if start:
                buf[:pending] = buf[start:end]
            if len(buf) < want:
                buf.extend(bytes(want - len(buf)))
        else:
            spares = self._spares
            for i, spare in enumerate(spares):
                if len(spare) >= want and _unexported(spare):
                    new = spares.pop(i)
                    break
            else:
                new = _buffer(max(want, self._chunk_size))
            new[:pending] = memoryview(buf)[start:end]
            spares.append(buf)
            if len(spares) > self._max_spares or (
                    self._spare_bytes is not None
                    and sum(len(b) for b in spares) > self._spare_bytes):
                del spares[0]  # (freed once the frames in it are)
            self._buf = buf = new
        self._start, self._end = 0, pending
        return buf


class HeaderError(ValueError):
    """A request header that cannot be parsed: the connection closes."""


RequestHeader: TypeAlias = tuple[int, int, int, str | None, int]
"""(api_key, api_version, correlation_id, client_id, size): `size` is the bytes of the
header v1 part, up to and including client_id; a flexible request (header v2) continues
with tagged fields (see `skip_header_tagged_fields`). A plain tuple, not a NamedTuple:
building one of those costs more than the rest of the parse, once per request."""


def parse_request_header(frame: memoryview) -> RequestHeader:
    """Request header v1 fields. Whether tagged fields follow depends on the API and
    version (the registry knows), so the caller skips them once it has looked those up."""
    if len(frame) < 10:
        raise HeaderError("request header truncated")
    api_key, api_version, correlation_id, cid_len = _HEADER.unpack_from(frame, 0)
    if cid_len < 0:
        return api_key, api_version, correlation_id, None, 10
    end = 10 + cid_len
    if end > len(frame):
        raise HeaderError("client id overruns the frame")
    # Kafka decodes client ids leniently too: a bad byte must not cost the connection.
    return api_key, api_version, correlation_id, str(frame[10:end], "utf-8", "replace"), end


def skip_header_tagged_fields(frame: memoryview, pos: int) -> int:
    """Position after a request header v2's tagged fields (bounded: see primitives)."""
    return skip_tagged_fields(frame, pos, len(frame), HeaderError)


def response_frame_head(body_size: int, correlation_id: int, flexible_header: bool) -> bytes:
    """The 4-byte size and the response header that precede a response body of
    `body_size` bytes: header v0 is the correlation id, v1 adds an empty tagged-field
    section (which v1 a response uses is the API's, see `kio_compat`)."""
    if flexible_header:
        return _RESPONSE_HEAD_V1.pack(body_size + 5, correlation_id, 0)
    return _RESPONSE_HEAD.pack(body_size + 4, correlation_id)
