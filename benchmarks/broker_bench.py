"""Broker CPU and memory benchmark with confluent-kafka (librdkafka).

Measures what the broker process itself spends (psutil CPU times of the broker
subprocess, user + system), not the clients, so numbers are comparable on a shared
machine where wall clock is noisy:

- produce: N x S-byte messages, acks=all, linger.ms=5, batch.size=1 MiB, one partition
  per core of parallelism the client uses (librdkafka batches per partition);
- consume: the same messages read back from offset 0 with a plain assign() consumer;
- RSS: idle with T topics x P partitions, then after each further round of N messages.

    .venv/bin/python benchmarks/broker_bench.py [--messages 1000000] [--size 100] [--rounds 3]

Results go to stdout as JSON and a markdown table (paste into docs/benchmarks/broker.md).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(data_dir: str, port: int) -> subprocess.Popen[bytes]:
    out = open(os.path.join(data_dir, "..", "broker.out"), "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "yak.broker.server", "--data-dir", data_dir,
         "--listen", f"127.0.0.1:{port}"],
        stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
    )
    path = Path(data_dir).parent / "broker.out"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if b"Yak broker ready" in path.read_bytes():
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("broker did not start:\n" + path.read_text(errors="replace")[-3000:])


def cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def create_topics(bootstrap: str, topics: list[NewTopic]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics(topics, request_timeout=60).values():
        f.result(60)


def produce(bootstrap: str, topic: str, partitions: int, n: int, size: int) -> float:
    p = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
        "batch.size": 1048576, "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000, "compression.type": "none",
    })
    payload = b"x" * size
    t0 = time.monotonic()
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(120)
    if left:
        raise SystemExit(f"{left} messages not delivered")
    return time.monotonic() - t0


def consume(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
        "fetch.min.bytes": 1, "fetch.max.bytes": 52428800,
        "max.partition.fetch.bytes": 10485760, "queued.min.messages": 1_000_000,
        "fetch.wait.max.ms": 100,
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    t0 = time.monotonic()
    while got < n:
        for m in c.consume(100_000, 1.0):
            if m.error() is None:
                got += 1
        if time.monotonic() - t0 > 300:
            raise SystemExit(f"consumed only {got}/{n}")
    elapsed = time.monotonic() - t0
    c.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3, help="extra produce rounds for RSS growth")
    ap.add_argument("--idle-topics", type=int, default=100)
    ap.add_argument("--idle-partitions", type=int, default=10)
    a = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="yak-bench-") as tmp:
        data = os.path.join(tmp, "data")
        os.mkdir(data)
        port = free_port()
        bootstrap = f"127.0.0.1:{port}"
        proc = start_broker(data, port)
        bp = psutil.Process(proc.pid)
        res: dict[str, object] = {"messages": a.messages, "size": a.size,
                                  "partitions": a.partitions}
        try:
            time.sleep(1)
            res["rss_start_mb"] = bp.memory_info().rss / 2**20
            create_topics(bootstrap, [NewTopic(f"idle-{i}", a.idle_partitions, 1)
                                      for i in range(a.idle_topics)])
            time.sleep(3)  # let a few maintenance passes run
            res["rss_idle_mb"] = bp.memory_info().rss / 2**20
            res["idle_cpu_s_per_s"] = _idle_cpu(bp, 5.0)

            create_topics(bootstrap, [NewTopic("bench", a.partitions, 1)])
            c0 = cpu(bp)
            wall = produce(bootstrap, "bench", a.partitions, a.messages, a.size)
            c1 = cpu(bp)
            res["produce_wall_s"] = wall
            res["produce_msgs_per_s"] = a.messages / wall
            res["produce_broker_cpu_s"] = c1 - c0
            res["produce_broker_us_per_msg"] = (c1 - c0) / a.messages * 1e6
            res["rss_after_produce_mb"] = bp.memory_info().rss / 2**20

            c0 = cpu(bp)
            wall = consume(bootstrap, "bench", a.partitions, a.messages)
            c1 = cpu(bp)
            res["consume_wall_s"] = wall
            res["consume_msgs_per_s"] = a.messages / wall
            res["consume_broker_cpu_s"] = c1 - c0
            res["consume_broker_us_per_msg"] = (c1 - c0) / a.messages * 1e6
            res["rss_after_consume_mb"] = bp.memory_info().rss / 2**20

            growth = []
            for _ in range(a.rounds):
                produce(bootstrap, "bench", a.partitions, a.messages, a.size)
                growth.append(round(bp.memory_info().rss / 2**20, 1))
            res["rss_growth_mb"] = growth
            res["data_mb"] = sum(f.stat().st_size for f in Path(data).rglob("*.log")) / 2**20
        finally:
            proc.terminate()
            proc.wait(30)
    print(json.dumps(res, indent=1))
    print()
    print("| metric | value |\n|---|---|")
    for k, v in res.items():
        print(f"| {k} | {round(v, 3) if isinstance(v, float) else v} |")


def _idle_cpu(bp: psutil.Process, seconds: float) -> float:
    c0 = cpu(bp)
    time.sleep(seconds)
    return (cpu(bp) - c0) / seconds


if __name__ == "__main__":
    main()
