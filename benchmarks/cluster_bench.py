"""Replication benchmark: a 3-broker cluster on this machine against the same cluster's
RF=1 topics, and the failover stall.

    .venv/bin/python benchmarks/cluster_bench.py [--rounds 3] [--messages 300000] [--only ...]

Starts its own etcd and three `yak serve --metadata etcd://...` brokers (temporary dirs),
then measures, with the same confluent-kafka client settings (`yak bench`'s workers:
acks=all, linger 5 ms, 1 MiB batches, 3 partitions so both RF=1 and RF=3 spread leaders
over the three brokers):

- throughput: RF=3 acks=all vs RF=1 acks=all, at 100 B and 1 KiB, rounds alternating;
- cluster CPU per message: user+system of all three broker processes over each run;
- e2e p99 at 10k msg/s with RF=3 acks=all (linger 0, fetch.wait.max.ms 5, 1 partition);
- the stall after kill -9 of a partition leader (broker.session.timeout.ms=3000): the
  longest gap between acknowledgements of a steady idempotent acks=all producer
  (1000 msg/s) around the kill;
- single broker, `write.caching=false` (acks=all waits for fdatasync): e2e p99 at 10k msg/s.

Every figure comes with the CPU the rest of the machine used meanwhile (`other_cpu_pct`,
% of one core): on a shared 2-core machine that is what most often limits a number.
Results: JSON on stdout (and --out), a markdown summary on stderr.

Profiling: YAK_BENCH_PROFILE=DIR YAK_BENCH_PROFILE_SCRIPT=benchmarks/profile_serve.py runs each
broker's event loop under cProfile (CPU time) and keeps the profiles in DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from yak.bench import runner  # noqa: E402
from yak.bench.spec import BenchSpec  # noqa: E402
from yak.devcluster.local import LocalEtcd, free_ports  # noqa: E402

SERVE = [sys.executable, "-m", "yak.cli.main", "serve"]
READY = "Yak broker ready on"


class Cluster:
    def __init__(self, base: Path, brokers: int = 3, session_ms: int = 3000) -> None:
        self.base = base
        self.n = brokers
        self.session_ms = session_ms
        ports = free_ports(2 + brokers)
        self.etcd = LocalEtcd(base / "etcd", ports[:1], ports[1:2]) if brokers > 1 else None
        self.ports = ports[2:]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def start(self) -> Cluster:
        if self.etcd is not None:
            self.etcd.start()
        for n in range(1, self.n + 1):
            self.start_broker(n)
        return self

    def start_broker(self, node: int) -> None:
        argv = SERVE + ["--data-dir", str(self.base / f"b{node}"),
                        "--listen", f"127.0.0.1:{self.ports[node - 1]}", "--http", "none",
                        "--set", f"node.id={node}"]
        if self.etcd is not None:
            argv += ["--metadata", self.etcd.url("bench"),
                     "--set", f"broker.session.timeout.ms={self.session_ms}",
                     "--set", f"broker.heartbeat.interval.ms={max(500, self.session_ms // 4)}",
                     "--set", "offsets.topic.num.partitions=6"]
        self.base.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if os.environ.get("YAK_BENCH_PROFILE_SCRIPT"):
            # cProfile each broker's event-loop thread by its CPU time (a wrapper script
            # that runs `yak serve` under cProfile.Profile(time.thread_time))
            argv = [sys.executable, os.environ["YAK_BENCH_PROFILE_SCRIPT"]] + argv[3:]
            env["PROF_OUT"] = str(self.base / f"b{node}.prof")
        log = open(self.base / f"b{node}.log", "ab")  # noqa: SIM115
        out = self.base / f"b{node}.out"
        with open(out, "wb") as f:
            self.procs[node] = subprocess.Popen(argv, stdout=f, stderr=log, cwd=REPO, env=env)
        deadline = time.monotonic() + 60
        while READY not in out.read_text(errors="replace"):
            if time.monotonic() > deadline or self.procs[node].poll() is not None:
                raise RuntimeError(f"broker {node} did not start: see {self.base}")
            time.sleep(0.1)

    def kill(self, node: int) -> None:
        p = self.procs[node]
        p.kill()
        p.wait(10)

    def cpu_s(self) -> float:
        return sum(self.cpu_by_broker().values())

    def cpu_by_broker(self) -> dict[int, float]:
        return {n: user + system for n, (user, system) in self.cpu_split_by_broker().items()}

    def cpu_split_by_broker(self) -> dict[int, tuple[float, float]]:
        """(user, system) CPU seconds per broker. Kept apart because on a VM the system
        part moves with the host (docs/benchmarks/replication.md section 15: a write into
        new page-cache pages costs 3-5x after the guest has reported its free memory)."""
        out = {}
        for n, p in self.procs.items():
            with contextlib.suppress(psutil.Error):
                t = psutil.Process(p.pid).cpu_times()
                out[n] = (t.user, t.system)
        return out

    def pids(self) -> set[int]:
        return {p.pid for p in self.procs.values()}

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        if os.environ.get("YAK_BENCH_PROFILE"):  # profiles are written at exit: keep them
            keep = Path(os.environ["YAK_BENCH_PROFILE"])
            keep.mkdir(parents=True, exist_ok=True)
            for p in self.procs.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(40)
            for f in self.base.glob("*.prof"):
                f.rename(keep / f"{self.base.name}-{f.name}")
        for p in self.procs.values():
            try:
                p.wait(40)
            except subprocess.TimeoutExpired:
                p.kill()
        if self.etcd is not None:
            self.etcd.stop()


def other_cpu(exclude: set[int], seconds_window: tuple[dict[int, float], float]) -> float:
    """% of one core used by processes other than `exclude` since the snapshot."""
    before, t0 = seconds_window
    used = 0.0
    for p in psutil.process_iter(["pid"]):
        if p.pid in exclude or p.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            used += t.user + t.system - before.get(p.pid, 0.0)
    return 100.0 * used / max(1e-6, time.monotonic() - t0)


def cpu_snapshot() -> tuple[dict[int, float], float]:
    snap = {}
    for p in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            snap[p.pid] = t.user + t.system
    return snap, time.monotonic()


def bench_run(cluster: Cluster, mode: str, spec: BenchSpec) -> dict[str, Any]:
    split0 = cluster.cpu_split_by_broker()
    snap = cpu_snapshot()
    r = runner.run(mode, spec)
    split1 = cluster.cpu_split_by_broker()
    by0 = {n: u + s for n, (u, s) in split0.items()}
    by1 = {n: u + s for n, (u, s) in split1.items()}
    cpu = sum(by1.values()) - sum(by0.values())
    user = sum(u for u, _ in split1.values()) - sum(u for u, _ in split0.values())
    d = r.to_dict()
    msgs = max(1, d["messages"])
    d["cpu_s_by_broker"] = {n: round(by1[n] - by0.get(n, 0.0), 2) for n in by1}
    d["cluster_cpu_s"] = round(cpu, 3)
    d["cluster_cpu_us_per_msg"] = round(cpu / msgs * 1e6, 3)
    d["cluster_user_us_per_msg"] = round(user / msgs * 1e6, 3)
    d["cluster_sys_us_per_msg"] = round((cpu - user) / msgs * 1e6, 3)
    worker_pids = {p.pid for p in psutil.Process().children(recursive=True)}
    d["other_cpu_pct_all"] = round(other_cpu(cluster.pids() | worker_pids, snap), 1)
    return d


def throughput(cluster: Cluster, rounds: int, messages: int, sizes: list[int]
               ) -> list[dict[str, Any]]:
    out = []
    for size in sizes:
        for r in range(rounds):
            for rf in (1, 3):
                spec = BenchSpec(bootstrap=cluster.bootstrap, topic=f"tp-rf{rf}-{size}-{r}",
                                 message_size=size, count=messages if size <= 100
                                 else messages // 3, partitions=3, replication_factor=rf,
                                 acks="all", linger_ms=5.0, timeout_s=300,
                                 topic_config={"min.insync.replicas": str(min(rf, 2))})
                d = bench_run(cluster, "produce", spec)
                row = {"size": size, "rf": rf, "round": r, "msgs_per_s": d["msgs_per_s"],
                       "cluster_cpu_us_per_msg": d["cluster_cpu_us_per_msg"],
                       "user_us_per_msg": d["cluster_user_us_per_msg"],
                       "sys_us_per_msg": d["cluster_sys_us_per_msg"],
                       "p99_ms": (d.get("latency_ms") or {}).get("p99"),
                       "other_cpu_pct": d["other_cpu_pct_all"], "errors": d["errors"]}
                print(json.dumps(row), file=sys.stderr, flush=True)
                out.append(row)
    return out


def e2e(cluster: Cluster, rounds: int, seconds: float, rf: int,
        topic_config: dict[str, str] | None = None) -> list[dict[str, Any]]:
    out = []
    for r in range(rounds):
        spec = BenchSpec(bootstrap=cluster.bootstrap, topic=f"e2e-rf{rf}-{r}-{time.time_ns()}",
                         message_size=100, count=0, duration_s=seconds, partitions=1,
                         replication_factor=rf, acks="all", linger_ms=0.0, rate=10_000,
                         fetch_wait_ms=5, timeout_s=seconds + 60,
                         topic_config={"min.insync.replicas": str(min(rf, 2)),
                                       **(topic_config or {})})
        d = bench_run(cluster, "e2e", spec)
        lat = d.get("latency_ms") or {}
        row = {"rf": rf, "round": r, "msgs_per_s": d["msgs_per_s"], "p50_ms": lat.get("p50"),
               "p99_ms": lat.get("p99"), "max_ms": lat.get("max"),
               "cluster_cpu_us_per_msg": d["cluster_cpu_us_per_msg"],
               "cpu_s_by_broker": d["cpu_s_by_broker"],
               "other_cpu_pct": d["other_cpu_pct_all"], "notes": d.get("notes")}
        print(json.dumps(row), file=sys.stderr, flush=True)
        out.append(row)
    return out


def leader_kill_stall(cluster: Cluster, rounds: int) -> list[dict[str, Any]]:
    """Gap between acknowledgements around a kill -9 of partition 0's leader."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    out = []
    for r in range(rounds):
        topic = f"stall-{r}"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})]
                            )[topic].result(30)
        time.sleep(1)
        acks: list[float] = []
        errors: list[str] = []
        stop = threading.Event()

        def produce(topic: str = topic, acks: list[float] = acks,
                    errors: list[str] = errors, stop: threading.Event = stop) -> None:
            p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                          "acks": "all", "linger.ms": 1, "log_level": 0,
                          "reconnect.backoff.max.ms": 500,
                          "topic.metadata.refresh.interval.ms": 1000})

            def cb(err: Any, _msg: Any) -> None:
                if err is None:
                    acks.append(time.monotonic())
                else:
                    errors.append(err.name())

            nxt = time.monotonic()
            while not stop.is_set():
                nxt += 0.001
                p.produce(topic, b"x" * 100, on_delivery=cb)
                p.poll(max(0.0, nxt - time.monotonic()))
            p.flush(30)

        t = threading.Thread(target=produce, daemon=True)
        t.start()
        time.sleep(3)
        md = admin.list_topics(topic, timeout=5)
        leader = md.topics[topic].partitions[0].leader
        killed = time.monotonic()
        cluster.kill(leader)
        time.sleep(12)
        stop.set()
        t.join(60)
        after = [a for a in acks if a >= killed - 0.5]
        gaps = [b - a for a, b in zip(after, after[1:], strict=False)]
        first_after = next((a - killed for a in acks if a > killed), None)
        row = {"round": r, "leader": leader, "max_gap_s": round(max(gaps, default=-1), 3),
               "first_ack_after_kill_s": None if first_after is None else round(first_after, 3),
               "acked": len(acks), "errors": len(errors)}
        print(json.dumps(row), file=sys.stderr, flush=True)
        out.append(row)
        cluster.start_broker(leader)
        time.sleep(5)
    return out


