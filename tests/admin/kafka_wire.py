"""One request/response over a socket, for the admin APIs confluent-kafka does not expose
(DeleteTopics by topic id, DescribeLogDirs). kio encodes and decodes."""

from __future__ import annotations

import socket
import struct
from typing import Any

from yak.protocol import kio_compat


def call(bootstrap: str, request: Any, timeout: float = 10.0) -> Any:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(kio_compat.encode_request(request, 1))
        (size,) = struct.unpack(">i", _recv(sock, 4))
        cid, response = kio_compat.decode_response(
            int(request.__api_key__), int(request.__version__), _recv(sock, size)
        )
        assert cid == 1
        return response


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)
