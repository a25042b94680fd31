"""Spark over a tiered topic: rows/s for the same offsets read through the brokers and
straight from the bucket (`tiered.direct=true`), and what the broker spends meanwhile.

    .venv/bin/python benchmarks/spark_tiered_bench.py --rows 2000000 --repeat 2

Starts SeaweedFS (tests/tiered/seaweed.py, 127.0.0.1, every port chosen) and one broker
with tiering on (8 MiB segments, 1 MiB of local retention, so the offsets read are only in
the bucket), writes the rows with the yak sink (100-byte values), waits until the remote
log holds all but the active segment of each partition, then reads [0, remote end) of
every partition into Spark's `noop` sink, alternating the two ways `--repeat` times after
one warm-up of each (a `count()`); then the same offsets through the connector's read path
alone (the code a Spark task's Python worker runs, in this process, no JVM). Reports wall rows/s and CPU seconds of Spark (driver JVM and Python
workers), of the broker and of SeaweedFS during each read: the machine is shared, so wall
time alone lies. The broker's chunk cache is 16 MiB by default here (`--broker-cache-mb`),
far smaller than the data, so every broker read is cold, as a backfill of months of data
would be; with a cache larger than the data the broker serves its reads after the warm-up
from memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.spark_bench import Meter, _free_port, _tree_cpu  # noqa: E402
from tests.tiered.seaweed import SeaweedS3  # noqa: E402

BUCKET = "yak-spark-bench"


def start_broker(tmp: str, s3_uri: str, cache_mb: int) -> tuple[subprocess.Popen[bytes], str]:
    bootstrap = f"127.0.0.1:{_free_port()}"
    out = Path(tmp) / "broker.txt"
    settings = {
        "remote.log.storage.system.enable": "true", "remote.storage.uri": s3_uri,
        "remote.storage.access.key.id": "yak", "remote.storage.secret.access.key": "yaksecret",
        "remote.log.manager.task.interval.ms": "500",
        "remote.log.reader.cache.bytes": str(cache_mb << 20),
    }
    cmd = [sys.executable, "-c", "from yak.cli.main import app; app()", "serve",
           "--data-dir", str(Path(tmp) / "data"), "--listen", bootstrap, "--http", "none"]
    for k, v in settings.items():
        cmd += ["--set", f"{k}={v}"]
    with open(out, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    for _ in range(600):
        if "ready" in out.read_text(errors="replace").lower():
            return proc, bootstrap
        time.sleep(0.1)  # polling the broker's ready line
    proc.kill()
    raise RuntimeError("broker did not start:\n" + out.read_text())


def remote_ends(s3_uri: str, topic: str, partitions: int) -> dict[int, int]:
    """Per partition, the first offset past the remote log (read from the manifests)."""
    import asyncio

    from yak.spark.options import TieredSettings
    from yak.tiered.presign import latest_manifests

    store = TieredSettings(s3_uri, "yak", "yaksecret").store()
    ms = asyncio.run(latest_manifests(store, [(topic, p) for p in range(partitions)]))
    return {p: (ms[(topic, p)].copied_upto if (topic, p) in ms else 0)
            for p in range(partitions)}


def _cpu_by_kind(root_pid: int) -> dict[int, tuple[str, float]]:
    """pid -> ("jvm" or "python", CPU seconds) of the live processes under `root_pid` other
    than it (Spark's driver JVM and the Python workers it forks)."""
    import psutil

    out: dict[int, tuple[str, float]] = {}
    for p in psutil.Process(root_pid).children(recursive=True):
        try:
            t = p.cpu_times()
            out[p.pid] = ("jvm" if "java" in p.name() else "python", t.user + t.system)
        except psutil.NoSuchProcess:
            pass
    return out


def _split_cpu(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
               ) -> dict[str, float]:
    """CPU seconds spent between two `_cpu_by_kind` reads, by kind (processes that exited
    in between are missed; workers are reused, so few do)."""
    out = {"jvm": 0.0, "python": 0.0}
    for pid, (kind, cpu) in after.items():
        out[kind] += cpu - before.get(pid, (kind, 0.0))[1]
    return {f"{k}_cpu_s": round(v, 2) for k, v in out.items()}


def floor_source() -> type:
    """A Spark data source with the `yak` schema whose tasks do no I/O and no decoding:
    they hand Spark constant Arrow batches of the same rows per partition, in batches the
    size the direct read yields. Its time is what Spark itself costs for these rows (Python
    workers, Arrow hand-over, the JVM's per-row work): the floor under both ways."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from yak.spark.source import SCHEMA_DDL

    class FloorReader(DataSourceReader):
        def __init__(self, parts: list[list[int]], topic: str) -> None:
            self.parts = parts
            self.topic = topic

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(tuple(p)) for p in self.parts]

        def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
            import numpy as np
            import pyarrow as pa

            from yak.spark.fetcher import TIMESTAMP_TYPE, _constant_string, arrow_schema

            p, n = partition.value
            schema = arrow_schema(False)
            rows = 76_000  # ~ one 8 MiB range of 100-byte values, as the direct read yields
            value = pa.array([b"x" * 100] * rows, pa.binary())
            key = pa.nulls(rows, pa.binary())
            done = 0
            while done < n:
                k = min(rows, n - done)
                yield pa.RecordBatch.from_arrays([
                    key.slice(0, k), value.slice(0, k), _constant_string(self.topic, k),
                    pa.array(np.full(k, p, np.int32)),
                    pa.array(np.arange(done, done + k, dtype=np.int64)),
                    pa.array(np.zeros(k, np.int64), type=TIMESTAMP_TYPE),
                    pa.array(np.zeros(k, np.int32))], schema=schema)
                done += k

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "yakfloor"

        def schema(self) -> str:
            return SCHEMA_DDL

        def reader(self, schema: object) -> FloorReader:
            return FloorReader(json.loads(self.options["parts"]), self.options["topic"])

    return FloorSource


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--broker-cache-mb", type=int, default=16,
                    help="the broker's remote chunk cache (128 default in Yak): 16 makes every"
                         " broker read cold, as a backfill larger than the cache is; a size"
                         " above the data makes the broker's reads after the first warm")
    ap.add_argument("--json", help="write results here too")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="yak-spark-tiered-bench-")
    weed = SeaweedS3(tmp)
    weed.start()
    weed.create_bucket(BUCKET)
    s3_uri = f"s3://{BUCKET}/bench?endpoint={weed.endpoint}&region=us-east-1"
    broker, bootstrap = start_broker(tmp, s3_uri, args.broker_cache_mb)
    try:
        run(args, tmp, weed, broker, bootstrap, s3_uri)
    finally:
        broker.terminate()
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
        weed.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace, tmp: str, weed: SeaweedS3, broker: subprocess.Popen[bytes],
        bootstrap: str, s3_uri: str) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from yak.spark import YakDataSource

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(YakDataSource)
    spark.dataSource.register(floor_source())
    topic = f"bench-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1, config={
        "segment.bytes": str(8 << 20), "remote.storage.enable": "true",
        "local.retention.bytes": str(1 << 20)})])[topic].result(30)

    value = F.lpad(F.col("id").cast("string"), 100, "x").cast("binary")
    t0 = time.monotonic()
    (spark.range(0, args.rows, numPartitions=args.partitions).select(value.alias("value"))
     .write.format("yak").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .mode("append").save())
    print(f"wrote {args.rows} rows in {time.monotonic() - t0:.1f} s", flush=True)
    # All but the active segment uploaded: the remote end stops moving.
    last: dict[int, int] = {}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        ends = remote_ends(s3_uri, topic, args.partitions)
        if ends == last and min(ends.values()) > 0:
            break
        last = ends
        time.sleep(5)  # an upload round is 0.5 s; 5 s without progress means done
    def local_start(p: int) -> int:
        logs = list((Path(tmp) / "data" / f"{topic}-{p}").glob("*.log"))
        return min(int(x.stem) for x in logs) if logs else 0
    while time.monotonic() < deadline and any(local_start(p) < e for p, e in last.items()):
        time.sleep(1)  # local retention runs once a second: the read range only in the bucket
    rows = sum(last.values())
    print(f"remote log: {last} ({rows} rows) after {time.monotonic() - t0:.1f} s", flush=True)
    ending = json.dumps({topic: {str(p): e for p, e in last.items()}})

    def reader(direct: bool):  # type: ignore[no-untyped-def]
        r = (spark.read.format("yak").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("endingOffsets", ending))
        if direct:
            r = (r.option("tiered.direct", "true").option("remote.storage.uri", s3_uri)
                 .option("remote.storage.access.key.id", "yak")
                 .option("remote.storage.secret.access.key", "yaksecret"))
        return r.load()

    def floor():  # type: ignore[no-untyped-def]
        return (spark.read.format("yakfloor").option("topic", topic)
                .option("parts", json.dumps([[p, e] for p, e in sorted(last.items())])).load())

    def frame(way: str):  # type: ignore[no-untyped-def]
        return floor() if way == "floor" else reader(way == "direct")

    assert reader(True).count() == reader(False).count() == floor().count() == rows
    results: dict[str, list[dict[str, float]]] = {"brokers": [], "direct": [], "floor": []}
    for _ in range(args.repeat):
        for way in ("brokers", "direct", "floor"):
            weed0 = _tree_cpu(weed.proc.pid) if weed.proc else 0.0
            kinds0 = _cpu_by_kind(os.getpid())
            with Meter(broker.pid) as m:
                frame(way).write.format("noop").mode("overwrite").save()
            split = _split_cpu(kinds0, _cpu_by_kind(os.getpid()))
            r = {"rows": rows, "wall_s": round(m.wall, 2), "rows_per_s": round(rows / m.wall),
                 "spark_cpu_s": round(m.spark_cpu, 2), "broker_cpu_s": round(m.broker_cpu, 2),
                 "seaweedfs_cpu_s": round((_tree_cpu(weed.proc.pid) if weed.proc else 0.0)
                                          - weed0, 2),
                 **split, "load_1m": round(os.getloadavg()[0], 1)}
            results[way].append(r)
            print(way, json.dumps(r), flush=True)
    # The connector's read path alone (what a Spark task's Python worker runs), in this
    # process, one partition after the other: no JVM, no Arrow hand-over to Spark.
    results.update(reader_only(args, bootstrap, topic, s3_uri, ending, rows, broker, weed))
    best = {w: max(r["rows_per_s"] for r in rs) for w, rs in results.items()}
    print(f"direct / brokers (best of {args.repeat}): {best['direct'] / best['brokers']:.2f}x"
          f" in Spark, {best['reader_direct'] / best['reader_brokers']:.2f}x the reader alone",
          flush=True)
    # Spark's own time (the floor) is in both ways' wall time: the best ratio Spark could
    # show is (floor + the broker read) / (floor + the direct read), with the reader-alone
    # times for the reads.
    fl = rows / best["floor"]
    rb, rd = rows / best["reader_brokers"], rows / best["reader_direct"]
    print(f"Spark floor {fl:.2f} s for {rows} rows; reader alone {rb:.2f} s through the"
          f" brokers, {rd:.2f} s direct; bound on the Spark ratio if the reads and Spark's"
          f" work added up: {(fl + rb) / (fl + rd):.2f}x", flush=True)
    spark.stop()
    if args.json:
        Path(args.json).write_text(json.dumps({"remote_end": last, "broker_cache_mb":
                                               args.broker_cache_mb, **results}, indent=2))


def reader_only(args: argparse.Namespace, bootstrap: str, topic: str, s3_uri: str,
                ending: str, rows: int, broker: subprocess.Popen[bytes],
                weed: SeaweedS3) -> dict[str, list[dict[str, float]]]:
    from yak.spark.options import parse_source_options
    from yak.spark.source import YakBatchReader

    def reader(direct: bool) -> YakBatchReader:
        raw = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
               "startingOffsets": "earliest", "endingOffsets": ending}
        if direct:
            raw.update({"tiered.direct": "true", "remote.storage.uri": s3_uri,
                        "remote.storage.access.key.id": "yak",
                        "remote.storage.secret.access.key": "yaksecret"})
        return YakBatchReader(parse_source_options(raw, streaming=False))

    out: dict[str, list[dict[str, float]]] = {"reader_brokers": [], "reader_direct": []}
    for _ in range(args.repeat):
        for way in ("brokers", "direct"):
            r = reader(way == "direct")
            parts = r.partitions()
            b0, w0 = _tree_cpu(broker.pid), _tree_cpu(weed.proc.pid) if weed.proc else 0.0
            c0, t0 = time.process_time(), time.perf_counter()
            n = sum(b.num_rows for p in parts for b in r.read(p))
            wall = time.perf_counter() - t0
            assert n == rows, (n, rows)
            res = {"rows": n, "wall_s": round(wall, 2), "rows_per_s": round(n / wall),
                   "reader_cpu_s": round(time.process_time() - c0, 2),
                   "broker_cpu_s": round(_tree_cpu(broker.pid) - b0, 2),
                   "seaweedfs_cpu_s": round((_tree_cpu(weed.proc.pid) if weed.proc else 0.0)
                                            - w0, 2),
                   "load_1m": round(os.getloadavg()[0], 1)}
            out[f"reader_{way}"].append(res)
            print(f"reader_{way}", json.dumps(res), flush=True)
    return out


if __name__ == "__main__":
    main()
