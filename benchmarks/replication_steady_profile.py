"""Where an RF=3 cluster's CPU goes in the steady state (issue 28): etcd plus three
`yak serve` brokers of TREE (run from TREE, its `yak/` first on the path), each with a
cProfile timed by its event-loop thread's CPU that is switched on by SIGUSR1 once the
topic exists, so start-up is left out; one acks=all produce of `--messages` records of
`--size` bytes to an RF=3 topic of 3 partitions (as `replication_rf.py`'s produce), then
the three profiles merged (written at SIGTERM): the top functions by internal and by
cumulative time.

    .venv/bin/python benchmarks/replication_steady_profile.py TREE [--size 1024]
        [--messages 100000] [--top 30] [--rf 3] [--partitions 3] [--set KEY=VALUE ...]
        [--keep DIR]

Unlike `replication_profile.py` (a catch-up of large responses in one process), this is
the produce-time shape: many small fetch responses, the leader's long polls woken per
append, the high watermark moved per follower fetch.
"""

from __future__ import annotations

import argparse
import io
import os
import pstats
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replication_rf import load_cluster_bench  # noqa: E402

WRAPPER = r'''
import cProfile, os, signal, sys, time
sys.path.insert(0, os.getcwd())  # the tree's yak/, not an installed one
from yak.cli.main import app
profile = cProfile.Profile(time.thread_time)
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
sys.argv = ["yak", *sys.argv[1:]]
try:
    app()
except SystemExit:
    pass
finally:
    profile.disable()
    profile.dump_stats(os.environ["PROF_OUT"])
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tree", type=Path)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=3,
                    help="1: one leader and two pure followers (see --keep)")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--keep", type=Path, default=None,
                    help="copy the brokers' .prof files here (for callers/callees)")
    a = ap.parse_args()
    tree = a.tree.resolve()
    cb = load_cluster_bench(tree)
    for kv in a.set:
        cb.SERVE = [*cb.SERVE, "--set", kv]
    base = Path(tempfile.mkdtemp(prefix="repl-steady-"))
    keep = base / "profiles"
    os.environ["YAK_BENCH_PROFILE"] = str(keep)
    base.mkdir(parents=True, exist_ok=True)
    (base / "wrapper.py").write_text(WRAPPER)
    os.environ["YAK_BENCH_PROFILE_SCRIPT"] = str(base / "wrapper.py")
    from yak.bench.spec import BenchSpec

    try:
        cluster = cb.Cluster(base / "c").start()
        try:
            from confluent_kafka.admin import AdminClient, NewTopic

            topic = f"steady-rf{a.rf}"
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            admin.create_topics([NewTopic(topic, a.partitions, a.rf, config={
                "min.insync.replicas": str(min(a.rf, 2))})])[topic].result(60)
            time.sleep(2)  # leaders and followers settled
            for p in cluster.procs.values():
                os.kill(p.pid, signal.SIGUSR1)
            spec = BenchSpec(bootstrap=cluster.bootstrap, topic=topic,
                             message_size=a.size, count=a.messages, partitions=a.partitions,
                             replication_factor=a.rf, acks="all", linger_ms=5.0,
                             timeout_s=300,
                             topic_config={"min.insync.replicas": str(min(a.rf, 2))})
            d = cb.bench_run(cluster, "produce", spec)
            print(f"{d['messages']} messages, {d['msgs_per_s']:.0f} msg/s, cluster CPU "
                  f"{d['cluster_cpu_us_per_msg']:.2f} us/msg (whole run incl. profiling)")
        finally:
            cluster.stop()
        files = sorted(str(p) for p in keep.rglob("*.prof"))
        if not files:
            raise SystemExit(f"no profiles under {keep}")
        if a.keep is not None:
            a.keep.mkdir(parents=True, exist_ok=True)
            for f in files:
                shutil.copy(f, a.keep / Path(f).name)
        stats = pstats.Stats(*files)
        total = stats.total_tt  # type: ignore[attr-defined]
        print(f"{len(files)} brokers' event-loop threads: {total:.2f} CPU s, "
              f"{total / d['messages'] * 1e6:.2f} us/msg")
        for key in ("tottime", "cumulative"):
            out = io.StringIO()
            stats.stream = out  # type: ignore[attr-defined]
            stats.sort_stats(key).print_stats(a.top)
            print(out.getvalue())
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
