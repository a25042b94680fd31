"""Kill -9 a streaming query mid-run; its restart must deliver every record exactly once."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import spark_env
from .test_client_sink import _read_all

JOB = Path(__file__).with_name("stream_job.py")
REPO = Path(__file__).resolve().parents[2]


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    spark_env()
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, str(JOB), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            start_new_session=True,
        )


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver, its JVM and the Python workers together: a machine-crash stand-in."""
    try:
        family = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = [proc.pid]
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(10)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigkill_mid_run_then_restart_delivers_exactly_once(module_broker, tmp_path):
    bs = module_broker.bootstrap
    src, dst = f"eo-src-{uuid.uuid4().hex[:6]}", f"eo-dst-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    for t, n in ((src, 2), (dst, 2)):
        admin.create_topics([NewTopic(t, n, 1)])[t].result(15)
    total = 16_000
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "enable.idempotence": True})
    for i in range(total):
        p.produce(src, key=b"%d" % (i % 97), value=b"event-%06d" % i, partition=i % 2)
    assert p.flush(30) == 0
    ckpt = str(tmp_path / "ckpt")
    log = tmp_path / "job.log"

    job = _start([bs, src, dst, ckpt, "continuous"], log)
    deadline = time.monotonic() + 150
    written = 0
    while time.monotonic() < deadline:
        written = len(_read_all(bs, dst))
        if written >= 4000 or job.poll() is not None:
            break
        time.sleep(0.2)
    assert job.poll() is None, log.read_text()[-3000:]
    _kill_tree(job)
    assert 0 < written < total, "the kill must land mid-run"

    again = _start([bs, src, dst, ckpt, "available-now"], log)
    assert again.wait(180) == 0, log.read_text()[-3000:]
    values = [r[1] for r in _read_all(bs, dst)]
    assert len(values) == total, f"{len(values) - len(set(values))} duplicates"
    assert sorted(values) == [b"event-%06d" % i for i in range(total)]
    # how the kill landed: a fence with two producer ids means a task's write was replayed
    state = [json.loads(r[1]) for r in _read_all(bs, "__yak_spark_sink_state")]
    replays = [s for s in state if len(s["pids"]) > 1]
    print(f"killed after {written} rows; {len(replays)} task write(s) replayed")
