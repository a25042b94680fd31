"""Fetch from follower (KIP-392, issue 23): consumer throughput and cross-rack bytes with
and without `client.rack`, on three brokers in racks a, b, c over a real etcd.

    .venv/bin/python benchmarks/fetch_from_follower.py --records 200000 --rounds 3

Starts `yak cluster up -n 3 --racks a,b,c --set replica.selector.class=...` in a temporary
directory, creates one topic (6 partitions, RF 3: two led in each rack), produces
`--records` values of `--size` bytes, then reads the whole topic with one confluent-kafka
consumer (assigned, from the beginning), alternating `client.rack=b` and no rack,
`--rounds` times each. Per read: records/s and MB/s of values, and the record bytes each
broker sent by Fetch (`yak_broker_topic_bytes_out_total`, from its /metrics), so the
bytes that crossed racks are those brokers 1 (rack a) and 3 (rack c) sent to the consumer
in rack b. Prints one JSON object per read and a summary; stops the cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
YAK = [sys.executable, "-m", "yak.cli.main"]
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
TOPIC = "fff-bench"
PARTITIONS = 6


def free_block(span: int = 20) -> int:
    for _ in range(200):
        base = random.randrange(20000, 60000 - span)
        socks = []
        try:
            for p in range(base, base + span):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise SystemExit("no block of free ports")


def bytes_out(http_port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{http_port}/metrics", timeout=120).text
    m = re.search(rf'^yak_broker_topic_bytes_out_total\{{topic="{TOPIC}"\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def read_all(bootstrap: str, total: int, rack: str | None) -> tuple[int, float]:
    conf = {"bootstrap.servers": bootstrap, "group.id": "fff-bench",
            "enable.auto.commit": False, "fetch.max.bytes": 50 << 20,
            "max.partition.fetch.bytes": 4 << 20}
    if rack is not None:
        conf["client.rack"] = rack
    c = Consumer(conf)
    c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    n = 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + 600
    try:
        while n < total and time.monotonic() < deadline:
            for m in c.consume(10_000, 1.0):
                if m.error() is None:
                    n += 1
        return n, time.perf_counter() - t0
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="fff-bench-"))
    base = free_block()
    up = subprocess.run([*YAK, "cluster", "up", "-n", "3", "--racks", "a,b,c", "--dir", str(d),
                         "--base-port", str(base), "--set", f"replica.selector.class={SELECTOR}"],
                        capture_output=True, text=True, cwd=REPO, timeout=300)
    if up.returncode != 0:
        raise SystemExit(up.stderr + up.stdout)
    bootstrap = ",".join(f"127.0.0.1:{base + i}" for i in range(3))
    http = {1: base + 5, 2: base + 6, 3: base + 7}
    rows = []
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # Leaders 1,2,3,1,2,3: a third of the partitions led in rack b.
        layout = [[1, 2, 3], [2, 3, 1], [3, 1, 2]] * (PARTITIONS // 3)
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, replica_assignment=layout)])[
            TOPIC].result(30)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                      "batch.size": 1 << 20})
        value = os.urandom(args.size)
        for i in range(args.records):
            while True:
                try:
                    p.produce(TOPIC, value, partition=i % PARTITIONS)
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(120) == 0
        time.sleep(2)  # followers' high watermarks catch up (one replica fetch round)
        for _ in range(args.rounds):
            for rack in ("b", None):
                before = {n: bytes_out(port) for n, port in http.items()}
                load = os.getloadavg()[0]
                n, secs = read_all(bootstrap, args.records, rack)
                after = {n_: bytes_out(port) for n_, port in http.items()}
                sent = {b: after[b] - before[b] for b in http}
                row = {"client_rack": rack, "records": n, "seconds": round(secs, 2),
                       "records_per_s": round(n / secs), "value_mb_per_s":
                       round(n * args.size / secs / 1e6, 1),
                       "bytes_sent_by_broker": sent,
                       "cross_rack_bytes": sent[1] + sent[3], "load_avg_1m": load}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        subprocess.run([*YAK, "cluster", "purge", "--dir", str(d)], capture_output=True,
                       cwd=REPO, timeout=120)
    for rack in ("b", None):
        rs = [r for r in rows if r["client_rack"] == rack]
        total = sum(sum(r["bytes_sent_by_broker"].values()) for r in rs)
        cross = sum(r["cross_rack_bytes"] for r in rs)
        print(f"client.rack={rack or '(none)'}: median"
              f" {statistics.median(r['records_per_s'] for r in rs):,.0f} records/s"
              f" ({statistics.median(r['value_mb_per_s'] for r in rs)} MB/s of values);"
              f" cross-rack {cross / max(total, 1):.0%} of {total / 1e6:.1f} MB sent")


if __name__ == "__main__":
    main()
