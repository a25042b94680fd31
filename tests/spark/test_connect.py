"""The connector over Spark Connect, where no jar can be added: read, transform, write back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from .conftest import spark_env
from .test_client_sink import _read_all

JOB = Path(__file__).with_name("connect_job.py")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_read_and_write_over_spark_connect(module_broker, tmp_path):
    pytest.importorskip("grpc")
    bs = module_broker.bootstrap
    src, dst = f"sc-src-{uuid.uuid4().hex[:6]}", f"sc-dst-{uuid.uuid4().hex[:6]}"
    p = Producer({"bootstrap.servers": bs})
    for i in range(300):
        p.produce(src, key=b"%d" % i, value=b"hello-%d" % i)
    assert p.flush(30) == 0
    spark_env()
    proc = subprocess.run(
        [sys.executable, str(JOB), bs, src, dst],
        capture_output=True,
        timeout=220,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
    )
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary == {"read": 300, "type": "pyspark.sql.connect.session"}
    values = sorted(v for _k, v, _p, _o in _read_all(bs, dst))
    assert values == sorted(b"HELLO-%d" % i for i in range(300))
