"""Where a TLS receive path spends its CPU, record by record (issue 13, SASL_SSL throughput).

librdkafka writes a produced batch in many small TLS records (about one per 1 KiB message
value), and the broker has to decrypt each. This bench separates the costs, all measured
as CPU time of the receiving process (the sender is another process), per MiB received:

1. `openssl`: `SSLObject.read` alone over memory BIOs, for records of the sizes given
   (OpenSSL's own per-record and per-byte cost, what no Python code can avoid);
2. receivers on a real loopback socket, fed by a sender process that writes TLS records of
   `--record` bytes (or plaintext) carrying Kafka-sized frames, each receiver cutting the
   stream into frames with Yak's `FrameDecoder` like the broker's connection:
   - `plain`        uvloop, asyncio.Protocol, no TLS (the SASL_PLAINTEXT path);
   - `uvloop-tls`   uvloop's SSL transport, asyncio.Protocol (Yak's SASL_SSL path today:
                    one `SSLObject.read` per record, the records joined per socket read);
   - `uvloop-tls-buffered` the same with asyncio.BufferedProtocol (uvloop decrypts straight
                    into the protocol's buffer: no bytes object per record, no join);
   - `sslsocket`    a non-blocking `ssl.SSLSocket` read from the loop's reader callback,
                    `recv_into` a large buffer until it would block (OpenSSL reads the
                    socket itself: no memory BIO copies).

    .venv/bin/python benchmarks/tls_receive_bench.py --mib 200 --record 1800 --frame 16384

Compare the rows of one run; the machine is shared and noisy, so this reports CPU time,
not wall-clock rates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trustme
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import contextlib

from yak.protocol.framing import FrameDecoder  # noqa: E402

MIB = 1 << 20


def certs(d: Path) -> tuple[Path, Path]:
    ca = trustme.CA()
    c = ca.issue_cert("localhost", "127.0.0.1")
    (d / "key.pem").write_bytes(c.private_key_pem.bytes()
                                + b"".join(x.bytes() for x in c.cert_chain_pems))
    (d / "ca.pem").write_bytes(ca.cert_pem.bytes())
    return d / "key.pem", d / "ca.pem"


# ------------------------------------------------------------------ 1. OpenSSL alone


def openssl_only(key: Path, ca: Path, record: int, total: int) -> dict[str, float]:
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(key)
    cctx = ssl.create_default_context(cafile=str(ca))
    si, so, ci, co = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    s = sctx.wrap_bio(si, so, server_side=True)
    c = cctx.wrap_bio(ci, co, server_hostname="127.0.0.1")
    for _ in range(10):
        for o in (c, s):
            with contextlib.suppress(ssl.SSLWantReadError):
                o.do_handshake()
        if co.pending:
            si.write(co.read())
        if so.pending:
            ci.write(so.read())
    n = total // record
    payload = b"x" * record
    for _ in range(n):
        c.write(payload)
    si.write(co.read())
    raw = s._sslobj  # the C object: no Python frame per call
    t0 = time.process_time()
    calls = 0
    while True:
        try:
            raw.read(262144)
        except ssl.SSLWantReadError:
            break
        calls += 1
    cpu = time.process_time() - t0
    return {"records": calls, "cpu_ms_per_mib": cpu * 1e3 / (n * record / MIB),
            "us_per_record": cpu * 1e6 / calls, "cipher": s.cipher()[0]}  # type: ignore[dict-item]


# ------------------------------------------------------------------ 2. receivers


class Counter:
    def __init__(self, total: int, done: asyncio.Future[None]) -> None:
        self.decoder = FrameDecoder(64 * MIB)
        self.left = total
        self.frames = 0
        self.done = done

    def feed(self, data: bytes | memoryview) -> None:
        frames = self.decoder.feed(data)
        self.frames += len(frames)
        self.left -= len(data)
        if self.left <= 0 and not self.done.done():
            self.done.set_result(None)


class PlainProtocol(asyncio.Protocol):
    def __init__(self, counter: Counter) -> None:
        self.counter = counter

    def data_received(self, data: bytes) -> None:
        self.counter.feed(data)


class ArenaBufferedProtocol(asyncio.BufferedProtocol):
    """Hands out the unused tail of a 1 MiB arena; frames stay views of filled regions,
    which are never written again (a new arena when the tail is short)."""

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self.arena = memoryview(bytearray(MIB))
        self.pos = 0

    def get_buffer(self, sizehint: int) -> memoryview:
        if len(self.arena) - self.pos < 65536:
            self.arena = memoryview(bytearray(MIB))
            self.pos = 0
        return self.arena[self.pos:]

    def buffer_updated(self, nbytes: int) -> None:
        chunk = self.arena[self.pos:self.pos + nbytes]
        self.pos += nbytes
        self.counter.feed(chunk)


async def receive(mode: str, key: Path, ca: Path, total: int, sender: list[str]) -> dict:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    counter = Counter(total, done)
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(key)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    port = lsock.getsockname()[1]
    tls = mode != "plain"
    proc = subprocess.Popen([*sender, str(port), "1" if tls else "0"])
    t0 = time.process_time()
    if mode == "sslsocket":
        lsock.setblocking(True)
        conn, _ = lsock.accept()
        ssock = sctx.wrap_socket(conn, server_side=True)  # blocking handshake
        ssock.setblocking(False)
        t0 = time.process_time()
        arena = memoryview(bytearray(MIB))
        pos = 0

        def readable() -> None:
            nonlocal arena, pos
            while True:
                if len(arena) - pos < 65536:
                    arena, pos = memoryview(bytearray(MIB)), 0
                try:
                    k = ssock.recv_into(arena[pos:])
                except (ssl.SSLWantReadError, BlockingIOError):
                    return
                if not k:
                    loop.remove_reader(ssock.fileno())
                    return
                chunk = arena[pos:pos + k]
                pos += k
                counter.feed(chunk)
                if done.done():
                    loop.remove_reader(ssock.fileno())
                    return

        loop.add_reader(ssock.fileno(), readable)
        await done
        cpu = time.process_time() - t0
        ssock.close()
    else:
        proto_cls = ArenaBufferedProtocol if mode.endswith("buffered") else PlainProtocol
        server = await loop.create_server(lambda: proto_cls(counter), sock=lsock,
                                          ssl=sctx if tls else None)
        await done
        cpu = time.process_time() - t0
        server.close()
    proc.wait(30)
    return {"mode": mode, "frames": counter.frames,
            "cpu_ms_per_mib": round(cpu * 1e3 / (total / MIB), 2)}


def stream_total(mib: int, frame: int) -> int:
    """Bytes the sender sends: whole 4 MiB blocks of frames, at least `mib` MiB."""
    block = frame * max(1, (4 * MIB) // frame)
    return -(-mib * MIB // block) * block


def send(port: int, tls: bool, total: int, record: int, frame: int, ca: str) -> None:
    """The sender process: Kafka-like frames, written `record` bytes at a time (with TLS,
    each write is one TLS record, as librdkafka's per-segment SSL_write)."""
    sock = socket.create_connection(("127.0.0.1", port))
    if tls:
        ctx = ssl.create_default_context(cafile=ca)
        sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    body = struct.pack(">i", frame - 4) + b"\x00" * (frame - 4)
    stream = body * max(1, (4 * MIB) // frame)
    view = memoryview(stream)
    sent = 0
    while sent < total:
        for i in range(0, len(view), record):
            sock.sendall(view[i:i + record])
        sent += len(view)
    time.sleep(0.5)
    sock.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=200)
    ap.add_argument("--record", type=int, default=1800, help="bytes per TLS record sent")
    ap.add_argument("--frame", type=int, default=16384, help="bytes per Kafka frame")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", default="plain,uvloop-tls,uvloop-tls-buffered,sslsocket")
    ap.add_argument("--send", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="yak-tls-bench-"))
    if a.send:
        port, tls = a.send
        send(int(port), tls == "1", stream_total(a.mib, a.frame), a.record, a.frame,
             os.environ["TLS_CA"])
        return
    key, ca = certs(d)
    rows = []
    for size in sorted({a.record, 16384}):
        row = {"openssl_only_record": size, **openssl_only(key, ca, size, 100 * MIB)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    total = stream_total(a.mib, a.frame)  # what the sender sends, to the byte
    os.environ["TLS_CA"] = str(ca)
    for rnd in range(a.rounds):
        modes = a.modes.split(",")
        for mode in (modes if rnd % 2 == 0 else list(reversed(modes))):
            sender = [sys.executable, __file__, "--mib", str(a.mib), "--record",
                      str(a.record), "--frame", str(a.frame), "--send"]
            row = uvloop.run(receive(mode, key, ca, total, sender))
            row.update(round=rnd, record=a.record, frame=a.frame)
            rows.append(row)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
