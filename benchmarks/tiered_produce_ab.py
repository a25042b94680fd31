"""Producer ack latency while segments upload (issue 25's goal: p99 at most 1.2x that of a
topic without tiering). One broker (`yak serve`) with tiered storage on a SeaweedFS S3
gateway on 127.0.0.1; `yak bench produce` at a fixed rate, acks=all, alternating a tiered
topic (small segments, so uploads run all the time) and a plain one, fresh topics per run.

    .venv/bin/python benchmarks/tiered_produce_ab.py --rounds 3 --rate 10000 --seconds 20
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import tiered_loop_probe as probe  # noqa: E402
from benchmarks.spark_bench import _tree_cpu  # noqa: E402
from tests.conftest import YakBroker  # noqa: E402
from tests.tiered.seaweed import SeaweedS3  # noqa: E402

YAK = str(Path(sys.executable).with_name("yak"))


def loop_thread(pid: int) -> tuple[float, float]:
    """The broker's event loop thread (its main thread): (CPU seconds, seconds it waited
    for a CPU while runnable, the kernel's schedstat run delay). The run delay is the
    loop's lag that the machine's other work caused, as against the loop's own work."""
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        delay = int(f.read().split()[1]) / 1e9
    return cpu, delay


def bench(b: YakBroker, topic: str, tiered: bool, args: argparse.Namespace,
          store_pid: int | None, probe_out: Path) -> dict:
    cfg = ["-c", "segment.bytes=4194304"]
    if tiered:
        cfg += ["-c", "remote.storage.enable=true", "-c", "local.retention.bytes=8388608"]
    elif args.plain_retention:
        # The tiered topic's local deletions without the uploads: a segment retired every
        # ~0.4 s at 10 MB/s, as local retention does on the tiered topic.
        cfg += ["-c", "retention.bytes=8388608"]
    cpu0, delay0 = loop_thread(b.pid)
    p0 = probe.read(probe_out, b.pid)
    store0 = _tree_cpu(store_pid) if store_pid else 0.0
    out = subprocess.run(
        [YAK, "bench", "produce", "-b", b.bootstrap, "-t", topic, "-s", str(args.size),
         "-n", "0", "-d", str(args.seconds), "--rate", str(args.rate), "--acks", "all",
         "--json", "--no-progress", "--broker-pid", str(b.pid), *cfg],
        capture_output=True, text=True, check=True, timeout=args.seconds + 120)
    res = json.loads(out.stdout)
    res["probe"] = probe.delta(p0, probe.read(probe_out, b.pid))
    cpu1, delay1 = loop_thread(b.pid)
    n = max(1, int(res.get("messages") or res.get("msgs") or 0))
    res["loop"] = {"cpu_s": round(cpu1 - cpu0, 2), "run_delay_ms": round((delay1 - delay0) * 1000),
                   "cpu_us_per_msg": round((cpu1 - cpu0) * 1e6 / n, 2),
                   "store_cpu_s": round((_tree_cpu(store_pid) if store_pid else 0.0) - store0, 2),
                   "load_1m": round(os.getloadavg()[0], 1)}
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--json", help="write every run's result here too")
    ap.add_argument("--plain-retention", action="store_true",
                    help="the plain topic deletes segments as the tiered one's local retention"
                         " does (retention.bytes = its local.retention.bytes)")
    ap.add_argument("--asyncio-loop", action="store_true",
                    help="diagnosis: the broker on asyncio's loop instead of uvloop, so that"
                         " the probe names the loop's slow steps")
    ap.add_argument("--store-nice", type=int, default=0,
                    help="run SeaweedFS at this nice value (19: it yields the shared cores to"
                         " the broker, as a store on another machine would)")
    ap.add_argument("--set", action="append", default=[],
                    help="more broker settings KEY=VALUE (e.g. the copier pool size)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="yak-tiered-ab-"))
    weed = SeaweedS3(str(tmp))
    weed.start()
    if args.store_nice and weed.proc is not None:
        # SeaweedFS shares the broker's cores here, where S3 would be another machine:
        # niced, its CPU stops competing with the broker's event loop (the fair test).
        import psutil
        root = psutil.Process(weed.proc.pid)
        for p in [root, *root.children(recursive=True)]:
            p.nice(args.store_nice)
    try:
        run(weed, tmp, args)
    finally:
        weed.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # ~0.8 GB a run of 4 rounds


def run(weed: SeaweedS3, tmp: Path, args: argparse.Namespace) -> None:
    weed.create_bucket("abtest")
    data = tmp / "data"
    data.mkdir()
    b = YakBroker(data, {
        "remote.log.storage.system.enable": "true",
        "remote.storage.uri": f"s3://abtest/p?endpoint={weed.endpoint}&region=us-east-1",
        "remote.storage.access.key.id": "ab", "remote.storage.secret.access.key": "absecret",
        "remote.log.manager.task.interval.ms": "500",
        **dict(kv.split("=", 1) for kv in args.set)})
    results: dict[str, list[dict]] = {"tiered": [], "plain": []}
    # The broker's event loop probed (benchmarks/tiered_loop_probe.py): lag and slow steps.
    probe_out = tmp / "loop-probe"
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(probe.site_dir(tmp, probe_out, args.asyncio_loop)), *([old_path] if old_path else [])])
    try:
        b.start()
        if old_path is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old_path
        for r in range(args.rounds):
            for kind in ("tiered", "plain") if r % 2 == 0 else ("plain", "tiered"):
                res = bench(b, f"{kind}-{r}", kind == "tiered", args,
                            weed.proc.pid if weed.proc else None, probe_out)
                results[kind].append(res)
                print(kind, r, json.dumps({k: res.get(k) for k in res if "latency" in k
                                           or k in ("msgs_per_s", "mb_per_s", "loop", "probe")}),
                      flush=True)
                time.sleep(5)  # let the previous run's uploads drain
    finally:
        b.stop()
    p99 = {k: [r["latency_ms"]["p99"] for r in v] for k, v in results.items()}
    p50 = {k: [r["latency_ms"]["p50"] for r in v] for k, v in results.items()}
    cpu = {k: [r["broker"]["cpu_us_per_msg"] for r in v] for k, v in results.items()}
    loop = {k: [dict(r["loop"], **{m: r["probe"][m] for m in ("lag_p99_ms", "lag_p999_ms",
                                                                  "over_5ms_pct")})
                for r in v] for k, v in results.items()}
    for kind in results:
        print(f"{kind:7s} p50 {p50[kind]} p99 {p99[kind]} broker us/msg {cpu[kind]}")
        print(f"{'':7s} loop us/msg {[x['cpu_us_per_msg'] for x in loop[kind]]} loop run delay"
              f" ms {[x['run_delay_ms'] for x in loop[kind]]} store CPU s"
              f" {[x['store_cpu_s'] for x in loop[kind]]} load {[x['load_1m'] for x in loop[kind]]}")
        if args.asyncio_loop:
            for x in results[kind]:
                print(f"{'':7s} slow steps: {x['probe']['slow_steps']}")
        print(f"{'':7s} loop lag p99 ms {[x['lag_p99_ms'] for x in loop[kind]]} p999 ms"
              f" {[x['lag_p999_ms'] for x in loop[kind]]} pings over 5 ms %"
              f" {[x['over_5ms_pct'] for x in loop[kind]]}")
    print("median p99 ratio tiered/plain:",
          round(statistics.median(p99["tiered"]) / statistics.median(p99["plain"]), 2))
    print("per-pair p99 ratios tiered/plain:",
          [round(t / p, 2) for t, p in zip(p99["tiered"], p99["plain"], strict=True)])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))

if __name__ == "__main__":
    main()
