"""Run Yak and its peers side by side, in one invocation, on this machine.

    .venv/bin/python -m benchmarks.suite [--rounds 3] [--brokers yak,tansu,...] [--scale 1.0]

All brokers run at once (idle ones cost next to nothing, and it lets runs alternate):
for every workload and message size, round r runs broker A, then B, then C... before
round r+1 (backwards in even rounds), so a burst of load from someone else on this shared
machine hits every broker rather than one, and no broker always runs first. Reports medians and min/max over rounds, the Yak/peer ratio, and the
CPU each broker spent per message, which is what stays comparable when wall clock is noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks.suite import ceilings, drivers, install, report, servers
from yak.bench.meter import Window

ALL = ("yak", "yak-fsync", "tansu", "nafka", "redis", "nats", "rabbit")
SIZES = (100, 1024, 10240)
COUNTS = {100: 300_000, 1024: 100_000, 10240: 20_000}  # ~30-200 MB per run


def _round_order(started: list[Any], r: int) -> list[Any]:
    """Brokers in round r: forwards in odd rounds, backwards in even ones.

    A fixed order put Yak first in every round (the first run after the previous size's
    last run, or after the idle measurement); alternating it gives no broker the same
    position every time, so a slot-dependent effect (a cold client, a neighbour's burst
    that starts with the round) averages out instead of landing on one broker.
    """
    return list(started) if r % 2 else list(reversed(started))


def _kafka_record(res: Any) -> dict[str, Any]:
    b = res.broker
    rec: dict[str, Any] = {
        "msgs": res.messages, "secs": res.seconds, "msgs_per_s": res.msgs_per_s,
        "MB_per_s": res.mb_per_s, "client_cpu_s": res.client_cpu_s,
        "other_cpu_pct": res.other_cpu_pct, "errors": res.errors, "notes": res.notes,
    }
    if b is not None:
        rec.update(server_cpu_s=b.cpu_s, server_us_per_msg=b.cpu_us_per_msg,
                   server_cpu_pct=b.cpu_pct, rss_mb=b.rss_mb_end)
    if res.latency_ms is not None and res.mode == "e2e":
        lat = res.latency_ms
        rec.update(p50_ms=lat.p50, p95_ms=lat.p95, p99_ms=lat.p99, p999_ms=lat.p999,
                   max_ms=lat.max)
    return rec


def _other_record(server: servers.Server, fn: Any, *args: Any) -> dict[str, Any]:
    from yak.bench.spec import Latency

    group = server.group()
    w = Window(group).start()
    n, client_cpu, lat, span = fn(*args)
    w.stop()
    # rates over the client's active span (connection set-up excluded, as for the Kafka runs);
    # server CPU over the whole window, which only adds its share of connection handling
    rec: dict[str, Any] = {
        "msgs": n, "secs": round(span, 4), "msgs_per_s": round(n / span, 1),
        "client_cpu_s": round(client_cpu, 3), "other_cpu_pct": w.other_pct(),
        "server_cpu_s": round(w.broker_cpu, 4),
        "server_us_per_msg": round(1e6 * w.broker_cpu / n, 3) if n else None,
        "server_cpu_pct": round(100 * w.broker_cpu / w.wall, 1), "rss_mb": round(w.rss_end, 1),
        "errors": 0, "notes": [],
    }
    if lat is not None:
        s = Latency.from_ns(lat)
        if s is not None:
            rec.update(p50_ms=s.p50, p95_ms=s.p95, p99_ms=s.p99, p999_ms=s.p999, max_ms=s.max)
    return rec


def measure(server: servers.Server, workload: str, size: int, n: int, cap: float,
            topic: str, rate: int, secs: float) -> dict[str, Any]:
    if server.kind == "kafka":
        res = drivers.kafka(workload, server.bootstrap, server.group().pid, topic, size, n, cap,
                            rate=rate, secs=secs, topic_config=server.topic_config)
        rec = _kafka_record(res)
        if workload != "latency":
            rec["MB_per_s"] = round(rec["msgs"] * size / rec["secs"] / 1e6, 2)
        return rec
    fn = drivers.DRIVERS[server.kind][workload]
    if workload != "consume":
        drivers.PREPARE[server.kind](server.port, topic)
    if workload == "latency":
        rec = _other_record(server, fn, server.port, topic, size, rate, secs)
    else:
        rec = _other_record(server, fn, server.port, topic, size, n, cap)
    rec["MB_per_s"] = round(rec["msgs"] * size / rec["secs"] / 1e6, 2)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.suite", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--brokers", default=",".join(ALL))
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply message counts (0.02 for a smoke run)")
    ap.add_argument("--cap", type=float, default=20.0, help="seconds per throughput run, max")
    ap.add_argument("--rate", type=int, default=10_000, help="latency runs: msg/s")
    ap.add_argument("--lat-secs", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=install.REPO / "docs" / "benchmarks")
    ap.add_argument("--work", type=Path,
                    default=Path(os.environ.get("TMPDIR", "/tmp")) / "yak-suite")
    ap.add_argument("--no-install", action="store_true")
    ap.add_argument("--skip-ceilings", action="store_true")
    a = ap.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    command = "python -m benchmarks.suite " + " ".join(argv if argv is not None else sys.argv[1:])
    problems: list[str] = []
    nafka_py = None
    if not a.no_install:
        nafka_py, problems = install.install(a.work)
    else:
        cand = a.work / "venv312" / "bin" / "python"
        nafka_py = str(cand) if cand.exists() else None
    wanted = [b.strip() for b in a.brokers.split(",") if b.strip()]
    names = [b for b in wanted if install.available(b, nafka_py)]
    problems += [f"{b}: not installed, skipped" for b in wanted if b not in names]
    sizes = [int(s) for s in a.sizes.split(",")]
    raw_path = a.work / f"results-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    results: list[dict[str, Any]] = []

    def emit(rec: dict[str, Any]) -> None:
        rec["ts"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        results.append(rec)
        with raw_path.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        brief = {k: rec.get(k) for k in ("broker", "workload", "size", "round", "msgs_per_s",
                                         "server_us_per_msg", "p99_ms", "other_cpu_pct")}
        print(json.dumps(brief), flush=True)

    started: list[servers.Server] = []
    idle_cpu: dict[str, float] = {}
    ceiling_rows: list[dict[str, Any]] = []
    try:
        if not a.skip_ceilings:
            ceiling_rows = ceilings.measure(a.work)
            for c in ceiling_rows:
                print(json.dumps(c), flush=True)
        for name in names:
            s = servers.make(name, a.work, nafka_py or "")
            try:
                s.start()
                started.append(s)
            except Exception as e:  # noqa: BLE001 - report and go on without this peer
                problems.append(f"{name}: failed to start: {e}")
                s.stop()
        time.sleep(2)
        # all servers stay up for the whole run: what each costs while the others are measured
        groups = {s.name: s.group() for s in started}
        c0 = {n: g.cpu_s() for n, g in groups.items()}
        time.sleep(5)
        idle_cpu = {n: round(100 * (g.cpu_s() - c0[n]) / 5, 1) for n, g in groups.items()}
        print(json.dumps({"idle_cpu_pct": idle_cpu}), flush=True)
        for size in sizes:
            n = max(100, int(COUNTS.get(size, 20_000) * a.scale))
            for r in range(1, a.rounds + 1):
                for s in _round_order(started, r):
                    topic = drivers.unique(f"t{size}x")
                    for workload in ("produce", "consume"):
                        rec = {"broker": s.name, "workload": workload, "size": size, "round": r}
                        try:
                            rec.update(measure(s, workload, size, n, a.cap, topic, 0, 0))
                        except Exception as e:  # noqa: BLE001 - one failed run is a result too
                            rec.update(error=f"{type(e).__name__}: {e}")
                            traceback.print_exc()
                        emit(rec)
        for r in range(1, a.rounds + 1):
            for s in _round_order(started, r):
                rec = {"broker": s.name, "workload": "latency", "size": 100, "round": r,
                       "rate": a.rate}
                try:
                    rec.update(measure(s, "latency", 100, 0, 0, drivers.unique("lat"), a.rate,
                                       a.lat_secs))
                except Exception as e:  # noqa: BLE001
                    rec.update(error=f"{type(e).__name__}: {e}")
                    traceback.print_exc()
                emit(rec)
    finally:
        for s in started:
            s.stop()
    meta = report.machine_info(a.work)
    meta.update(command=command, brokers=names, problems=problems, rounds=a.rounds,
                durability={s.name: s.durability for s in started}, raw=str(raw_path),
                idle_cpu_pct=idle_cpu,
                versions=report.versions(nafka_py))
    paths = report.write(results, ceiling_rows, meta, a.out)
    for p in paths:
        print(f"wrote {p}")
    return 0
