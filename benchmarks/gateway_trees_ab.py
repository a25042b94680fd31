"""Gateways built from different source trees, against one broker, in one run, alternating.

    git archive HEAD yak | tar -x -C /tmp/head     # a tree to compare, e.g. a commit
    .venv/bin/python benchmarks/gateway_trees_ab.py --tree before=/tmp/head --tree after=. \\
        --case ws --records 10000 --rounds 8

Each `--tree NAME=DIR` starts `yak gateway` with DIR as its working directory and first on
`sys.path` (so it runs DIR/yak with this venv's libraries); the broker is this tree's. Every
round runs the case once on each gateway, the order rotating, with benchmarks/gateway_bench.py's
clients and meter (the gateway's own CPU, user + system, over the phase / records). The
machine is shared: compare the gateways' medians within one run, and their ranges.

Cases: ws (one record per `produce` frame, pipelined), rest (100 records per POST).
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_bench import (  # noqa: E402
    Meter,
    create_topic,
    free_port,
    measure,
    payloads,
    rest_produce,
    spawn,
    ws_produce,
)

CASES = {"ws": ws_produce, "rest": rest_produce}


def spawn_tree(tree: Path, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    code = (f"import sys; sys.path.insert(0, {str(tree)!r}); "
            "from yak.cli.main import app; app()")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    out = open(log, "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=tree, env=env,
                            stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "Yak gateway ready" in log.read_text(errors="replace"):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"gateway of {tree} did not start:\n{log.read_text(errors='replace')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, help="NAME=DIR")
    ap.add_argument("--case", choices=sorted(CASES), default="ws")
    ap.add_argument("--records", type=int, default=10000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=1000, help="records per gateway, unmeasured")
    args = ap.parse_args()
    trees = {}
    for spec in args.tree:
        name, _, path = spec.partition("=")
        trees[name] = Path(path).resolve()
    tmp = Path(tempfile.mkdtemp(prefix="yak-gw-trees-"))
    bootstrap = f"127.0.0.1:{free_port()}"
    broker = spawn(["serve", "--data-dir", str(tmp / "data"), "--listen", bootstrap,
                    "--http", "none"], tmp / "broker.log", "Yak broker ready")
    gateways: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    rows: list[dict[str, Any]] = []
    fn = CASES[args.case]
    try:
        for name, tree in trees.items():
            port = free_port()
            proc = spawn_tree(tree, ["gateway", "--bootstrap", bootstrap,
                                     "--http", f"127.0.0.1:{port}"], tmp / f"gw-{name}.log")
            gateways[name] = (proc, f"http://127.0.0.1:{port}")
            # Warm up: the app is imported on the first request, the producer connects.
            topic = f"warm-{name}"
            create_topic(bootstrap, topic)
            fn(gateways[name][1], topic, payloads(args.warmup, args.size))
        values = payloads(args.records, args.size)
        names = list(trees)
        for rnd in range(args.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            if rnd // len(names) % 2:
                order.reverse()
            for name in order:
                proc, url = gateways[name]
                topic = f"{args.case}-{name}-{rnd}"
                create_topic(bootstrap, topic)
                res = measure(Meter(proc.pid), fn, url, topic, values, n=len(values))
                rows.append({"round": rnd, "tree": name, **res})
                print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        for proc, _ in gateways.values():
            proc.terminate()
        broker.terminate()
        for p in [*(g for g, _ in gateways.values()), broker]:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(rows))
    print()
    print(f"{args.case}, {args.records} x {args.size} B per round, {args.rounds} rounds")
    print("| tree | records/s | gateway us/record: median | range | per round |")
    print("|---|---|---|---|---|")
    for name in trees:
        rs = [r for r in rows if r["tree"] == name]
        us = [r["gateway_us_per_record"] for r in rs]
        rate = statistics.median(r["records_per_s"] for r in rs)
        print(f"| {name} | {rate:,.0f} | {statistics.median(us):.1f} | "
              f"{min(us):.1f}-{max(us):.1f} | {' '.join(f'{u:.0f}' for u in us)} |")


if __name__ == "__main__":
    main()
