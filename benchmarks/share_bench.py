"""Share groups against consumer groups (issue 24's benchmark): 4 share consumers and 4
consumer-group consumers on one 4-partition topic, 100 B and 1 KiB records.

A real broker process (`python -m yak.broker.server`) and real clients, each consumer in
a process of its own (confluent-kafka's ShareConsumer and Consumer; one Python process
for all eight would measure the GIL). Per size the records are produced once, then the
two kinds take turns over the same records (new group ids each run, from the earliest
offset), alternating which goes first, so load on this shared machine hits both alike.

Reported per run:
- records/s: records delivered to the four consumers over the time from the first
  record any of them got to the last one (joins and rebalances excluded);
- broker CPU per record (user + system of the broker process over that same window,
  psutil);
- done/s: records acknowledged (share: explicit ACCEPT of every record, sent with the
  next fetch, until DescribeShareGroupOffsets reports no lag; consumer group: offsets
  committed, until the committed offsets reach the log end), from the first record to
  the moment the broker says everything is done;
- then a latency run per kind: the consumers idle at the log end, one record produced
  every 10 ms carrying its send time; produce -> first delivery, p50/p99/max.

    .venv/bin/python benchmarks/share_bench.py [--records-100 200000] [--records-1k 100000]
        [--rounds 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from yak.client.share_groups import ShareAdminClient  # noqa: E402
from yak.client.transactions import TransactionalClient  # noqa: E402

CONSUMERS = 4
PARTITIONS = 4
_TS = struct.Struct(">d")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="yak-share-bench-")
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "yak.broker.server"]
        env = dict(os.environ)
        if os.environ.get("YAK_BENCH_PROFILE"):  # the broker under cProfile (its loop's CPU)
            cmd = [sys.executable, str(REPO / "benchmarks" / "profile_serve.py"), "serve",
                   "--http", "none"]
            env["PROF_OUT"] = os.environ["YAK_BENCH_PROFILE"]
        self.proc = subprocess.Popen(
            [*cmd, "--data-dir", self.dir, "--listen", self.bootstrap],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO, text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "ready" not in line:
            raise RuntimeError(f"broker did not start: {line!r}")
        self.ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def loop_cpu(self) -> float:
        """The event-loop (main) thread's CPU: the request path, without the storage and
        flush threads."""
        for t in self.ps.threads():
            if t.id == self.proc.pid:
                return t.user_time + t.system_time
        return 0.0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


# ------------------------------------------------------------------ consumer processes

def _consumer(kind: str, bootstrap: str, group: str, topic: str, assigned: Any,
              latency: bool) -> Any:
    if kind == "share":
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit", "log_level": 3})
        c.subscribe([topic])
        return c
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "latest" if latency else "earliest",
                  "enable.auto.commit": True, "auto.commit.interval.ms": 200,
                  "log_level": 3})

    def on_assign(consumer: Any, partitions: Any) -> None:
        # fetching starts now: the run's clock starts at the first assignment
        if partitions:
            with assigned.get_lock():
                if not assigned.value:
                    assigned.value = time.time()

    c.subscribe([topic], on_assign=on_assign)
    return c


def _poll(kind: str, c: Any, latency: bool) -> list[Any]:
    if kind == "share":
        return c.poll(0.1)
    if latency:  # consume(n, t) waits for n records or t: no batching when timing one
        m = c.poll(0.1)
        return [] if m is None else [m]
    return c.consume(500, 0.1)


def worker(kind: str, bootstrap: str, group: str, topic: str, total: Any, stop: Any,
           out: Any, latency: bool, assigned: Any) -> None:
    """Consume until `stop`; explicit ACCEPT of every share record; put (first record
    time, last record time, records, latencies) on `out`."""
    c = _consumer(kind, bootstrap, group, topic, assigned, latency)
    me = psutil.Process()
    cpu_first = 0.0
    first = last = 0.0
    n = 0
    cpu_last = 0.0
    lat: list[float] = []
    try:
        while not stop.is_set():
            msgs = _poll(kind, c, latency)
            if not msgs:
                continue
            now = time.time()
            good = 0
            for m in msgs:
                if m.error() is not None:
                    continue
                good += 1
                if kind == "share":
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                    if latency and m.delivery_count() == 1:
                        lat.append(now - _TS.unpack_from(m.value())[0])
                elif latency:
                    lat.append(now - _TS.unpack_from(m.value())[0])
            if not good:
                continue
            if not first:
                first = now
                cpu_first = sum(me.cpu_times()[:2])
            last = now
            cpu_last = sum(me.cpu_times()[:2]) if not latency else 0.0
            n += good
            with total.get_lock():
                total.value += good
        if kind == "share":
            with contextlib.suppress(Exception):
                c.commit_sync()
    finally:
        c.close()
        out.put((first, last, n, lat, cpu_last - cpu_first if first else 0.0))


# ------------------------------------------------------------------ runs

def produce(bootstrap: str, topic: str, n: int, size: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    value = os.urandom(size)
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def _earliest(admin: AdminClient, group: str) -> None:
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(15)


def _done(kind: str, bootstrap: str, group: str, topic: str, ends: dict[int, int]) -> bool:
    """Whether the broker says every record is done: no share lag / offsets at the end."""
    if kind == "share":
        with ShareAdminClient(bootstrap, client_id="bench", retries=1) as a:
            offs = a.share_group_offsets(group, {topic: range(PARTITIONS)})
        return all(o.start_offset == ends[o.partition] for o in offs)
    with TransactionalClient(bootstrap, client_id="bench", retries=1) as a:
        got = a.committed_offsets(group, [(topic, p) for p in range(PARTITIONS)],
                                  require_stable=False)
    return all(got.get((topic, p), (-1, ""))[0] >= ends[p] for p in range(PARTITIONS))


def run(broker: Broker, kind: str, topic: str, n: int, group: str) -> dict[str, Any]:
    """One throughput run over the `n` records already in `topic`."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    if kind == "share":
        _earliest(admin, group)
    with TransactionalClient(broker.bootstrap, client_id="bench") as cl:
        ends = {p: o for (_, p), o in cl.list_offsets(
            {(topic, p): -1 for p in range(PARTITIONS)}).items()}
    ctx = mp.get_context("fork")
    total, stop, out = ctx.Value("q", 0), ctx.Event(), ctx.Queue()
    assigned = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=worker, args=(kind, broker.bootstrap, group, topic, total,
                                              stop, out, False, assigned))
             for _ in range(CONSUMERS)]
    for pr in procs:
        pr.start()
    deadline = time.monotonic() + 300
    # The clock starts when fetching does: a consumer group's first assignment (librdkafka
    # fetches ahead at once), a share group's first record (its first ShareFetch goes out
    # with the first poll after the heartbeat's assignment, one round trip before)
    started = (lambda: assigned.value) if kind == "group" else (lambda: total.value)
    while not started() and time.monotonic() < deadline:
        time.sleep(0.002)
    cpu0, loop0 = broker.cpu(), broker.loop_cpu()
    while total.value < n and time.monotonic() < deadline:
        time.sleep(0.005)
    cpu1, loop1 = broker.cpu(), broker.loop_cpu()
    delivered_at = time.time()
    done_at = None
    while time.monotonic() < deadline:
        if _done(kind, broker.bootstrap, group, topic, ends):
            done_at = time.time()
            break
        time.sleep(0.05)
    stop.set()
    results = [out.get(timeout=60) for _ in procs]
    for pr in procs:
        pr.join(30)
    first = min(r[0] for r in results if r[0])
    if kind == "group":
        first = min(first, assigned.value)
    last = max(r[1] for r in results)
    got = sum(r[2] for r in results)
    window = max(last - first, 1e-6)
    return {
        "kind": kind, "records": n, "delivered": got,
        "per_consumer": sorted(r[2] for r in results),
        "seconds": round(window, 3),
        "records_per_s": round(n / window),
        "broker_cpu_us_per_record": round((cpu1 - cpu0) / n * 1e6, 2),
        "broker_loop_cpu_us_per_record": round((loop1 - loop0) / n * 1e6, 2),
        # the four consumer processes, from each one's first record to its last
        "client_cpu_us_per_record": round(sum(r[4] for r in results) / n * 1e6, 2),
        "done_per_s": round(n / (done_at - first)) if done_at else None,
        "done_after_last_delivery_s": round(done_at - delivered_at, 3) if done_at else None,
    }


