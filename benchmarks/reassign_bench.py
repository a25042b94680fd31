"""Moving a large partition (issue 23, "Performance"): the copy rate unthrottled and under a
KIP-73 throttle, and what the move does to an acks=all producer's latency.

    .venv/bin/python benchmarks/reassign_bench.py --mb 1000 --rounds 1 --throttle-mb 20

Starts a real etcd and four `yak serve` brokers in a temporary directory, creates one
partition on brokers [1,2,3] and fills it with `--mb` MB of 1 KiB incompressible values
(acks=all). A steady producer then writes `--rate` 1 KiB values a second (acks=all,
idempotent, linger 5 ms) to that same partition for the whole run, and each send's latency
(produce() to its delivery report) is kept. Each round moves the partition twice, to
[1,2,4] and back to [1,2,3]: each move copies the whole log to one new broker while leader
1 stays (so a leadership change is not mistaken for the copy's cost). Before each move the
producer runs `--before` seconds undisturbed (and once, after the preload, `--settle`
seconds not measured); that window is "before", the move itself "during".

- Unthrottled moves first (`--rounds` x 2).
- Then the same with a `--throttle-mb` MB/s throttle set as Kafka's
  kafka-reassign-partitions.sh --throttle does: `leader.replication.throttled.rate` and
  `follower.replication.throttled.rate` on every broker of the move (dynamic broker
  configs), `leader.replication.throttled.replicas` naming the current replicas and
  `follower.replication.throttled.replicas` the adding one (topic configs); both cleared
  after the move, as --verify does.

The rate is the adding replica's log bytes (its `*.log` files) over the move's duration
(AlterPartitionReassignments sent to ListPartitionReassignments empty), and also over the
middle of the copy (10 % to 90 % of the final size, from samples every 0.2 s), which leaves
out the start and the controller's completion. Prints one JSON object per move and a
summary; stops and deletes the cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from yak.client.reassign_wire import ReassignClient
from yak.devcluster.local import LocalEtcd

REPO = Path(__file__).resolve().parent.parent
YAK = [sys.executable, "-m", "yak.cli.main"]
TOPIC = "move-bench"
VALUE = 1024
READY = "Yak broker ready on"


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


class Cluster:
    """A real etcd and four `yak serve` processes without the HTTP gateway (which needs
    packages a bare benchmark machine may lack, and has no part in a move)."""

    def __init__(self, d: Path, base: int, settings: dict[str, str]) -> None:
        self.dir = d
        self.etcd = LocalEtcd(d, [base + 10], [base + 11]).start()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.bootstrap = ",".join(f"127.0.0.1:{base + i}" for i in range(4))
        for n in range(1, 5):
            out = d / f"broker-{n}.out"
            argv = [*YAK, "serve", "--data-dir", str(d / f"broker-{n}"), "--listen",
                    f"127.0.0.1:{base + n - 1}", "--http", "none", "--set",
                    f"metadata.store={self.etcd.url('bench')}", "--set", f"node.id={n}"]
            for k, v in settings.items():
                argv += ["--set", f"{k}={v}"]
            with open(out, "wb") as o, open(d / f"broker-{n}.log", "wb") as e:
                self.procs.append(subprocess.Popen(argv, stdout=o, stderr=e, cwd=REPO))
        deadline = time.monotonic() + 120
        for n in range(1, 5):
            out = d / f"broker-{n}.out"
            while READY not in out.read_text(errors="replace"):
                if time.monotonic() > deadline or self.procs[n - 1].poll() is not None:
                    self.close()
                    raise SystemExit(f"broker {n} did not start: "
                                     + (d / f"broker-{n}.log").read_text()[-2000:])
                time.sleep(0.1)  # waiting for the ready line
        for n in range(4):  # every broker sees all four (a registration is a watch event)
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{base + n}"})
            while len(admin.list_topics(timeout=30).brokers) < 4:
                if time.monotonic() > deadline:
                    self.close()
                    raise SystemExit(f"broker {n + 1} does not see all four brokers")
                time.sleep(0.1)  # waiting for the registrations

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        self.etcd.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def log_bytes(partition_dir: Path) -> int:
    try:
        return sum(f.stat().st_size for f in partition_dir.glob("*.log"))
    except FileNotFoundError:  # a segment deleted between glob and stat (not here: no retention)
        return 0


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Latencies(threading.Thread):
    """`rate` values a second, acks=all; (send time, latency s) of each acknowledged one."""

    def __init__(self, bootstrap: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.rate = bootstrap, rate
        self.samples: list[tuple[float, float]] = []
        self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                      "enable.idempotence": True, "linger.ms": 5,
                      "message.timeout.ms": 120000})
        values = [os.urandom(VALUE) for _ in range(64)]
        tick = 0.01
        per_tick = self.rate * tick
        owed = 0.0
        nxt = time.perf_counter()
        i = 0
        while not self.stop.is_set():
            owed += per_tick
            while owed >= 1:
                sent = time.perf_counter()

                def done(err: object, _msg: object, sent: float = sent) -> None:
                    if err is None:
                        self.samples.append((sent, time.perf_counter() - sent))
                    else:
                        self.failed += 1

                p.produce(TOPIC, values[i % 64], partition=0, on_delivery=done)
                i += 1
                owed -= 1
            nxt += tick
            # Paces the producer; polling (not sleeping) until the next tick serves each
            # delivery report as it arrives, so a latency is not rounded up to a tick.
            while (left := nxt - time.perf_counter()) > 0:
                p.poll(left)
        p.flush(120)

    def window(self, t0: float, t1: float) -> list[float]:
        return [lat for sent, lat in list(self.samples) if t0 <= sent < t1]


def preload(bootstrap: str, megabytes: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                  "batch.size": 1 << 20, "message.timeout.ms": 300000})
    values = [os.urandom(VALUE) for _ in range(64)]
    for i in range(megabytes * 1_000_000 // VALUE):
        while True:
            try:
                p.produce(TOPIC, values[i % 64], partition=0)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(600) != 0:
        raise SystemExit("preload: records left unacknowledged")


def set_throttle(admin: AdminClient, brokers: list[int], rate: int | None,
                 current: list[int], adding: list[int]) -> None:
    """Kafka's --throttle (rate) or --verify's clean-up (None); librdkafka takes one
    BROKER resource per call."""
    op = AlterConfigOpType.SET if rate is not None else AlterConfigOpType.DELETE
    lead = ",".join(f"0:{b}" for b in current)
    follow = ",".join(f"0:{b}" for b in adding)
    calls = [[ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("leader.replication.throttled.replicas", lead, incremental_operation=op),
        ConfigEntry("follower.replication.throttled.replicas", follow,
                    incremental_operation=op)])]]
    calls += [[ConfigResource(ResourceType.BROKER, str(b), incremental_configs=[
        ConfigEntry(f"{side}.replication.throttled.rate", str(rate or 0),
                    incremental_operation=op) for side in ("leader", "follower")])]
        for b in brokers]
    for res in calls:
        for f in admin.incremental_alter_configs(res).values():
            f.result(30)


def move(rc: ReassignClient, cluster_dir: Path, target: list[int], adding: int,
         timeout: float) -> dict:
    pdir = cluster_dir / f"broker-{adding}" / f"{TOPIC}-0"
    started = time.perf_counter()
    errs = rc.alter({(TOPIC, 0): target})
    if errs[(TOPIC, 0)][0] != 0:
        raise SystemExit(f"AlterPartitionReassignments: {errs}")
    samples: list[tuple[float, int]] = []
    while True:
        samples.append((time.perf_counter(), log_bytes(pdir)))
        if not rc.ongoing():
            break
        if time.perf_counter() - started > timeout:
            raise SystemExit(f"the move to {target} did not complete in {timeout} s")
        time.sleep(0.2)  # sampling interval of the adding replica's size
    ended = time.perf_counter()
    final = log_bytes(pdir)
    lo = next((t for t, b in samples if b >= 0.1 * final), started)
    hi = next((t for t, b in samples if b >= 0.9 * final), ended)
    mid = (0.8 * final / (hi - lo)) if hi > lo else float("nan")
    return {"started": started, "ended": ended, "seconds": round(ended - started, 2),
            "copied_mb": round(final / 1e6, 1),
            "rate_mb_s": round(final / (ended - started) / 1e6, 1),
            "mid_rate_mb_s": round(mid / 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=1000, help="MB in the partition before moving")
    ap.add_argument("--rate", type=int, default=2000, help="steady producer, values/s")
    ap.add_argument("--before", type=float, default=30.0, help="seconds of 'before'")
    ap.add_argument("--settle", type=float, default=20.0,
                    help="seconds of steady producing after the preload, not measured")
    ap.add_argument("--rounds", type=int, default=2, help="round trips of each kind")
    ap.add_argument("--throttle-mb", type=float, default=20.0)
    ap.add_argument("--skip-unthrottled", action="store_true")
    ap.add_argument("--out", type=Path, help="write every row as JSON here too")
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="reassign-bench-"))
    base = free_block()
    cluster = Cluster(d, base, {"auto.leader.rebalance.enable": "false"})
    bootstrap = cluster.bootstrap
    rows: list[dict] = []
    lat: Latencies | None = None
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[1, 2, 3]])])[
            TOPIC].result(30)
        t = time.perf_counter()
        preload(bootstrap, args.mb)
        print(json.dumps({"preload_mb": args.mb,
                          "seconds": round(time.perf_counter() - t, 1)}), flush=True)
        rc = ReassignClient(f"127.0.0.1:{base}", 30.0, None)
        lat = Latencies(bootstrap, args.rate)
        lat.start()
        # Not measured: the kernel writes back the preload's dirty pages (three copies of
        # --mb) for a while after it; the first 'before' window would carry that.
        time.sleep(args.settle)
        kinds = ([] if args.skip_unthrottled else [None]) + [args.throttle_mb]
        where = [1, 2, 3]
        for throttle in kinds:
            for _ in range(2 * args.rounds):
                target = [1, 2, 4] if 4 not in where else [1, 2, 3]
                adding = (set(target) - set(where)).pop()
                rate = None if throttle is None else int(throttle * 1e6)
                if rate is not None:
                    set_throttle(admin, [1, 2, 3, 4], rate, where, [adding])
                load = os.getloadavg()[0]
                t_before = time.perf_counter()
                time.sleep(args.before)  # the 'before' window: the producer alone
                timeout = 120 + (4 * args.mb / throttle if throttle else args.mb / 2)
                m = move(rc, d, target, adding, timeout)
                if rate is not None:
                    set_throttle(admin, [1, 2, 3, 4], None, where, [adding])
                before = lat.window(t_before, m["started"])
                during = lat.window(m["started"], m["ended"])
                row = {"throttle_mb_s": throttle, "from": where, "to": target,
                       "adding": adding, **{k: v for k, v in m.items()
                                            if k not in ("started", "ended")},
                       "before_n": len(before), "during_n": len(during),
                       "before_p50_ms": round(pct(before, 0.5) * 1e3, 1),
                       "before_p99_ms": round(pct(before, 0.99) * 1e3, 1),
                       "during_p50_ms": round(pct(during, 0.5) * 1e3, 1),
                       "during_p99_ms": round(pct(during, 0.99) * 1e3, 1),
                       "load_avg_1m_start": round(load, 2),
                       "load_avg_1m_end": round(os.getloadavg()[0], 2),
                       "producer_failures": lat.failed}
                row["p99_ratio"] = round(row["during_p99_ms"] / row["before_p99_ms"], 2)
                rows.append(row)
                print(json.dumps(row), flush=True)
                where = target
        rc.close()
    finally:
        if lat is not None:
            lat.stop.set()
            lat.join(150)
        cluster.close()
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    for throttle in {r["throttle_mb_s"] for r in rows}:
        rs = [r for r in rows if r["throttle_mb_s"] == throttle]
        print(f"throttle {throttle or 'none'}: rate {[r['rate_mb_s'] for r in rs]} MB/s"
              f" (middle {[r['mid_rate_mb_s'] for r in rs]}); p99 before/during"
              f" {[(r['before_p99_ms'], r['during_p99_ms']) for r in rs]} ms; median ratio"
              f" {statistics.median(r['p99_ratio'] for r in rs)}")


if __name__ == "__main__":
    main()
