"""RF=3 against RF=1, and consume with and without sendfile, for one source tree (issue 28).

    .venv/bin/python benchmarks/replication_rf.py TREE [--rounds 2] [--messages 300000]
        [--sizes 100,1024] [--consume-messages 200000] [--no-consume] [--out FILE]
        [--set KEY=VALUE ...]

TREE holds a `yak/` package and `benchmarks/cluster_bench.py` (a worktree or
`git archive <commit> | tar -x`): its brokers run that code (started with the tree as their
working directory). Produce: `cluster_bench.throughput` of that tree (etcd plus three
`yak serve` brokers; confluent-kafka, acks=all, linger 5 ms, 1 MiB batches, 3 partitions;
RF=1 and RF=3 topics alternated per round), reporting msg/s and the three brokers' CPU per
acknowledged message. Consume (skipped with --no-consume, or when the tree has no
`socket.sendfile.enable`): one broker, a 3-partition topic of 1 KiB records filled once,
then read by one confluent-kafka consumer, alternately with `socket.sendfile.enable`
true and false (a fresh broker each, on the same data dir); the figure is the broker's CPU
per message consumed. `--set` adds a broker setting to every broker (e.g.
`num.replica.fetchers=2`). JSON rows on stderr as they come, the summary on stdout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any


def load_cluster_bench(tree: Path) -> Any:
    spec = importlib.util.spec_from_file_location("cluster_bench",
                                                  tree / "benchmarks" / "cluster_bench.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def consume_ab(cb: Any, base: Path, messages: int, rounds: int) -> list[dict[str, Any]]:
    from yak.bench.spec import BenchSpec

    serve = list(cb.SERVE)
    rows = []
    data = base / "consume"
    topic = "consume-1k"
    filled = False
    for r in range(rounds):
        for sendfile in (True, False) if r % 2 == 0 else (False, True):
            cb.SERVE = serve + ["--set", f"socket.sendfile.enable={str(sendfile).lower()}"]
            cluster = cb.Cluster(data, brokers=1).start()
            try:
                if not filled:
                    filled = True
                    fill = BenchSpec(bootstrap=cluster.bootstrap, topic=topic, message_size=1024,
                                     count=messages, partitions=3, replication_factor=1,
                                     acks="1", linger_ms=5.0, timeout_s=300)
                    cb.bench_run(cluster, "produce", fill)
                spec = BenchSpec(bootstrap=cluster.bootstrap, topic=topic, message_size=1024,
                                 count=messages, partitions=3, timeout_s=300)
                d = cb.bench_run(cluster, "consume", spec)
                row = {"sendfile": sendfile, "round": r, "msgs_per_s": d["msgs_per_s"],
                       "broker_cpu_us_per_msg": d["cluster_cpu_us_per_msg"],
                       "messages": d["messages"], "other_cpu_pct": d["other_cpu_pct_all"]}
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
            finally:
                cluster.stop()
    cb.SERVE = serve
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tree", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--consume-messages", type=int, default=200_000)
    ap.add_argument("--no-consume", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    tree = a.tree.resolve()
    cb = load_cluster_bench(tree)
    for kv in a.set:
        cb.SERVE = [*cb.SERVE, "--set", kv]
    base = Path(tempfile.mkdtemp(prefix="repl-rf-"))
    out: dict[str, Any] = {"tree": str(tree), "settings": a.set}
    try:
        cluster = cb.Cluster(base / "rf").start()
        try:
            rows = cb.throughput(cluster, a.rounds, a.messages,
                                 [int(s) for s in a.sizes.split(",")])
        finally:
            cluster.stop()
        out["produce"] = rows
        summary = {}
        for size in sorted({r["size"] for r in rows}):
            med = {rf: (statistics.median(r["msgs_per_s"] for r in rows
                                          if r["size"] == size and r["rf"] == rf),
                        statistics.median(r["cluster_cpu_us_per_msg"] for r in rows
                                          if r["size"] == size and r["rf"] == rf))
                   for rf in (1, 3)}
            summary[size] = {"rf1_msgs_per_s": med[1][0], "rf3_msgs_per_s": med[3][0],
                             "throughput_rf3_over_rf1": med[3][0] / med[1][0],
                             "rf1_cpu_us_per_msg": med[1][1], "rf3_cpu_us_per_msg": med[3][1],
                             "cpu_rf3_over_rf1": med[3][1] / med[1][1]}
            # User and system CPU apart (trees whose cluster_bench reports them): the
            # system part carries the VM's price for new page-cache pages (section 15).
            for part in ("user", "sys"):
                vals = {rf: [r[f"{part}_us_per_msg"] for r in rows if r["size"] == size
                             and r["rf"] == rf and f"{part}_us_per_msg" in r] for rf in (1, 3)}
                if vals[1] and vals[3]:
                    a1, a3 = statistics.median(vals[1]), statistics.median(vals[3])
                    summary[size][f"rf1_{part}_us_per_msg"] = a1
                    summary[size][f"rf3_{part}_us_per_msg"] = a3
                    summary[size][f"{part}_rf3_over_rf1"] = a3 / a1 if a1 else None
        out["produce_summary"] = summary
        has_setting = "socket.sendfile.enable" in (tree / "yak" / "settings.py").read_text()
        if not a.no_consume and has_setting:
            rows = consume_ab(cb, base, a.consume_messages, a.rounds)
            out["consume"] = rows
            on = statistics.median(r["broker_cpu_us_per_msg"] for r in rows if r["sendfile"])
            off = statistics.median(r["broker_cpu_us_per_msg"] for r in rows
                                    if not r["sendfile"])
            out["consume_summary"] = {"sendfile_cpu_us_per_msg": on,
                                      "copy_cpu_us_per_msg": off,
                                      "sendfile_over_copy": on / off}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    text = json.dumps(out, indent=1)
    if a.out:
        a.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
