"""Schema registry benchmark: Spark reading Avro through the registry vs raw bytes, the
valueFormat decoder alone, and registry lookups of a cached id over HTTP.

    .venv/bin/python benchmarks/registry_bench.py --rows 1000000 --json results.json

Starts its own `yak serve --http` (broker + gateway + registry). Reports wall-clock rates
and CPU seconds (psutil, user+system) because the machine is shared: compare ratios from
one run, not absolute rates across runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_bench import REPO, Meter, _free_port, _tree_cpu  # noqa: E402

SCHEMA = {"type": "record", "name": "Ride", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"},
    {"name": "city", "type": "string"},
    {"name": "km", "type": "double"},
    {"name": "passengers", "type": "int"},
    {"name": "note", "type": ["null", "string"], "default": None},
]}


def _start(tmp: str) -> tuple[subprocess.Popen[bytes], str, str]:
    kport, hport = _free_port(), _free_port()
    out = Path(tmp) / "serve.txt"
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from yak.cli.main import app; app()", "serve",
             "--data-dir", str(Path(tmp) / "data"), "--listen", f"127.0.0.1:{kport}",
             "--http", f"127.0.0.1:{hport}"], stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    for _ in range(400):
        if "Yak HTTP gateway on" in out.read_text(errors="replace"):
            return proc, f"127.0.0.1:{kport}", f"http://127.0.0.1:{hport}"
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(out.read_text())


def _payloads(n: int) -> list[bytes]:
    from fastavro import parse_schema, schemaless_writer

    parsed = parse_schema(SCHEMA)
    out = []
    buf = io.BytesIO()
    for i in range(n):
        buf.seek(0)
        buf.truncate()
        schemaless_writer(buf, parsed, {"id": i, "city": f"city-{i % 50}", "km": i * 0.25,
                                        "passengers": i % 5,
                                        "note": None if i % 3 else f"n{i % 1000}"})
        out.append(buf.getvalue())
    return out


def lookups(url: str, path: str, seconds: float, threads: int, server_pid: int) -> dict:
    """GETs of `path` over keep-alive connections, `threads` clients at once."""
    import httpx

    count = [0] * threads
    stop = time.monotonic() + seconds

    def worker(k: int) -> None:
        with httpx.Client(base_url=url, timeout=10) as c:
            while time.monotonic() < stop:
                r = c.get(path)
                assert r.status_code == 200
                count[k] += 1

    cpu0 = _tree_cpu(server_pid)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    n = sum(count)
    server_cpu = _tree_cpu(server_pid) - cpu0
    return {"path": path, "requests": n, "per_s": round(n / wall), "threads": threads,
            "server_cpu_us_per_request": round(server_cpu / n * 1e6, 1)}


def in_process_lookup(n: int = 100_000) -> dict:
    """The registry's own work for GET /schemas/ids/{id} (state lookup, body), no HTTP."""
    from yak.registry.api import SRResponse
    from yak.registry.service import SchemaRegistry
    from yak.registry.state import SchemaVersion

    reg = SchemaRegistry("127.0.0.1:1")
    sv = SchemaVersion("rides-value", 1, 1, "AVRO", json.dumps(SCHEMA))
    reg.state.by_id[1] = sv
    c0 = time.process_time()
    for _ in range(n):
        got = reg.by_id(1)
        SRResponse({"schema": got.schema})
    cpu = time.process_time() - c0
    return {"lookups": n, "cpu_us_per_lookup": round(cpu / n * 1e6, 2),
            "lookups_per_cpu_s": round(n / cpu)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--lookup-seconds", type=float, default=5.0)
    ap.add_argument("--json")
    ap.add_argument("--skip-spark", action="store_true", help="decoder and lookups only")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="yak-registry-bench-")
    proc, bootstrap, url = _start(tmp)
    results: dict[str, object] = {"rows": args.rows, "date": time.strftime("%Y-%m-%d"),
                                  "load_avg_start": os.getloadavg()[0]}
    try:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        sr = SchemaRegistryClient({"url": url, "timeout": 60})
        sid = sr.register_schema("rides-value", Schema(json.dumps(SCHEMA), "AVRO"))
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("rides", 2, 1)])["rides"].result(30)
        header = struct.pack(">bI", 0, sid)
        payloads = _payloads(args.rows)
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                      "queue.buffering.max.messages": 1_000_000})
        for i, body in enumerate(payloads):
            while True:
                try:
                    p.produce("rides", value=header + body, partition=i % 2)
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(120) == 0

        # The decoder alone (one task's work, no Spark): 1 batch of all rows of a partition.
        import numpy as np
        import pyarrow as pa

        from yak.registry.compat import parse
        from yak.spark.registry_codec import ValueDecoder, arrow_type

        parsed = parse("AVRO", json.dumps(SCHEMA), [])
        values = pa.array([header + b for b in payloads[: min(args.rows, 500_000)]], pa.binary())
        offs = np.arange(len(values))
        for name, force_fallback in (("decoder_polars", False), ("decoder_fastavro", True)):
            dec = ValueDecoder(url, "avro", arrow_type(parsed))
            dec.registry._by_id[sid] = parsed
            if force_fallback:
                import yak.spark.registry_codec as rc

                saved = rc._polars_can_read
                rc._polars_can_read = lambda *a: False  # type: ignore[assignment]
            c0 = time.process_time()
            t0 = time.perf_counter()
            out = dec.decode(values, offs, "rides", 0)
            wall = time.perf_counter() - t0
            cpu = time.process_time() - c0
            if force_fallback:
                rc._polars_can_read = saved  # type: ignore[assignment]
            assert len(out) == len(values)
            results[name] = {"rows": len(values), "rows_per_s": round(len(values) / wall),
                             "cpu_s_per_million": round(cpu / len(values) * 1e6, 2)}
            print(name, results[name], flush=True)

        results["in_process_lookup"] = in_process_lookup()
        print("in_process_lookup", results["in_process_lookup"], flush=True)
        for threads in (1, 4):
            for path in (f"/schemas/ids/{sid}", "/schemas/types"):
                key = f"http_{'ids' if 'ids' in path else 'types'}_{threads}_threads"
                results[key] = lookups(url, path, args.lookup_seconds, threads, proc.pid)
                print(key, results[key], flush=True)
        if args.skip_spark:
            return
        # Spark: the same topic read raw and through the registry, into the noop sink.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        from yak.spark import YakDataSource

        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(YakDataSource)

        def read(fmt: bool) -> object:
            r = (spark.read.format("yak").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", "rides"))
            if fmt:
                r = r.option("valueFormat", "avro").option("schema.registry.url", url)
            return r.load()

        read(True).write.format("noop").mode("overwrite").save()  # warm-up: JVM, workers
        for rnd in range(4):  # alternate, so neither always runs first
            for name, fmt in ((("spark_raw", False), ("spark_avro", True)) if rnd % 2 == 0
                              else (("spark_avro", True), ("spark_raw", False))):
                df = read(fmt)
                with Meter(proc.pid) as m:
                    df.write.format("noop").mode("overwrite").save()
                entry = {"wall_s": round(m.wall, 2), "rows_per_s": round(args.rows / m.wall),
                         "spark_cpu_s": round(m.spark_cpu, 2),
                         "rows_per_spark_cpu_s": round(args.rows / m.spark_cpu)}
                results.setdefault(name, []).append(entry)  # type: ignore[union-attr]
                print(name, entry, flush=True)
        # the decoded values are right (spot check)
        row = read(True).where("value.id = 7").select("value.*").collect()[0].asDict()
        assert row == {"id": 7, "city": "city-7", "km": 1.75, "passengers": 2, "note": None}, row
        spark.stop()

        results["load_avg_end"] = os.getloadavg()[0]
        results["cpus"] = psutil.cpu_count()
    finally:
        proc.terminate()
        proc.wait(30)
        print(json.dumps(results, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
