"""The machine's own limits, measured in the same invocation as the brokers.

A broker cannot write faster than the disk takes sequential writes nor move bytes faster
than loopback: these two numbers say how far from the hardware each broker is.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

MIB = 1 << 20


def disk_sequential_write(directory: Path, total_mib: int = 1024, cap_s: float = 30.0) -> dict:
    """1 MiB write() calls into a fresh file, one fdatasync at the end (what a log does)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "seq.bin"
    buf = mmap.mmap(-1, MIB)
    buf.write(os.urandom(MIB))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n = 0
    t0 = time.perf_counter()
    try:
        while n < total_mib and time.perf_counter() - t0 < cap_s:
            os.write(fd, buf)
            n += 1
        os.fdatasync(fd)
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {"ceiling": "disk sequential write (1 MiB writes + fdatasync at end)",
            "MB_per_s": round(n * MIB / dt / 1e6, 1), "mib": n, "secs": round(dt, 2)}


def loopback_iperf3(secs: int = 5) -> dict | None:
    if shutil.which("iperf3") is None:
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port), "-1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(secs),
                              "-J"], capture_output=True, text=True, timeout=secs + 30)
        bps = json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"]
    except (subprocess.SubprocessError, KeyError, ValueError):
        return None
    finally:
        server.kill()
        server.wait(5)
    return {"ceiling": "loopback TCP (iperf3, 1 stream)", "MB_per_s": round(bps / 8 / 1e6, 1),
            "secs": secs}


def loopback_python(total_mib: int = 2048, cap_s: float = 10.0) -> dict:
    """One Python connection, 1 MiB sendall / recv_into: the ceiling a Python broker sees."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    got = [0]

    def sink() -> None:
        conn, _ = srv.accept()
        buf = bytearray(MIB)
        with conn:
            while True:
                k = conn.recv_into(buf)
                if not k:
                    break
                got[0] += k

    t = threading.Thread(target=sink, daemon=True)
    t.start()
    data = os.urandom(MIB)
    c = socket.create_connection(("127.0.0.1", port))
    t0 = time.perf_counter()
    sent = 0
    while sent < total_mib and time.perf_counter() - t0 < cap_s:
        c.sendall(data)
        sent += 1
    c.close()
    t.join(30)
    dt = time.perf_counter() - t0
    srv.close()
    return {"ceiling": "loopback TCP (Python sendall -> recv_into, 1 connection)",
            "MB_per_s": round(got[0] / dt / 1e6, 1), "secs": round(dt, 2)}


def measure(work: Path) -> list[dict]:
    out = [disk_sequential_write(work / "disk")]
    ip = loopback_iperf3()
    if ip:
        out.append(ip)
    out.append(loopback_python())
    return out
