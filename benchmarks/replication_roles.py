"""A leader's and its followers' CPU per message, RF=3 against RF=1, two trees alternated
in one time window (issue 28).

    .venv/bin/python benchmarks/replication_roles.py BEFORE_TREE AFTER_TREE [--rounds 2]
        [--messages 150000] [--size 1024] [--out FILE]
        [--before-set KEY=VALUE ...] [--after-set KEY=VALUE ...]

Each TREE holds a `yak/` package and `benchmarks/cluster_bench.py` (`git archive <commit> |
tar -x`): its brokers run that code. Per round and tree (BEFORE first on even rounds, AFTER
first on odd ones) a fresh cluster (etcd plus three `yak serve`) takes one acks=all
produce (confluent-kafka, linger 5 ms, 1 MiB batches, `yak bench`'s producer) to a topic of
ONE partition at RF=1, then to one at RF=3 (min.insync.replicas 2). With one partition the
roles are pure: the leader's broker only leads, the other two only follow, so each broker's
CPU (psutil user+system over the point) divided by the acknowledged messages is the cost
of that role. `replication_rf.py` measures the same ratio over three partitions, where
every broker both leads and follows. JSON rows on stderr as they come, the summary
(medians per tree) on stdout. `--before-set/--after-set` add broker settings to one arm
(the same TREE twice compares settings, e.g. `replica.fetch.max.bytes`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replication_rf import load_cluster_bench  # noqa: E402


def _leader(bootstrap: str, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return int(md.topics[topic].partitions[0].leader)


def point(cb: Any, cluster: Any, rf: int, size: int, messages: int, tag: str) -> dict[str, Any]:
    from yak.bench.spec import BenchSpec

    topic = f"roles-rf{rf}-{tag}"
    spec = BenchSpec(bootstrap=cluster.bootstrap, topic=topic, message_size=size,
                     count=messages, partitions=1, replication_factor=rf, acks="all",
                     linger_ms=5.0, timeout_s=300,
                     topic_config={"min.insync.replicas": str(min(rf, 2))})
    d = cb.bench_run(cluster, "produce", spec)
    leader = _leader(cluster.bootstrap, topic)
    n = max(1, d["messages"])
    by = {int(k): v for k, v in d["cpu_s_by_broker"].items()}
    followers = [v for k, v in by.items() if k != leader]
    return {"rf": rf, "msgs_per_s": d["msgs_per_s"], "messages": d["messages"],
            "errors": d["errors"], "cluster_us": d["cluster_cpu_us_per_msg"],
            "leader_us": round(by.get(leader, 0.0) / n * 1e6, 3),
            # RF=1: the two other brokers idle; RF=3: the two followers, each
            "other_us": [round(v / n * 1e6, 3) for v in followers],
            "other_cpu_pct": d["other_cpu_pct_all"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--messages", type=int, default=150_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--before-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--after-set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    sets = {"before": a.before_set, "after": a.after_set}
    trees = {"before": a.before.resolve(), "after": a.after.resolve()}
    base = Path(tempfile.mkdtemp(prefix="repl-roles-"))
    rows: list[dict[str, Any]] = []
    try:
        for r in range(a.rounds):
            for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                cb = load_cluster_bench(trees[name])
                for kv in sets[name]:
                    cb.SERVE = [*cb.SERVE, "--set", kv]
                cluster = cb.Cluster(base / f"{name}-{r}").start()
                try:
                    time.sleep(1)
                    for rf in (1, 3):
                        row = {"tree": name, "round": r,
                               **point(cb, cluster, rf, a.size, a.messages, f"{name}{r}")}
                        print(json.dumps(row), file=sys.stderr, flush=True)
                        rows.append(row)
                finally:
                    cluster.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    summary: dict[str, Any] = {}
    for name in trees:
        mine = [x for x in rows if x["tree"] == name]

        def med(rf: int, key: str, rows_: list[dict[str, Any]] = mine) -> float:
            return statistics.median(x[key] for x in rows_ if x["rf"] == rf)

        f3 = statistics.median(sum(x["other_us"]) / 2 for x in mine if x["rf"] == 3)
        summary[name] = {
            "rf1_msgs_per_s": med(1, "msgs_per_s"), "rf3_msgs_per_s": med(3, "msgs_per_s"),
            "rf1_cluster_us": med(1, "cluster_us"), "rf3_cluster_us": med(3, "cluster_us"),
            "cpu_rf3_over_rf1": med(3, "cluster_us") / med(1, "cluster_us"),
            "rf1_leader_us": med(1, "leader_us"), "rf3_leader_us": med(3, "leader_us"),
            "rf3_follower_us_each": f3,
        }
    out = {"trees": {k: str(v) for k, v in trees.items()}, "settings": sets, "size": a.size,
           "messages": a.messages, "rows": rows, "summary": summary}
    text = json.dumps(out, indent=1)
    if a.out:
        a.out.write_text(text)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
