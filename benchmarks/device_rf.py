"""Issue 28's table on a many-core machine: RF=1 against RF=3 produce, and consume with and
without sendfile, in one run that fits a short lease (`benchmarks/device_rf.sh` runs it).

    python3 benchmarks/device_rf.py --tree TREE --out DIR [--seconds 5.5] [--rounds 2]
        [--points 1024:6,100:4,100:8] [--consume-messages 1000000] [--budget-s 330]
        [--before TREE --before-points 1024:6]

TREE holds a `yak/` package and `benchmarks/{cluster_bench,replication_rf}.py` (device_rf.sh
makes one from `git archive HEAD`, so the run is one commit whatever else the working tree
holds). Everything that starts or measures comes from that tree, nothing is re-implemented
here: `cluster_bench.Cluster` (etcd plus three `yak serve --metadata etcd://...` brokers),
`cluster_bench.bench_run` (a `yak bench` produce run; the brokers' user+system CPU from
psutil over the run) and `replication_rf.consume_ab` (one broker, sendfile true then false
on the same 1 KiB data). What this file adds is the issue's shape, which
`cluster_bench.throughput` does not take: 16-partition topics, N producer processes, points
bounded by time (--seconds) rather than by a count, and the order:

- round 0: every (size, producers) point, RF=1 then RF=3 (a fresh topic each, deleted after
  its point so a 64 GiB disk holds the whole run);
- the consume A/B (--consume-rounds pairs: sendfile on then off, then off then on...);
- with --before TREE (an earlier commit's yak/), --before-points once on a second cluster
  whose brokers run that tree (this tree's `yak bench` as the client), RF=1 then RF=3;
- further rounds with RF=3 first, then RF=1 (ABBA against drift), while the budget lasts.

So a run cut short still has one value in every cell. Every row is appended to
DIR/device_rf.json as it comes (rewritten whole each time), with the machine's facts first.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def load(tree: Path, name: str) -> Any:
    """A benchmarks/ module of TREE (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, tree / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def machine_facts(tree: Path) -> dict[str, Any]:
    """What limits the figures: cores, kernel (gVisor reports 4.4.0), CPU model, disk."""
    facts: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "commit": (tree / "COMMIT").read_text().strip() if (tree / "COMMIT").exists() else "?",
        "cpus": os.cpu_count(), "kernel": platform.release(), "uname": " ".join(platform.uname()),
        "python": sys.version.split()[0], "loadavg": os.getloadavg(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                facts["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        du = shutil.disk_usage(tempfile.gettempdir())
        facts["tmp_disk_gb"] = {"total": round(du.total / 1e9, 1), "free": round(du.free / 1e9, 1)}
    from importlib import metadata
    vers = {}
    for dist in ("confluent-kafka", "kio", "uvloop", "psutil", "crc32c", "cramjam"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            vers[dist] = metadata.version(dist)
    facts["packages"] = vers
    import confluent_kafka
    facts["librdkafka"] = confluent_kafka.libversion()[0]
    return facts


def tolerant_locate(runner: Any) -> None:
    """`yak bench` finds the broker to meter by its listening port (psutil.net_connections);
    if a sandboxed kernel refuses that, run unmetered instead of failing the whole lease:
    the figures here are the brokers' CPU from `Cluster.cpu_by_broker`, not that meter."""
    locate = runner.locate_broker

    def safe(spec: Any, pid: int | None) -> Any:
        try:
            return locate(spec, pid)
        except Exception as e:  # noqa: BLE001 - any refusal means "not metered", logged
            log(f"bench meter cannot find the broker ({type(e).__name__}: {e}); unmetered")
            return None

    runner.locate_broker = safe


class Results:
    """The JSON file, rewritten after every row so a run killed at its limit keeps its rows."""

    def __init__(self, path: Path, facts: dict[str, Any], argv: list[str]) -> None:
        self.path = path
        self.data: dict[str, Any] = {"facts": facts, "argv": argv, "produce": [],
                                     "consume": [], "skipped": []}
        self.save()

    def save(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=1))


def produce_point(cb: Any, cluster: Any, size: int, producers: int, rf: int, rnd: int,
                  seconds: float, partitions: int) -> dict[str, Any]:
    import psutil
    from confluent_kafka.admin import AdminClient

    from yak.bench import runner
    from yak.bench.spec import BenchSpec

    topic = f"dev-rf{rf}-{size}b-p{producers}-r{rnd}"
    spec = BenchSpec(bootstrap=cluster.bootstrap, topic=topic, message_size=size, count=0,
                     duration_s=seconds, partitions=partitions, replication_factor=rf,
                     producers=producers, acks="all", linger_ms=5.0, batch_size=1_048_576,
                     timeout_s=seconds + 60,
                     topic_config={"min.insync.replicas": str(min(rf, 2))})
    t = time.monotonic()
    # cluster_bench.bench_run's figure (the brokers' CPU over the whole `yak bench` call)
    # also counts the brokers idling while the runner sorts every acknowledgement's latency
    # (10-20M samples a point here, many seconds); the progress callback, called every
    # 0.1 s until the last producer reports, gives the same CPU up to the last ack as well.
    by0 = cluster.cpu_by_broker()
    snap = cb.cpu_snapshot()
    last: dict[int, float] = dict(by0)

    def tick(_done: int, _total: int) -> None:
        last.update(cluster.cpu_by_broker())

    r = runner.run("produce", spec, progress=tick)
    by1 = cluster.cpu_by_broker()
    d = r.to_dict()
    n = max(1, d["messages"])
    cpu = {b: by1[b] - by0.get(b, 0.0) for b in by1}
    to_ack = {b: last[b] - by0.get(b, 0.0) for b in last}
    workers = {p.pid for p in psutil.Process().children(recursive=True)}
    row = {"size": size, "producers": producers, "rf": rf, "round": rnd,
           "msgs_per_s": round(d["msgs_per_s"]), "mb_per_s": round(d["mb_per_s"], 1),
           "messages": d["messages"], "seconds": round(d["seconds"], 2),
           "cluster_cpu_us_per_msg": round(sum(cpu.values()) / n * 1e6, 3),
           "cluster_cpu_us_per_msg_to_last_ack": round(sum(to_ack.values()) / n * 1e6, 3),
           "cpu_s_by_broker": {b: round(c, 2) for b, c in cpu.items()},
           # cores each broker used up to the last ack, over the producers' window (topic
           # creation included in the CPU, so a slight overestimate at low rates)
           "broker_cores": {b: round(c / max(1e-6, d["seconds"]), 2)
                            for b, c in to_ack.items()},
           "client_cpu_s": round(d["client_cpu_s"], 2), "errors": d["errors"],
           "p99_ms": (d.get("latency_ms") or {}).get("p99"),
           "other_cpu_pct": round(cb.other_cpu(cluster.pids() | workers, snap), 1),
           "notes": d.get("notes"),
           "point_wall_s": round(time.monotonic() - t, 1)}
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    try:  # free the disk for the next point (Yak removes a deleted partition's dir at once)
        admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
    except Exception as e:  # noqa: BLE001 - a failed delete costs disk, not the run
        row["delete_error"] = str(e)
    return row


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for size, prods in sorted({(r["size"], r["producers"]) for r in rows}, reverse=True):
        cell = [r for r in rows if r["size"] == size and r["producers"] == prods]
        by = {rf: [r for r in cell if r["rf"] == rf] for rf in (1, 3)}
        if not by[1] or not by[3]:
            continue
        m = {rf: statistics.median(r["msgs_per_s"] for r in by[rf]) for rf in (1, 3)}
        c = {rf: statistics.median(r["cluster_cpu_us_per_msg"] for r in by[rf]) for rf in (1, 3)}
        k = "cluster_cpu_us_per_msg_to_last_ack"
        ca = {rf: statistics.median(r[k] for r in by[rf]) for rf in (1, 3)}
        out.append({"size": size, "producers": prods,
                    "rf1_msgs_per_s": [r["msgs_per_s"] for r in by[1]],
                    "rf3_msgs_per_s": [r["msgs_per_s"] for r in by[3]],
                    "throughput_rf3_over_rf1": round(m[3] / m[1], 3),
                    "rf1_cpu_us_per_msg": [r["cluster_cpu_us_per_msg"] for r in by[1]],
                    "rf3_cpu_us_per_msg": [r["cluster_cpu_us_per_msg"] for r in by[3]],
                    "cpu_rf3_over_rf1": round(c[3] / c[1], 2),
                    "rf1_cpu_us_per_msg_to_last_ack": [r[k] for r in by[1]],
                    "rf3_cpu_us_per_msg_to_last_ack": [r[k] for r in by[3]],
                    "cpu_to_last_ack_rf3_over_rf1": round(ca[3] / ca[1], 2)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=5.5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--points", default="1024:6,100:4,100:8", help="SIZE:PRODUCERS,...")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--consume-messages", type=int, default=1_000_000)
    ap.add_argument("--consume-rounds", type=int, default=1,
                    help="sendfile on/off pairs (alternated: on, off, off, on, ...)")
    ap.add_argument("--before", type=Path,
                    help="a tree of an earlier commit (yak/ and COMMIT only): its brokers run "
                    "--before-points once, RF=1 then RF=3, after the consume A/B")
    ap.add_argument("--before-points", default="1024:6")
    ap.add_argument("--before-consume-rounds", type=int, default=0,
                    help="sendfile on/off pairs of the consume A/B on the earlier tree too")
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="start no point that would end past this many seconds")
    a = ap.parse_args()
    tree = a.tree.resolve()
    sys.path.insert(0, str(tree))
    cb = load(tree, "cluster_bench")  # also puts TREE first on sys.path: its yak is used
    rrf = load(tree, "replication_rf")
    from yak.bench import runner
    tolerant_locate(runner)
    import yak
    assert Path(yak.__file__).resolve().is_relative_to(tree), yak.__file__
    a.out.mkdir(parents=True, exist_ok=True)
    facts = machine_facts(tree)
    log(f"facts {json.dumps(facts)}")
    res = Results(a.out / "device_rf.json", facts, sys.argv)
    points = [tuple(int(x) for x in p.split(":")) for p in a.points.split(",")]
    base = Path(tempfile.mkdtemp(prefix="device-rf-"))
    point_cost = {1: a.seconds + 15.0}  # first guess; then the slowest point seen

    def fits(cost: float) -> bool:
        return time.monotonic() - T0 + cost < a.budget_s

    def run_round(cluster: Any, rnd: int) -> None:
        for size, prods in points:
            for rf in ((1, 3) if rnd % 2 == 0 else (3, 1)):
                if not fits(max(point_cost.values())):
                    res.data["skipped"].append({"size": size, "producers": prods, "rf": rf,
                                                "round": rnd, "why": "budget"})
                    res.save()
                    log(f"skip {size} B x{prods} RF={rf} round {rnd}: budget")
                    continue
                row = produce_point(cb, cluster, size, prods, rf, rnd, a.seconds,
                                    a.partitions)
                point_cost[len(point_cost) + 1] = row["point_wall_s"] + 2.0
                res.data["produce"].append(row)
                res.data["produce_summary"] = summary(res.data["produce"])
                res.save()
                log(f"{size} B x{prods} RF={rf} r{rnd}: {row['msgs_per_s']:,} msg/s "
                    f"{row['cluster_cpu_us_per_msg']} us/msg cores {row['broker_cores']} "
                    f"({row['point_wall_s']} s)")

    def run_before(before: Path) -> None:
        """The same points on an earlier commit's brokers (client side unchanged: this
        tree's `yak bench`), a second cluster while this one idles."""
        commit = (before / "COMMIT").read_text().strip()
        res.data["before_commit"] = commit
        pts = [tuple(int(x) for x in p.split(":")) for p in a.before_points.split(",")]
        if not fits(15.0 + 2 * len(pts) * max(point_cost.values())):
            res.data["skipped"].append({"before": commit, "why": "budget"})
            res.save()
            return
        cbb = load(tree, "cluster_bench")  # a second copy whose brokers run `before`
        cbb.REPO = before
        rows = res.data.setdefault("before", [])
        old = cbb.Cluster(base / "before")
        try:
            old.start()
        except Exception as e:  # noqa: BLE001 - the earlier tree failing keeps the rest
            old.stop()  # what did start (etcd, the brokers before the failed one)
            res.data["before_error"] = repr(e)
            res.save()
            log(f"before tree did not start: {e!r}")
            return
        log(f"before-tree brokers up ({commit[:10]})")
        try:
            time.sleep(3)
            for size, prods in pts:
                for rf in (1, 3):
                    row = produce_point(cbb, old, size, prods, rf, 0, a.seconds, a.partitions)
                    row["tree"] = commit[:10]
                    rows.append(row)
                    res.data["before_summary"] = summary(rows)
                    res.save()
                    log(f"BEFORE {size} B x{prods} RF={rf}: {row['msgs_per_s']:,} msg/s "
                        f"{row['cluster_cpu_us_per_msg']} us/msg cores {row['broker_cores']}")
        finally:
            old.stop()
        if a.before_consume_rounds and fits(40.0 + 35.0 * a.before_consume_rounds):
            crows = rrf.consume_ab(cbb, base / "before-consume", a.consume_messages,
                                   a.before_consume_rounds)
            for r in crows:
                r["tree"] = commit[:10]
            res.data["before_consume"] = crows
            res.save()
            log(f"BEFORE consume {json.dumps(crows)}")

    try:
        cluster = cb.Cluster(base / "rf")
        try:  # stop() also when start() fails part-way: etcd and the brokers that started
            cluster.start()
            log(f"3 brokers up at {cluster.bootstrap}")
            idle0, t_idle = cluster.cpu_by_broker(), time.monotonic()
            time.sleep(3)  # settle, and the brokers' idle cost (counted in every CPU figure)
            idle1 = cluster.cpu_by_broker()
            res.data["idle_broker_cores"] = {
                b: round((idle1[b] - idle0.get(b, 0.0)) / (time.monotonic() - t_idle), 3)
                for b in idle1}
            log(f"idle cores by broker {res.data['idle_broker_cores']}")
            run_round(cluster, 0)
            if fits(40.0 + 35.0 * a.consume_rounds):
                log(f"consume A/B: {a.consume_rounds} pair(s), sendfile on/off alternated")
                rows = rrf.consume_ab(cb, base, a.consume_messages, a.consume_rounds)
                res.data["consume"] = rows
                on = [r["broker_cpu_us_per_msg"] for r in rows if r["sendfile"]]
                off = [r["broker_cpu_us_per_msg"] for r in rows if not r["sendfile"]]
                if on and off:
                    res.data["consume_summary"] = {
                        "sendfile_cpu_us_per_msg": on, "copy_cpu_us_per_msg": off,
                        "sendfile_over_copy": round(statistics.median(on)
                                                    / statistics.median(off), 3)}
                res.save()
                log(f"consume {json.dumps(res.data.get('consume_summary'))}")
            else:
                res.data["skipped"].append({"consume": True, "why": "budget"})
            if a.before is not None:
                run_before(a.before.resolve())
            for rnd in range(1, a.rounds):
                run_round(cluster, rnd)
        finally:
            cluster.stop()
    finally:
        logs = sorted(base.rglob("b*.log"))
        with open(a.out / "brokers_tail.log", "w") as f:
            for p in logs:  # the last lines of each broker's log, for a failed run
                lines = p.read_text(errors="replace").splitlines()[-40:]
                f.write(f"==> {p.relative_to(base)} <==\n" + "\n".join(lines) + "\n")
        shutil.rmtree(base, ignore_errors=True)
        res.data["wall_s"] = round(time.monotonic() - T0, 1)
        res.save()
    for s in res.data.get("produce_summary", []):
        log(json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
