"""`FrameReceiver` (framing for a reader the socket writes into) with bytes alone: the
frames of any split of a stream, frames that stay intact while held however much arrives
after them, the buffer reused from its front only once nothing holds a view of it, and
memory that follows the bytes received, never the size announced."""

from __future__ import annotations

import gc
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yak.protocol import framing
from yak.protocol.framing import CHUNK_BUFFER, FrameError, FrameReceiver

MAX = 64 << 20


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _deliver(rx: FrameReceiver, data: bytes, read_size: int | list[int]) -> list[memoryview]:
    """What a transport does: read into `get_buffer()`, at most `read_size` at a time."""
    frames: list[memoryview] = []
    pos = 0
    i = 0
    while pos < len(data):
        buf = rx.get_buffer()
        assert len(buf) > 0
        limit = read_size if isinstance(read_size, int) else read_size[i % len(read_size)]
        i += 1
        n = min(len(buf), limit, len(data) - pos)
        buf[:n] = data[pos : pos + n]
        del buf  # (a transport drops its view before the next read)
        pos += n
        frames.extend(rx.buffer_updated(n))
        if rx.error is not None:
            break
    return frames


def _payload(i: int, n: int) -> bytes:
    return bytes((i + j) & 0xFF for j in range(min(n, 251))) * (n // 251) + bytes(n % 251)


PAYLOADS = [_payload(i, n) for i, n in enumerate(
    [8, 100, 4096, 13, 70_000, 300_000, 8, 5 << 20, 2 << 20, 255, 9 << 20, 8, 200_000])]


@pytest.mark.parametrize("read_size", [1 << 20, 256 << 10, 65536, 4093, [7, 65536, 1]])
def test_frames_held_by_the_caller_stay_intact(read_size: int | list[int]) -> None:
    """Every frame kept while everything after it arrives: nothing handed out is ever
    written over (the buffer is replaced, not reused, while views of it live)."""
    # (reads of one byte are slow: only the small and mid-sized frames then)
    payloads = PAYLOADS[:7] if isinstance(read_size, list) else PAYLOADS
    rx = FrameReceiver(MAX, min_size=4)
    frames = _deliver(rx, b"".join(_frame(p) for p in payloads), read_size)
    assert [bytes(f) for f in frames] == payloads
    assert all(f.readonly for f in frames)
    assert rx.buffered == 0 and rx.error is None


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(4, 600_000), min_size=1, max_size=8),
       reads=st.lists(st.integers(1, 700_000), min_size=1, max_size=8),
       keep=st.booleans())
def test_any_split_gives_the_same_frames(sizes: list[int], reads: list[int],
                                         keep: bool) -> None:
    payloads = [_payload(i, n) for i, n in enumerate(sizes)]
    stream = b"".join(_frame(p) for p in payloads)
    rx = FrameReceiver(MAX, min_size=4)
    got: list[bytes] = []
    held: list[memoryview] = []
    pos = 0
    i = 0
    while pos < len(stream):
        buf = rx.get_buffer()
        n = min(len(buf), reads[i % len(reads)], len(stream) - pos)
        i += 1
        buf[:n] = stream[pos : pos + n]
        del buf
        pos += n
        for f in rx.buffer_updated(n):
            got.append(bytes(f))
            if keep:
                held.append(f)
    assert got == payloads
    assert [bytes(f) for f in held] == (payloads if keep else [])
    assert rx.buffered == 0


def test_a_large_frame_buffer_is_reused_once_dropped() -> None:
    """The follower's steady state: each ~4 MiB response received into the same buffer,
    from its front, so no allocation and no copy per response."""
    rx = FrameReceiver(MAX, min_size=4)
    big = [_payload(i, 4 << 20) for i in range(3)]
    (f1,) = _deliver(rx, _frame(big[0]), 256 << 10)
    owner = f1.obj
    assert bytes(f1) == big[0]
    del f1
    (f2,) = _deliver(rx, _frame(big[1]), 256 << 10)
    assert f2.obj is owner  # nothing held the first: its buffer took the second
    assert bytes(f2) == big[1]
    assert f2.obj[:4] == struct.pack(">i", len(big[1]))  # at the front: nothing moved
    # Held while the next arrives: the next goes to a new buffer, the held one intact.
    (f3,) = _deliver(rx, _frame(big[2]), 256 << 10)
    assert f3.obj is not owner
    assert bytes(f2) == big[1] and bytes(f3) == big[2]


