"""Gateway fixtures: `yak serve --http` (embedded) and `yak gateway` (standalone).

Both are real subprocesses on free ports, reached over HTTP/WebSocket exactly as users'
clients reach them; the broker behind them is a real Yak broker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

START_TIMEOUT_S = 40.0
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class GatewayProc:
    proc: subprocess.Popen[bytes]
    url: str
    bootstrap: str
    out_path: Path

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def _spawn(args: list[str], out_path: Path, ready: str, url: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from yak.cli.main import app; app()", *args],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if ready in out_path.read_text(errors="replace"):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/openapi.json", timeout=2).status_code == 200:
                    return proc
        if proc.poll() is not None:
            break
        time.sleep(0.1)  # back-off of this wait-for-ready loop
    proc.kill()
    proc.wait(5)
    raise RuntimeError(f"did not start: {out_path.read_text(errors='replace')[-3000:]}")


def start_embedded(tmp: Path, *extra: str) -> GatewayProc:
    """`yak serve --http`: broker and gateway in one process."""
    data = tmp / "data"
    data.mkdir(parents=True, exist_ok=True)
    kport, hport = free_port(), free_port()
    url = f"http://127.0.0.1:{hport}"
    out = tmp / "serve.log"
    proc = _spawn(["serve", "--data-dir", str(data), "--listen", f"127.0.0.1:{kport}",
                   "--http", f"127.0.0.1:{hport}", *extra], out, "Yak HTTP gateway on", url)
    return GatewayProc(proc, url, f"127.0.0.1:{kport}", out)


def start_standalone(tmp: Path, bootstrap: str, *extra: str) -> GatewayProc:
    """`yak gateway --bootstrap`: the gateway alone, against any cluster."""
    tmp.mkdir(parents=True, exist_ok=True)
    hport = free_port()
    url = f"http://127.0.0.1:{hport}"
    out = tmp / "gateway.log"
    proc = _spawn(["gateway", "--bootstrap", bootstrap, "--http", f"127.0.0.1:{hport}", *extra],
                  out, "Yak gateway ready on", url)
    return GatewayProc(proc, url, bootstrap, out)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProc]:
    """One `yak serve --http` per test module (tests use distinct topic names)."""
    gw = start_embedded(tmp_path_factory.mktemp("yak-gw"))
    yield gw
    gw.stop()


@pytest.fixture
def http(gateway: GatewayProc) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=30) as c:
        yield c


__all__ = ["GatewayProc", "free_port", "start_embedded", "start_standalone"]
