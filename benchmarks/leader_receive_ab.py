"""A leader's CPU per produced message, two source trees alternated (issue 28: the broker's
connection reading into `FrameReceiver` buffers instead of per-read `bytes` joined).

    .venv/bin/python benchmarks/leader_receive_ab.py OLD_TREE NEW_TREE [--rounds 4]
        [--messages-1k 300000] [--messages-100 1000000] [--out FILE]

Each tree holds a `yak/` package and `benchmarks/cluster_bench.py` (a worktree: `git
worktree add /tmp/old <commit> --detach`, its `.venv` a link to this one). Per round, each
tree in turn (old first on even rounds, new first on odd ones) starts one `yak serve`
(RF=1, cluster_bench's `Cluster(brokers=1)`, run with the tree as its working directory)
and runs confluent-kafka producers (`yak bench`'s worker: linger 5 ms, 1 MiB batches, 3
partitions) at 1 KiB and 100 B, acks=1 and acks=all; the figure is the broker process's
user+system CPU per acknowledged message, with the 1-minute load average and the CPU the
rest of the machine used meanwhile beside it (after an uncounted warm-up run). JSON rows on stderr as they come; the
summary (medians per tree and point, new/old ratios) on stdout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

POINTS = [(1024, "1"), (1024, "all"), (100, "1"), (100, "all")]


def load_cluster_bench(tree: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, tree / "benchmarks" / "cluster_bench.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def one_tree(cb: Any, label: str, base: Path, rnd: int, counts: dict[int, int]
             ) -> list[dict[str, Any]]:
    from yak.bench.spec import BenchSpec

    rows = []
    cluster = cb.Cluster(base / f"{label}-{rnd}", brokers=1).start()
    try:
        # Warm-up, not counted: the broker's first requests pay one-off costs (imports,
        # the first segment files).
        cb.bench_run(cluster, "produce", BenchSpec(
            bootstrap=cluster.bootstrap, topic=f"lr-warm-{rnd}", message_size=1024,
            count=20_000, partitions=3, replication_factor=1, acks="1", timeout_s=120))
        for size, acks in POINTS:
            spec = BenchSpec(bootstrap=cluster.bootstrap, topic=f"lr-{size}-{acks}-{rnd}",
                             message_size=size, count=counts[size], partitions=3,
                             replication_factor=1, acks=acks, linger_ms=5.0, timeout_s=300)
            d = cb.bench_run(cluster, "produce", spec)
            row = {"tree": label, "round": rnd, "size": size, "acks": acks,
                   "msgs_per_s": round(d["msgs_per_s"]),
                   "broker_cpu_us_per_msg": d["cluster_cpu_us_per_msg"],
                   "messages": d["messages"], "errors": d["errors"],
                   "load1": round(os.getloadavg()[0], 2),
                   "other_cpu_pct": d["other_cpu_pct_all"]}
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    finally:
        cluster.stop()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--messages-1k", type=int, default=300_000)
    ap.add_argument("--messages-100", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    trees = {"old": load_cluster_bench(a.old.resolve(), "cluster_bench_old"),
             "new": load_cluster_bench(a.new.resolve(), "cluster_bench_new")}
    counts = {1024: a.messages_1k, 100: a.messages_100}
    base = Path(tempfile.mkdtemp(prefix="leader-rx-"))
    rows: list[dict[str, Any]] = []
    try:
        for r in range(a.rounds):
            for label in ("old", "new") if r % 2 == 0 else ("new", "old"):
                rows += one_tree(trees[label], label, base, r, counts)
                shutil.rmtree(base / f"{label}-{r}", ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    summary = {}
    for size, acks in POINTS:
        med = {t: statistics.median(x["broker_cpu_us_per_msg"] for x in rows
                                    if x["tree"] == t and x["size"] == size
                                    and x["acks"] == acks) for t in ("old", "new")}
        tput = {t: statistics.median(x["msgs_per_s"] for x in rows
                                     if x["tree"] == t and x["size"] == size
                                     and x["acks"] == acks) for t in ("old", "new")}
        # Ratios of the rounds' pairs (each round ran both trees back to back).
        pairs = [n["broker_cpu_us_per_msg"] / o["broker_cpu_us_per_msg"]
                 for o in rows for n in rows
                 if o["tree"] == "old" and n["tree"] == "new" and o["round"] == n["round"]
                 and o["size"] == n["size"] == size and o["acks"] == n["acks"] == acks]
        summary[f"{size}B acks={acks}"] = {
            "old_cpu_us_per_msg": med["old"], "new_cpu_us_per_msg": med["new"],
            "new_over_old": round(med["new"] / med["old"], 3),
            "pair_ratios": [round(p, 3) for p in pairs],
            "old_msgs_per_s": tput["old"], "new_msgs_per_s": tput["new"]}
    out = {"old": str(a.old), "new": str(a.new), "rows": rows, "summary": summary,
           "load1_range": [min(x["load1"] for x in rows), max(x["load1"] for x in rows)]}
    text = json.dumps(out, indent=1)
    if a.out:
        a.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
