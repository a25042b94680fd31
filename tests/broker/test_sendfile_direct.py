"""The response writer's direct pass (yak/broker/sendfile.py `_send_direct`, issue 28): a
response starting on an empty socket goes out as one writev per run of memory buffers and
one sendfile per region. Over a real socket pair on uvloop, with a reader that waits and
reads in small bites, the socket stops part-way through a memory run (before a region,
between regions, after the last) and part-way through a region, with memory buffers of
every kind (bytes, bytearray, a memoryview whose items are 4 bytes wide): the bytes arrive
in write order and every region's descriptor is closed."""

from __future__ import annotations

import array
import asyncio
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import uvloop

from yak.broker.sendfile import HAVE_SENDFILE, ResponseWriter
from yak.storage.file_region import FileRegion

pytestmark = pytest.mark.skipif(not HAVE_SENDFILE, reason="no os.sendfile")


class _Sink(asyncio.Protocol):
    def connection_made(self, transport: Any) -> None:
        self.transport = transport


def _reader(sock: socket.socket, total: int, out: list[bytes]) -> None:
    time.sleep(0.2)
    got = 0
    while got < total:
        chunk = sock.recv(9_000)
        if not chunk:
            break
        out.append(chunk)
        got += len(chunk)


def _as_bytes(buf: Any, data: bytes) -> bytes:
    if type(buf) is FileRegion:
        return data[buf.position:buf.position + buf.size]
    return memoryview(buf).cast("B").tobytes()


@pytest.mark.parametrize("shape", ["memory-first", "between-regions", "memory-last", "region"])
def test_direct_pass_keeps_order_when_the_socket_fills(tmp_path: Path, shape: str) -> None:
    data = os.urandom(4 << 20)
    path = tmp_path / "segment"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    big = os.urandom(3 << 20)
    wide = memoryview(array.array("i", range(300_000)))  # itemsize 4: len() != bytes

    def region(pos: int, size: int) -> FileRegion:
        return FileRegion(os.dup(fd), pos, size, 0)

    first: list[Any] = {
        "memory-first": [b"head", bytearray(big), wide, region(0, 1 << 20), b"tail"],
        "between-regions": [b"h", region(0, 4096), bytearray(big), wide,
                            region(1 << 20, 1 << 20), b"t"],
        "memory-last": [b"h", region(0, 100), bytearray(big), wide],
        "region": [b"h", region(0, 4 << 20), b"t"],
    }[shape]
    writes = [first, [b"second response"], [b"h3", region(5, 1000), b"t3"]]
    expected = b"".join(_as_bytes(b, data) for w in writes for b in w)
    regions = [b for w in writes for b in w if type(b) is FileRegion]

    async def body() -> ResponseWriter:
        a, b = socket.socketpair()
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32_768)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32_768)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(_Sink, sock=a)
        writer = ResponseWriter(transport, a.fileno(), lambda _b: None,
                                lambda e: pytest.fail(f"write failed: {e!r}"))
        out: list[bytes] = []
        reader = threading.Thread(target=_reader, args=(b, len(expected), out))
        reader.start()
        for w in writes:
            writer.write(w)
            await asyncio.sleep(0)
        deadline = loop.time() + 30
        while writer.backlogged and loop.time() < deadline:
            await asyncio.sleep(0.01)
        await loop.run_in_executor(None, reader.join, 30)
        transport.close()
        b.close()
        assert b"".join(out) == expected
        return writer

    try:
        writer = uvloop.run(body())
    finally:
        os.close(fd)
    assert writer.deferred >= 1, "the socket never filled: the short write was not exercised"
    assert all(r.fd == -1 for r in regions), "a region's descriptor was left open"


def test_direct_pass_on_an_open_socket_writes_everything_at_once(tmp_path: Path) -> None:
    """A small response on an idle socket: nothing deferred, the bytes in order."""
    data = os.urandom(64 << 10)
    path = tmp_path / "segment"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    r1 = FileRegion(os.dup(fd), 10, 30_000, 0)
    r2 = FileRegion(os.dup(fd), 40_000, 20_000, 0)
    response = [b"size", bytearray(b"head"), r1, b"mid", r2, bytearray(b"tags")]
    expected = b"".join(_as_bytes(b, data) for b in response)

    async def body() -> tuple[ResponseWriter, bytes]:
        a, b = socket.socketpair()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(_Sink, sock=a)
        writer = ResponseWriter(transport, a.fileno(), lambda _b: None,
                                lambda e: pytest.fail(f"write failed: {e!r}"))
        writer.write(response)
        got = b""
        b.settimeout(5)
        while len(got) < len(expected):
            got += b.recv(1 << 20)
        transport.close()
        b.close()
        return writer, got

    try:
        writer, got = uvloop.run(body())
    finally:
        os.close(fd)
    assert got == expected
    assert writer.deferred == 0 and r1.fd == -1 and r2.fd == -1