def test_the_buffer_is_reused_once_its_frames_are_dropped() -> None:
    rx = FrameReceiver(MAX, min_size=4)
    small = _frame(b"x" * 1000)
    first = _deliver(rx, small, 65536)
    owner = first[0].obj
    del first
    # Each frame dropped before the next arrives: every one lands at the front.
    for _ in range(2 * CHUNK_BUFFER // len(small)):
        assert [bytes(f) for f in _deliver(rx, small, 65536)] == [b"x" * 1000]
    (f,) = _deliver(rx, small, 65536)
    assert f.obj is owner
    # Held frames: the reads go on after them, and past the buffer's end to another one.
    held = [f]
    for _ in range(2 * CHUNK_BUFFER // len(small)):
        held.extend(_deliver(rx, small, 65536))
    assert {bytes(h) for h in held} == {b"x" * 1000}
    assert len({id(h.obj) for h in held}) >= 2


def test_memory_follows_the_bytes_received_not_the_size_announced() -> None:
    """A peer announcing 60 MiB and sending a little costs about what it sent (doubling
    from 1 MiB), not 60 MiB."""
    rx = FrameReceiver(MAX, min_size=4)
    head = struct.pack(">i", 60 << 20) + b"y" * 300_000
    assert _deliver(rx, head, 65536) == []
    assert rx.buffered == len(head)
    buf = rx.get_buffer()
    assert len(buf) <= (1 << 20) + (16 << 10)
    del buf
    gc.collect()
    assert len(rx._buf) <= (1 << 20) + (16 << 10)  # (+ one read of room)


@pytest.mark.parametrize("size", [3, -1, MAX + 1])
def test_bad_size_is_an_error_value_and_stops_the_receiver(size: int) -> None:
    rx = FrameReceiver(MAX, min_size=4)
    frames = _deliver(rx, _frame(b"ok-frame") + struct.pack(">i", size) + b"z" * 64, 1 << 20)
    assert [bytes(f) for f in frames] == [b"ok-frame"]
    assert rx.error == FrameError(size, MAX, 4)
    # The transport may still read before it closes: a buffer, and nothing comes out.
    buf = rx.get_buffer()
    assert len(buf) > 0
    buf[:4] = b"abcd"
    del buf
    assert rx.buffer_updated(4) == []


def test_a_size_prefix_split_at_every_position() -> None:
    payloads = [b"a" * 8, b"b" * 300_000, b"c" * 9]
    stream = b"".join(_frame(p) for p in payloads)
    for cut in range(0, 12):
        rx = FrameReceiver(MAX, min_size=4)
        got = _deliver(rx, stream, [cut + 1, 1 << 20])
        assert [bytes(f) for f in got] == payloads, cut


def test_chunk_buffer_below_two_reads_refused() -> None:
    with pytest.raises(ValueError):
        FrameReceiver(MAX, chunk_size=1024)
    with pytest.raises(ValueError):
        FrameReceiver(4)


def test_release_while_idle_keeps_held_frames_and_reads_on() -> None:
    """An idle connection lets its buffers go (`release`): frames still held stay
    intact, a partly received frame refuses it, and the next read allocates a chunk."""
    rx = FrameReceiver(MAX, min_size=4)
    held = _deliver(rx, _frame(PAYLOADS[5]) + _frame(PAYLOADS[1]), 65536)
    partial = _frame(PAYLOADS[4])[:1000]
    assert _deliver(rx, partial, 65536) == []
    assert rx.release() is False  # a frame's bytes pending: they stay
    rest = _deliver(rx, _frame(PAYLOADS[4])[1000:], 65536)
    assert rx.release() is True
    assert len(rx._buf) == 0 and rx._spares == []
    later = _deliver(rx, _frame(PAYLOADS[2]) + _frame(PAYLOADS[7]), 65536)
    assert len(rx._buf) >= CHUNK_BUFFER
    assert [bytes(f) for f in held + rest + later] == [
        PAYLOADS[5], PAYLOADS[1], PAYLOADS[4], PAYLOADS[2], PAYLOADS[7]]


def test_min_size_lowered_between_reads_for_bare_tokens() -> None:
    """The broker's SASL v0 switch: after the handshake its receiver takes frames shorter
    than a request header (a bare PLAIN token) until the exchange is over."""
    rx = FrameReceiver(MAX)
    assert [bytes(f) for f in _deliver(rx, _frame(b"handshk!"), 65536)] == [b"handshk!"]
    rx.min_size = 0
    assert [bytes(f) for f in _deliver(rx, _frame(b"\0a\0b"), 65536)] == [b"\0a\0b"]
    rx.min_size = 8
    assert _deliver(rx, _frame(b"tiny"), 65536) == []
    assert rx.error == FrameError(4, MAX, 8)


def test_a_rolling_window_of_held_frames_reuses_the_buffers_it_left(monkeypatch) -> None:
    """Pipelined requests held while the next ones arrive (8 of 64 KiB: more than two
    buffers' worth): once the oldest are dropped, their buffers are reused, so a long
    stream cycles through a few buffers instead of allocating one per switch; and no held
    frame is ever written over."""
    allocated: list[int] = []
    allocate = framing._buffer

    def counted(size: int) -> bytearray:
        allocated.append(size)
        return allocate(size)

    monkeypatch.setattr(framing, "_buffer", counted)
    rx = FrameReceiver(MAX, min_size=4)
    held: list[tuple[memoryview, bytes]] = []
    for i in range(200):
        payload = _payload(i, 65536)
        for f in _deliver(rx, _frame(payload), 65536):
            held.append((f, payload))
        if len(held) > 8:
            f, p = held.pop(0)
            assert bytes(f) == p
            del f
    assert all(bytes(f) == p for f, p in held)
    assert len(allocated) <= 5, allocated  # (200 frames of 64 KiB: ~50 buffer switches)
