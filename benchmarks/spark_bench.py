"""Spark connector throughput: batch write, batch read, streaming read, 100-byte values.

    .venv/bin/python benchmarks/spark_bench.py --rows 2000000            # starts its own broker
    .venv/bin/python benchmarks/spark_bench.py --bootstrap 127.0.0.1:9092

Reports rows/s on the wall clock and the CPU seconds spent by Spark (driver JVM + Python
workers) and by the broker, because the machine is shared and wall time alone lies.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_broker(data_dir: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    bootstrap = f"127.0.0.1:{port}"
    out = Path(data_dir) / "stdout.txt"
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from yak.cli.main import app; app()",
                "serve",
                "--data-dir",
                str(Path(data_dir) / "data"),
                "--listen",
                bootstrap,
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    for _ in range(300):
        if "ready" in out.read_text(errors="replace").lower():
            return proc, bootstrap
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("broker did not start:\n" + out.read_text())


def _tree_cpu(pid: int) -> float:
    """CPU seconds (user+system) of a process and its live descendants."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        pass
    return total


class Meter:
    """Wall time plus Spark-side and broker-side CPU over a block."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid

    def __enter__(self) -> Meter:
        self.t0 = time.perf_counter()
        self.spark0 = _tree_cpu(os.getpid())
        self.broker0 = _tree_cpu(self.broker_pid) if self.broker_pid else 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.spark_cpu = _tree_cpu(os.getpid()) - self.spark0
        self.broker_cpu = (_tree_cpu(self.broker_pid) - self.broker0) if self.broker_pid else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap")
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--json", help="write results here too")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="yak-spark-bench-")
    broker = None
    bootstrap = args.bootstrap
    if not bootstrap:
        broker, bootstrap = _start_broker(tmp)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from yak.spark import YakDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(YakDataSource)
    topic = f"bench-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
    n = args.rows
    broker_pid = broker.pid if broker else None
    results: dict[str, dict[str, float]] = {}

    def record(name: str, m: Meter) -> None:
        results[name] = {
            "rows": n,
            "wall_s": round(m.wall, 3),
            "rows_per_s": round(n / m.wall),
            "spark_cpu_s": round(m.spark_cpu, 2),
            "broker_cpu_s": round(m.broker_cpu, 2),
        }
        print(name, json.dumps(results[name]), flush=True)

    value = F.lpad(F.col("id").cast("string"), 100, "x").cast("binary")
    df = spark.range(0, n, numPartitions=args.partitions).select(value.alias("value"))
    df.cache().count()  # generate the rows outside the measured block
    # warm-up: Python workers start and import pyarrow/yak once (spark.python.worker.reuse)
    spark.range(0, 1000, numPartitions=args.partitions).select(value.alias("value")).write.format(
        "yak"
    ).option("kafka.bootstrap.servers", bootstrap).option("topic", topic + "-warm").mode(
        "append"
    ).save()
    with Meter(broker_pid) as m:
        df.write.format("yak").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", topic
        ).mode("append").save()
    record("write", m)
    df.unpersist()

    reader = (
        spark.read.format("yak")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    reader.load().write.format("noop").mode("overwrite").save()  # warm-up (workers, JIT)
    with Meter(broker_pid) as m:
        reader.load().write.format("noop").mode("overwrite").save()
    record("batch_read", m)

    with Meter(broker_pid) as m:
        q = (
            spark.readStream.format("yak")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(Path(tmp) / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
    record("streaming_read", m)
    batches = [p for p in q.recentProgress if p["numInputRows"]]
    add_ms = sum(p["durationMs"].get("addBatch", 0) for p in batches)
    trigger_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in batches)
    results["streaming_read"]["micro_batches"] = len(batches)
    results["streaming_read"]["rows_per_s_in_triggers"] = round(n / (trigger_ms / 1000))
    results["streaming_read"]["rows_per_s_in_add_batch"] = round(n / (add_ms / 1000))
    print("streaming_read", json.dumps(results["streaming_read"]), flush=True)
    spark.stop()
    if broker:
        broker.terminate()
        broker.wait(30)
    shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
