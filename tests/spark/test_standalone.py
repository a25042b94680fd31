"""The connector on a Spark standalone cluster started from pyspark's own sbin scripts
(scripts/spark-standalone.sh: a master and two workers): reads and the exactly-once
transactional writes run in executors on both workers, not in the driver."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import free_port
from tests.txn.wire import read_all

from .conftest import spark_env

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "spark-standalone.sh"
JOB = Path(__file__).with_name("stream_job.py")


@pytest.fixture
def standalone(tmp_path: Path):  # type: ignore[no-untyped-def]
    run = tmp_path / "spark"
    port = free_port()
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run([str(SCRIPT), "start", str(run), str(port), "2"], check=True, env=env,
                   stdout=subprocess.DEVNULL, timeout=120)
    try:
        deadline = time.monotonic() + 180
        while True:
            logs = "".join(p.read_text(errors="replace")
                           for p in (run / "logs").glob("*Master*.out"))
            if logs.count("Registering worker") >= 2:
                break
            assert time.monotonic() < deadline, f"workers did not register:\n{logs[-3000:]}"
            time.sleep(1)  # back-off of this wait-for-workers loop
        yield f"spark://127.0.0.1:{port}", run
    finally:
        subprocess.run([str(SCRIPT), "stop", str(run)], env=env, stdout=subprocess.DEVNULL,
                       timeout=120)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_exactly_once_stream_on_a_standalone_cluster(module_broker, standalone) -> None:
    master, run = standalone
    bs = module_broker.bootstrap
    src, dst = f"sa-src-{uuid.uuid4().hex[:6]}", f"sa-dst-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    for t in (src, dst):
        admin.create_topics([NewTopic(t, 2, 1)])[t].result(15)
    total = 6000
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(total):
        p.produce(src, key=b"%d" % (i % 31), value=b"event-%06d" % i, partition=i % 2)
    assert p.flush(30) == 0
    spark_env()
    log = run / "job.log"
    with open(log, "wb") as out:
        job = subprocess.run(
            [sys.executable, str(JOB), bs, src, dst, str(run / "ckpt"), "available-now"],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO, timeout=420,
            env=dict(os.environ, PYTHONPATH=str(REPO), YAK_SPARK_MASTER=master))
    assert job.returncode == 0, log.read_text()[-3000:]
    values = sorted(v for _p, _o, v in read_all(bs, dst, [0, 1], "read_committed"))
    assert values == [b"event-%06d" % i for i in range(total)]
    # the reads and writes ran as tasks in executors on each of the two workers
    for worker in ("work-1", "work-2"):
        logs = "".join(p.read_text(errors="replace")
                       for p in (run / worker).glob("app-*/*/stderr"))
        assert "Running task" in logs, f"no task ran on {worker}"