def latency(broker: Broker, kind: str, topic: str, group: str, count: int) -> dict[str, Any]:
    """Produce -> first delivery, one record each 10 ms to consumers idle at the end."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    if kind == "share":
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
            "share.auto.offset.reset", "latest", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(15)
    ctx = mp.get_context("fork")
    total, stop, out = ctx.Value("q", 0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(kind, broker.bootstrap, group, topic, total,
                                              stop, out, True, ctx.Value("d", 0.0)))
             for _ in range(CONSUMERS)]
    for pr in procs:
        pr.start()
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    # warm-up: records until the group is consuming (assignments done, fetches waiting)
    deadline = time.monotonic() + 60
    while total.value < 20 and time.monotonic() < deadline:
        p.produce(topic, _TS.pack(0.0) + b"w" * 92)
        p.flush(5)
        time.sleep(0.05)
    time.sleep(1.0)
    base = total.value
    for i in range(count):
        p.produce(topic, _TS.pack(time.time()) + b"x" * 92, partition=i % PARTITIONS)
        p.poll(0)
        time.sleep(0.01)
    p.flush(30)
    deadline = time.monotonic() + 30
    while total.value < base + count and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    results = [out.get(timeout=60) for _ in procs]
    for pr in procs:
        pr.join(30)
    lat = sorted(x * 1000 for r in results for x in r[3] if x < 1e6)  # warm-up ts is 0
    if not lat:
        return {"kind": kind, "samples": 0}
    return {"kind": kind, "samples": len(lat),
            "p50_ms": round(statistics.median(lat), 2),
            "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
            "max_ms": round(lat[-1], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records-100", type=int, default=200_000)
    ap.add_argument("--records-1k", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--latency-records", type=int, default=300)
    ap.add_argument("--sizes", type=str, default="100,1024", help="record sizes, B")
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--json", type=str, default=None)
    args = ap.parse_args()
    broker = Broker()
    out: dict[str, Any] = {"load_before": os.getloadavg(), "runs": [], "latency": []}
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        sizes = [int(x) for x in args.sizes.split(",")]
        for size in sizes:
            n = args.records_100 if size <= 100 else args.records_1k
            topic = f"bench-{size}"
            admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
            produce(broker.bootstrap, topic, n, size)
            for rnd in range(args.rounds):
                order = ("group", "share") if rnd % 2 == 0 else ("share", "group")
                for kind in order:
                    r = run(broker, kind, topic, n, f"{kind}-{size}-{rnd}")
                    r.update(size=size, round=rnd, load=os.getloadavg()[0])
                    out["runs"].append(r)
                    print(json.dumps(r), flush=True)
        lt = "bench-latency"
        admin.create_topics([NewTopic(lt, PARTITIONS, 1)])[lt].result(30)
        for kind in () if args.no_latency else ("group", "share", "share", "group"):
            r = latency(broker, kind, lt, f"lat-{kind}-{len(out['latency'])}",
                        args.latency_records)
            out["latency"].append(r)
            print(json.dumps(r), flush=True)
    finally:
        broker.stop()
    out["load_after"] = os.getloadavg()
    for size in (100, 1024):
        rates = {k: [r["records_per_s"] for r in out["runs"]
                     if r["size"] == size and r["kind"] == k] for k in ("share", "group")}
        if rates["share"] and rates["group"]:
            print(f"{size} B: share/group records/s = "
                  f"{statistics.median(rates['share']) / statistics.median(rates['group']):.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
