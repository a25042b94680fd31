"""`yak serve --config FILE --set ...` end to end: Kafka-named settings reach the broker."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

YAK = [sys.executable, "-m", "yak.cli.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def yak(*args: str) -> str:
    r = subprocess.run([*YAK, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("fmt", ["properties", "toml"])
def test_serve_with_config_file_and_overrides(tmp_path: Path, fmt: str) -> None:
    port = free_port()
    if fmt == "properties":
        cfg = tmp_path / "server.properties"
        cfg.write_text(
            "# a Kafka-style file\n"
            f"listeners=PLAINTEXT://127.0.0.1:{port}\n"
            f"log.dirs={tmp_path / 'data'}\n"
            "num.partitions=4\n"
            "log.retention.hours=1\n"
            "num.network.threads=3\n"
            "some.unknown.key=1\n"
        )
    else:
        cfg = tmp_path / "server.toml"
        cfg.write_text(
            f'listeners = "PLAINTEXT://127.0.0.1:{port}"\n'
            f'"log.dirs" = "{tmp_path / "data"}"\n'
            '"num.partitions" = 4\n'
            "[log.retention]\nhours = 1\n"
            '[some.unknown]\nkey = "1"\n'
        )
    out_path, err_path = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [*YAK, "serve", "--config", str(cfg), "--set", "log.segment.bytes=1048576"],
            stdout=out,
            stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        deadline = time.monotonic() + 30
        while "Yak broker ready" not in out_path.read_text():
            assert proc.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline, "broker did not start"
            time.sleep(0.05)  # back-off of this wait-for-ready loop
        assert f"127.0.0.1:{port}" in out_path.read_text()
        stderr = err_path.read_text()
        assert "some.unknown.key" in stderr  # warned, not fatal
        assert "num.network.threads" not in stderr  # a known Kafka key: no warning
        b = ["--bootstrap", f"127.0.0.1:{port}"]
        yak("topic", "create", "t", *b)
        desc = json.loads(yak("topic", "describe", "t", "--all-configs", "--format", "json", *b))
        assert len(desc["partitions"]) == 4
        assert desc["configs"]["retention.ms"] == {"value": "3600000", "source": "broker"}
        assert desc["configs"]["segment.bytes"] == {"value": "1048576", "source": "broker"}
        assert desc["configs"]["cleanup.policy"] == {"value": "delete", "source": "default"}
        assert (tmp_path / "data" / "t-3").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


@pytest.mark.parametrize("how", ["--data-dir", "--set", "--config", "under"])
def test_data_dir_that_is_a_file_is_one_line_exit_2(tmp_path: Path, how: str) -> None:
    f = tmp_path / "not-a-dir"
    f.write_text("x\n")
    target = f / "sub" if how == "under" else f
    args = {"--data-dir": ["--data-dir", str(target)], "under": ["--data-dir", str(target)],
            "--set": ["--set", f"log.dirs={target}"],
            "--config": ["--config", str(tmp_path / "s.properties")]}[how]
    (tmp_path / "s.properties").write_text(f"log.dirs={target}\n")
    r = subprocess.run([*YAK, "serve", *args, "--listen", f"127.0.0.1:{free_port()}",
                        "--http", "none"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("yak: error: ") and f"'{f}' is not a directory" in lines[0]
    assert "Errno" not in r.stderr and "Traceback" not in r.stderr