def summarize(results: dict[str, Any]) -> str:
    lines = []
    tp = results.get("throughput", [])
    for size in sorted({r["size"] for r in tp}):
        rows = [r for r in tp if r["size"] == size]
        rf1 = [r["msgs_per_s"] for r in rows if r["rf"] == 1]
        rf3 = [r["msgs_per_s"] for r in rows if r["rf"] == 3]
        c1 = [r["cluster_cpu_us_per_msg"] for r in rows if r["rf"] == 1]
        c3 = [r["cluster_cpu_us_per_msg"] for r in rows if r["rf"] == 3]
        ratios = [b / a for a, b in zip(rf1, rf3, strict=False) if a]
        cpu_ratios = [b / a for a, b in zip(c1, c3, strict=False) if a]
        lines.append(
            f"| {size} B | {statistics.median(rf1):,.0f} | {statistics.median(rf3):,.0f} | "
            f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
            f"{statistics.median(c1):.1f} / {statistics.median(c3):.1f} | "
            f"{statistics.median(cpu_ratios):.2f} | "
            f"{statistics.median(r['other_cpu_pct'] for r in rows):.0f}% |")
    for key in ("e2e_rf3", "e2e_fsync_single"):
        rows = results.get(key, [])
        if rows:
            p99 = [r["p99_ms"] for r in rows if r["p99_ms"] is not None]
            lines.append(f"{key}: p99 ms {p99} (median {statistics.median(p99):.1f}), "
                         f"other cpu {[r['other_cpu_pct'] for r in rows]}")
    stall = results.get("stall", [])
    if stall:
        lines.append(f"stall after leader kill -9: max gap s {[r['max_gap_s'] for r in stall]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--e2e-seconds", type=float, default=20.0)
    ap.add_argument("--only", default="throughput,e2e,stall,fsync")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    only = set(a.only.split(","))
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="yak-cluster-bench-") as tmp:
        if only & {"throughput", "e2e", "stall"}:
            cluster = Cluster(Path(tmp) / "c3").start()
            try:
                time.sleep(2)
                if "throughput" in only:
                    results["throughput"] = throughput(
                        cluster, a.rounds, a.messages, [int(s) for s in a.sizes.split(",")])
                if "e2e" in only:
                    results["e2e_rf3"] = e2e(cluster, a.rounds, a.e2e_seconds, 3)
                if "stall" in only:
                    results["stall"] = leader_kill_stall(cluster, a.rounds)
            finally:
                cluster.stop()
        if "fsync" in only:
            single = Cluster(Path(tmp) / "c1", brokers=1).start()
            try:
                results["e2e_fsync_single"] = e2e(single, a.rounds, a.e2e_seconds, 1,
                                                  {"write.caching": "false"})
            finally:
                single.stop()
    results["load_after"] = os.getloadavg()
    text = json.dumps(results, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    print(summarize(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
