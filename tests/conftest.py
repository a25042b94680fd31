"""Shared fixtures: a real Yak broker in a subprocess, on a free port, with a tmp data dir.

Tests talk to it over TCP exactly as users' clients do (no in-process shortcuts), and
can SIGKILL and restart it on the same port and data directory to test recovery.

    def test_x(broker): ...                      # default settings
    def test_y(broker_factory):
        b = broker_factory(**{"auto.create.topics.enable": "false"})
        b = broker_factory(num_partitions=3)     # underscores read as dots
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
READY = "Yak broker ready on"
START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command() -> list[str]:
    """`yak serve` once the CLI exists; the broker module's own entry point until then."""
    if (REPO / "yak" / "cli" / "main.py").exists():
        return [sys.executable, "-c", "from yak.cli.main import app; app()", "serve"]
    return [sys.executable, "-m", "yak.broker.server"]


class YakBroker:
    """A broker subprocess. `.bootstrap` is "127.0.0.1:PORT"."""

    def __init__(self, data_dir: Path, settings: dict[str, str], port: int | None = None,
                 http: str | None = None) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.http = http  # HOST:PORT for the embedded gateway; None = off
        self.args: list[str] = []  # more `yak serve` options (e.g. --http-auth basic)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"
        self._starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> YakBroker:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._starts += 1
        out_path = self.data_dir.parent / f"{self.data_dir.name}-stdout-{self._starts}.txt"
        cmd = _command() + [
            "--data-dir", str(self.data_dir), "--listen", self.bootstrap,
            "--http", self.http or "none", *self.args,
        ]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(out_path, "wb") as out, open(self.log_path, "ab") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=REPO, env=env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if READY in out_path.read_text(errors="replace"):
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)  # back-off of this wait-for-ready loop
        self.kill()
        raise RuntimeError(
            f"broker did not start (rc={self.proc.returncode}); log:\n{self.log()[-4000:]}"
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait for a clean shutdown; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL: no flush, no checkpoints, no clean-shutdown marker."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, kill: bool = False) -> YakBroker:
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start()

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def _normalize(settings: dict[str, object]) -> dict[str, str]:
    out = {}
    for k, v in settings.items():
        key = k if "." in k else k.replace("_", ".")
        out[key] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., YakBroker]]:
    started: list[YakBroker] = []

    def make(http: str | None = None, **settings: object) -> YakBroker:
        """`http="127.0.0.1:PORT"` also starts the embedded gateway; the rest are --set."""
        data_dir = tmp_path / f"yak-data-{len(started)}"
        data_dir.mkdir()
        b = YakBroker(data_dir, _normalize(settings), http=http)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        with contextlib.suppress(Exception):
            b.stop(10)
        b.kill()


@pytest.fixture
def broker(broker_factory: Callable[..., YakBroker]) -> YakBroker:
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YakBroker]:
    """One broker shared by a test module (tests must use distinct topic names)."""
    data_dir = tmp_path_factory.mktemp("yak-module") / "data"
    data_dir.mkdir()
    b = YakBroker(data_dir, {}).start()
    yield b
    with contextlib.suppress(Exception):
        b.stop(10)
    b.kill()
