"""yak.client's Connection refuses a response frame size it must not trust.

The peer is a raw socket server in a thread (this tests the client, not the broker): it reads
one request frame and answers with a size prefix only. A size above the connection's limit,
negative or too small to hold a correlation id is an error naming the broker, raised at once
(no allocation of the announced size, no wait for bytes that never come), and the connection
is closed.
"""

from __future__ import annotations

import datetime
import io
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i32Timedelta

from yak.client.connection import MAX_RESPONSE_BYTES, BrokerConnectionError, Connection


class FakeBroker:
    """Accepts one connection, reads one request frame, writes `reply`, keeps the socket."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(10)
        conn, _ = self.listener.accept()
        self.conns.append(conn)
        conn.settimeout(10)
        (n,) = struct.unpack(">i", self._read(conn, 4))
        self._read(conn, n)
        conn.sendall(self.reply)

    @staticmethod
    def _read(conn: socket.socket, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = conn.recv(n - len(out))
            if not chunk:
                raise ConnectionError("client went away")
            out += chunk
        return out

    def close(self) -> None:
        for c in self.conns:
            c.close()
        self.listener.close()


@pytest.fixture
def fake_broker() -> Iterator[type[FakeBroker]]:
    made: list[FakeBroker] = []

    def make(reply: bytes) -> FakeBroker:
        b = FakeBroker(reply)
        made.append(b)
        return b

    yield make  # type: ignore[misc]
    for b in made:
        b.close()


def _api_versions(conn: Connection) -> ApiVersionsResponse:
    req = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    return conn.send(req, ApiVersionsResponse)


@pytest.mark.parametrize("size", [MAX_RESPONSE_BYTES + 1, 2**31 - 1, -1, -(2**31), 0, 3])
def test_untrusted_response_size_is_refused(fake_broker, size):
    broker = fake_broker(struct.pack(">i", size))
    conn = Connection("127.0.0.1", broker.port, timeout_s=10)
    t0 = time.monotonic()
    with pytest.raises(BrokerConnectionError) as e:
        _api_versions(conn)
    assert time.monotonic() - t0 < 5  # refused on the prefix, not after a read timeout
    assert str(e.value) == (
        f"broker 127.0.0.1:{broker.port} sent a response frame of {size} bytes "
        f"(the limit is 4..{MAX_RESPONSE_BYTES}): connection closed")
    assert e.value.retriable  # like any lost connection: a new one may be opened
    with pytest.raises(OSError):  # the stream is out of sync: the socket is gone
        conn._sock.send(b"x")


def _response_frame() -> bytes:
    """A real ApiVersions v3 response to correlation id 1, as a frame (size prefix + bytes)."""
    from kio.schema.api_versions.v3.response import ApiVersion
    from kio.static.primitive import i16, i32

    header_cls = ApiVersionsResponse.__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(correlation_id=i32(1)))
    entity_writer(ApiVersionsResponse)(out, ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=(ApiVersion(api_key=i16(18), min_version=i16(0), max_version=i16(3)),),
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
    ))
    body = out.getvalue()
    return struct.pack(">i", len(body)) + body


def test_limit_is_per_connection(fake_broker):
    """A caller can set the limit: a frame of exactly the limit is read, one byte more not."""
    frame = _response_frame()
    size = len(frame) - 4
    broker = fake_broker(frame)
    conn = Connection("127.0.0.1", broker.port, timeout_s=10, max_response_bytes=size)
    assert [k.api_key for k in _api_versions(conn).api_keys] == [18]
    conn.close()

    broker = fake_broker(frame)
    conn = Connection("127.0.0.1", broker.port, timeout_s=10, max_response_bytes=size - 1)
    with pytest.raises(BrokerConnectionError,
                       match=f"frame of {size} bytes .the limit is 4..{size - 1}."):
        _api_versions(conn)


def test_inflated_array_count_is_refused_before_decoding(fake_broker):
    """A response whose ApiVersions array claims 2**31 entries in a 9-byte body is refused by
    the guard (yak.protocol.guard, named in the error) before kio decodes anything, and the
    connection is closed."""
    body = (struct.pack(">i", 1)            # correlation id (ApiVersions: header v0)
            + struct.pack(">h", 0)          # error code
            + bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x07]))  # compact array length 2**31 - 1
    broker = fake_broker(struct.pack(">i", len(body)) + body)
    conn = Connection("127.0.0.1", broker.port, timeout_s=10)
    t0 = time.monotonic()
    with pytest.raises(BrokerConnectionError, match="malformed ApiVersionsResponse: array of 2147483646 in 0 bytes"):
        _api_versions(conn)
    assert time.monotonic() - t0 < 5
    with pytest.raises(OSError):
        conn._sock.send(b"x")
