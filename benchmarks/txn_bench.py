"""Transactions benchmark (issue 12): what transactions cost, measured against one broker.

    .venv/bin/python benchmarks/txn_bench.py txn [--messages 200000] [--size 100]
        transactional produce (confluent-kafka) at several transaction sizes vs the
        idempotent producer: msg/s and broker CPU us/msg; commits/s with one producer and
        one message per transaction; end-to-end latency of a committed transaction to a
        read_committed consumer (p50/p99)
    .venv/bin/python benchmarks/txn_bench.py plain-cpu --before TREE [--after TREE] [--runs 3]
        plain (non-transactional) produce, broker CPU us/msg, two copies of the source tree
        (default after: this one), runs alternating (benchmarks/broker_bench.py of each)
    .venv/bin/python benchmarks/txn_bench.py spark [--rows 200000]
        the Spark exactly-once streaming sink, transactions vs the state-topic markers

Each subcommand starts its own broker(s) on free ports and prints JSON plus a markdown
table. Figures are wall clock and psutil CPU of the broker process; the machine is shared,
so compare ratios from one run (docs/benchmarks/transactions.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, tree: Path = REPO, *settings: str) -> None:
        self.tmp = tempfile.mkdtemp(prefix="yak-txn-bench-")
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        out = Path(self.tmp) / "out.txt"
        cmd = [sys.executable, "-c", "from yak.cli.main import app; app()", "serve",
               "--data-dir", f"{self.tmp}/data", "--listen", self.bootstrap, "--http", "none"]
        for s in settings:
            cmd += ["--set", s]
        with open(out, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=tree)
        for _ in range(600):
            if b"ready" in out.read_bytes():
                break
            if self.proc.poll() is not None:
                raise SystemExit(out.read_text()[-3000:])
            time.sleep(0.05)
        self.ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.tmp, ignore_errors=True)


def create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced while waiting
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(60)


def _producer(bootstrap: str, txn_id: str | None, linger_ms: int = 5) -> Any:
    from confluent_kafka import Producer

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": linger_ms,
                            "batch.size": 1048576, "queue.buffering.max.messages": 2_000_000,
                            "queue.buffering.max.kbytes": 2_000_000, "acks": "all",
                            "enable.idempotence": True}
    if txn_id is not None:
        conf["transactional.id"] = txn_id
    return Producer(conf)


def produce_run(b: Broker, topic: str, n: int, size: int, txn_size: int | None,
                partitions: int = 4) -> dict[str, float]:
    """n messages, idempotent (txn_size None) or in transactions of txn_size messages."""
    create(b.bootstrap, topic, partitions)
    p = _producer(b.bootstrap, None if txn_size is None else f"bench-{topic}")
    if txn_size is not None:
        p.init_transactions(30)
    payload = b"x" * size
    c0, t0 = b.cpu(), time.monotonic()
    i = 0
    while i < n:
        k = n - i if txn_size is None else min(txn_size, n - i)
        if txn_size is not None:
            p.begin_transaction()
        for j in range(k):
            while True:
                try:
                    p.produce(topic, payload, partition=(i + j) % partitions)
                    break
                except BufferError:
                    p.poll(0.01)
        i += k
        if txn_size is not None:
            p.commit_transaction(60)
        else:
            p.poll(0)
    if txn_size is None and p.flush(120):
        raise SystemExit("undelivered messages")
    wall, cpu = time.monotonic() - t0, b.cpu() - c0
    return {"msgs_per_s": n / wall, "broker_us_per_msg": cpu / n * 1e6, "wall_s": wall}


def commits_per_s(b: Broker, seconds: float) -> dict[str, float]:
    create(b.bootstrap, "commits", 1)
    p = _producer(b.bootstrap, "bench-commits", linger_ms=0)  # each transaction is sent now
    p.init_transactions(30)
    n = 0
    c0, t0 = b.cpu(), time.monotonic()
    while time.monotonic() - t0 < seconds:
        p.begin_transaction()
        p.produce("commits", b"x" * 100, partition=0)
        p.commit_transaction(30)
        n += 1
    wall, cpu = time.monotonic() - t0, b.cpu() - c0
    return {"commits_per_s": n / wall, "broker_us_per_commit": cpu / n * 1e6}


def e2e_latency(b: Broker, seconds: float, rate: float) -> dict[str, float]:
    """One-message transactions at `rate`/s; a read_committed consumer's receipt time minus
    the time just before produce()."""
    from confluent_kafka import Consumer, TopicPartition

    create(b.bootstrap, "e2e", 1)
    lat: list[float] = []
    stop = threading.Event()
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "e2e",
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 10,
                  "enable.auto.commit": False})
    c.assign([TopicPartition("e2e", 0, 0)])

    def consume() -> None:
        while not stop.is_set():
            # poll(), not consume(n, t): consume waits for n messages or the timeout
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                lat.append(time.time() - float(m.value().decode()))

    th = threading.Thread(target=consume, daemon=True)
    th.start()
    time.sleep(2)  # the consumer is fetching
    p = _producer(b.bootstrap, "bench-e2e", linger_ms=0)
    p.init_transactions(30)
    t0 = time.monotonic()
    sent = 0
    while time.monotonic() - t0 < seconds:
        p.begin_transaction()
        p.produce("e2e", str(time.time()).encode(), partition=0)
        p.commit_transaction(30)
        sent += 1
        pause = t0 + sent / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    deadline = time.monotonic() + 10
    while len(lat) < sent and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    th.join(5)
    c.close()
    q = statistics.quantiles(sorted(lat), n=100)
    return {"transactions": sent, "received": len(lat), "p50_ms": q[49] * 1000,
            "p99_ms": q[98] * 1000}


def _median_run(runs: list[dict[str, float]]) -> dict[str, Any]:
    rates = sorted(r["msgs_per_s"] for r in runs)
    cpus = sorted(r["broker_us_per_msg"] for r in runs)
    return {"msgs_per_s": statistics.median(rates), "broker_us_per_msg": statistics.median(cpus),
            "runs_msgs_per_s": [round(r["msgs_per_s"]) for r in runs]}


def cmd_txn(a: argparse.Namespace) -> dict[str, Any]:
    b = Broker()
    res: dict[str, Any] = {"messages": a.messages, "size": a.size}
    try:
        # 1000-message transactions vs idempotent: alternating runs, medians (one run of
        # either is a second or two: too short to trust alone on a shared machine)
        idem, t1000 = [], []
        for r in range(a.repeats):
            idem.append(produce_run(b, f"idem{r}", a.messages, a.size, None))
            t1000.append(produce_run(b, f"tx1000-{r}", a.messages, a.size, 1000))
        res["idempotent"] = _median_run(idem)
        res["txn_1000"] = _median_run(t1000)
        res["txn_1000"]["vs_idempotent"] = (res["txn_1000"]["msgs_per_s"]
                                           / res["idempotent"]["msgs_per_s"])
        for k in (10, 100, 10000):
            n = min(a.messages, k * 2000)  # small transactions: a bounded count of them
            res[f"txn_{k}"] = produce_run(b, f"tx{k}", n, a.size, k)
            res[f"txn_{k}"]["messages"] = n
            res[f"txn_{k}"]["vs_idempotent"] = (res[f"txn_{k}"]["msgs_per_s"]
                                               / res["idempotent"]["msgs_per_s"])
        res["one_message_transactions"] = commits_per_s(b, a.seconds)
        res["e2e"] = e2e_latency(b, a.seconds, a.rate)
    finally:
        b.stop()
    return res


def cmd_plain_cpu(a: argparse.Namespace) -> dict[str, Any]:
    before = Path(a.before).resolve()
    after = Path(a.after).resolve() if a.after else REPO
    out: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(a.runs):
        for name, tree in (("before", before), ("after", after)):
            r = subprocess.run(
                [sys.executable, str(tree / "bench" / "broker_bench.py"), "--messages",
                 str(a.messages), "--rounds", "0", "--idle-topics", "1", "--idle-partitions",
                 "1"], capture_output=True, text=True, cwd=tree, check=True)
            got = json.loads(r.stdout[: r.stdout.index("\n\n")])
            out[name].append(got["produce_broker_us_per_msg"])
    return {"messages": a.messages, "before": str(before), "after": str(after),
            "us_per_msg": out,
            "median_before": statistics.median(out["before"]),
            "median_after": statistics.median(out["after"]),
            "after_over_before": statistics.median(out["after"])
            / statistics.median(out["before"])}


def cmd_spark(a: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from confluent_kafka import Producer
    from pyspark.sql import SparkSession

    from yak.spark import YakDataSource

    b = Broker()
    res: dict[str, Any] = {"rows": a.rows}
    try:
        create(b.bootstrap, "src", 2)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
        for i in range(a.rows):
            p.produce("src", b"v" * 100, key=b"%d" % (i % 1000), partition=i % 2)
            if i % 10000 == 0:
                p.poll(0)
        p.flush(60)
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(YakDataSource)
        # the first run warms the JVM and the Python workers up: not recorded
        for i, mode in enumerate(("markers", "transactions", "markers", "transactions",
                                  "markers")):
            dst = f"dst-{mode}-{time.monotonic_ns()}"
            create(b.bootstrap, dst, 2)
            ckpt = tempfile.mkdtemp(prefix="ckpt-")
            c0, t0 = b.cpu(), time.monotonic()
            q = (spark.readStream.format("yak").option("kafka.bootstrap.servers", b.bootstrap)
                 .option("subscribe", "src").option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", str(a.per_batch)).load()
                 .selectExpr("key", "value").writeStream.format("yak")
                 .option("kafka.bootstrap.servers", b.bootstrap).option("topic", dst)
                 .option("exactlyOnceMode", mode).option("checkpointLocation", ckpt)
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            wall, cpu = time.monotonic() - t0, b.cpu() - c0
            if i:
                res.setdefault(mode, []).append({"rows_per_s": a.rows / wall,
                                                 "broker_us_per_row": cpu / a.rows * 1e6})
            shutil.rmtree(ckpt, ignore_errors=True)
        spark.stop()
    finally:
        b.stop()
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("txn")
    t.add_argument("--messages", type=int, default=200_000)
    t.add_argument("--size", type=int, default=100)
    t.add_argument("--seconds", type=float, default=10.0)
    t.add_argument("--rate", type=float, default=50.0)
    t.add_argument("--repeats", type=int, default=3)
    pc = sub.add_parser("plain-cpu")
    pc.add_argument("--before", required=True)
    pc.add_argument("--after", help="the tree to compare (default: this one)")
    pc.add_argument("--messages", type=int, default=500_000)
    pc.add_argument("--runs", type=int, default=3)
    sp = sub.add_parser("spark")
    sp.add_argument("--rows", type=int, default=200_000)
    sp.add_argument("--per-batch", type=int, default=50_000)
    a = ap.parse_args()
    res = {"txn": cmd_txn, "plain-cpu": cmd_plain_cpu, "spark": cmd_spark}[a.cmd](a)
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    res["load_average"] = os.getloadavg()
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
