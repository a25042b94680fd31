"""The fault-injection TCP proxy: forwards both ways, cuts (silently or by reset), heals,
delays; checked with an echo server and with etcd through it."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from yak.cluster.etcd import EtcdClient, EtcdUnavailable
from yak.devcluster.local import LocalEtcd
from yak.devcluster.netproxy import ThreadedNetProxy

from .conftest import run


@pytest.fixture
def echo() -> Iterator[int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(2)
    srv.close()


def roundtrip(port: int, payload: bytes, timeout: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def test_forward_cut_heal_delay(echo: int) -> None:
    with ThreadedNetProxy(("127.0.0.1", echo)) as p:
        big = bytes(range(256)) * 4096  # 1 MiB, several chunks
        assert roundtrip(p.port, big) == big

        # a long-lived connection through a silent cut: nothing arrives, nothing errors
        s = socket.create_connection(("127.0.0.1", p.port), timeout=2)
        s.sendall(b"before")
        assert s.recv(100) == b"before"
        p.cut("drop")
        s.sendall(b"lost")
        s.settimeout(0.5)
        with pytest.raises(TimeoutError):
            s.recv(100)
        with pytest.raises(TimeoutError):
            roundtrip(p.port, b"new connection during the cut", timeout=0.5)
        # healing closes the streams that lost bytes; fresh connections work again
        p.heal()
        s.settimeout(2)
        assert s.recv(100) == b""  # closed by the proxy
        s.close()
        assert roundtrip(p.port, b"after heal") == b"after heal"

        # reset: connections are refused/closed at once (the peer sees an error, not silence)
        p.cut("reset")
        t0 = time.monotonic()
        # closed (FIN), or reset when the close found our byte unread
        with contextlib.suppress(ConnectionResetError):
            assert roundtrip(p.port, b"x") == b""
        assert time.monotonic() - t0 < 1
        p.heal()

        p.delay(300)
        t0 = time.monotonic()
        assert roundtrip(p.port, b"slow") == b"slow"
        assert time.monotonic() - t0 >= 0.55  # 300 ms each way
        p.delay(0)


def test_etcd_through_a_cut_link(etcd: LocalEtcd) -> None:
    """The client sees a cut link as unavailability within its bound, and recovers."""
    port = etcd.client_ports[0]
    with ThreadedNetProxy(("127.0.0.1", port)) as p:
        async def body() -> None:
            async with EtcdClient([f"127.0.0.1:{p.port}"], timeout=1.0) as c:
                await c.put("/proxied", "1")
                p.cut("drop")
                t0 = time.monotonic()
                with pytest.raises(EtcdUnavailable):
                    await c.get("/proxied")
                assert time.monotonic() - t0 < 2.5
                p.heal()
                assert (await c.get("/proxied")).value == b"1"  # type: ignore[union-attr]

        run(body())
