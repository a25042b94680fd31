"""Registry fixtures: `yak serve --http` subprocesses (broker and gateway in one), restartable
on the same ports and data directory, reached with confluent-kafka's SchemaRegistryClient."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from gateway.conftest import _spawn, free_port  # tests/ is on sys.path

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    """One `yak serve --http` that can be stopped and started again with the same state."""

    tmp: Path
    kport: int = field(default_factory=free_port)
    hport: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.hport}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kport}"

    def start(self) -> Served:
        data = self.tmp / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        out = self.tmp / f"serve-{self.starts}.log"
        self.proc = _spawn(["serve", "--data-dir", str(data), "--listen", self.bootstrap,
                            "--http", f"127.0.0.1:{self.hport}"], out, "Yak HTTP gateway on",
                           self.url)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def sr(self) -> object:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        return SchemaRegistryClient({"url": self.url, "timeout": 30})


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("yak-registry")).start()
    yield s
    s.stop()


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Served]:
    """A broker+gateway of its own, for tests that restart it."""
    s = Served(tmp_path).start()
    yield s
    with contextlib.suppress(Exception):
        s.stop()


def compile_proto(tmp: Path, name: str, text: str) -> object:
    """Generate and import a `_pb2` module with protoc (as an application would)."""
    import importlib

    (tmp / f"{name}.proto").write_text(text)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}", f"--python_out={tmp}",
                    str(tmp / f"{name}.proto")], check=True, timeout=60)
    sys.path.insert(0, str(tmp))
    try:
        return importlib.import_module(f"{name}_pb2")
    finally:
        sys.path.remove(str(tmp))
