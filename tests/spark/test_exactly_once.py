"""Kill -9 a streaming query mid-run; its restart must deliver every record exactly once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.txn.wire import read_all, wait_until, watermarks

from .conftest import spark_env

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
@pytest.mark.timeout(600)  # two Spark starts; ~3-5 min on a loaded 2-core machine
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

    # big micro-batches written in small record batches: a task's transaction stays open
    # long enough (hundreds of Produce rounds) for the kill to land inside one
    job = _start([bs, src, dst, ckpt, "continuous", "6000", "2048"], log)
    t_start = time.monotonic()
    deadline = time.monotonic() + 150
    written = 0
    # Kill while a write task's transaction is open (its rows in the log, uncommitted:
    # LSO < HW on an output partition) once a few batches are in, or at the deadline.
    wm = Consumer({"bootstrap.servers": bs, "group.id": "eo-wm",
                   "isolation.level": "read_committed"})
    try:
        while time.monotonic() < deadline and job.poll() is None:
            marks = []
            for part in (0, 1):
                with contextlib.suppress(Exception):
                    lso = wm.get_watermark_offsets(TopicPartition(dst, part), timeout=2)[1]
                    hw = watermarks(bs, dst, part, "read_uncommitted")[1]
                    marks.append((lso, hw))
            written = sum(hw for _lso, hw in marks)
            if written >= 1000 and any(hw - lso > 50 for lso, hw in marks):
                break
            time.sleep(0.01)  # back-off of this wait-for-watermarks loop
    finally:
        wm.close()
    assert job.poll() is None, log.read_text()[-3000:]
    _kill_tree(job)
    print(f"killed {time.monotonic() - t_start:.0f} s after the start")
    assert 0 < written < total, "the kill must land mid-run"

    again = _start([bs, src, dst, ckpt, "available-now"], log)
    assert again.wait(180) == 0, log.read_text()[-3000:]
    print(f"restarted run done {time.monotonic() - t_start:.0f} s after the start")
    check_exactly_once(bs, dst, total, written)


def check_exactly_once(bs: str, dst: str, total: int, written: int) -> None:
    """Every source record once in `dst`, as a read_committed consumer (the default of
    librdkafka and of Kafka's exactly-once readers) sees it. The killed run's transactions
    were aborted by the restart's InitProducerId (same task ids), or at their timeout."""
    for part in (0, 1):
        wait_until(lambda part=part: watermarks(bs, dst, part, "read_committed")
                   == watermarks(bs, dst, part, "read_uncommitted"), 90,
                   f"every transaction of {dst}-{part} decided")
    values = [v for _p, _o, v in read_all(bs, dst, [0, 1], "read_committed")]
    assert len(values) == total, f"{len(values) - len(set(values))} duplicates"
    assert sorted(values) == [b"event-%06d" % i for i in range(total)]
    in_log = len(read_all(bs, dst, [0, 1], "read_uncommitted"))
    print(f"killed after {written} rows; {in_log - total} rows of aborted attempts in the log")
