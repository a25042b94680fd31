"""Replica fetcher throughput, A/B between two source trees in one run (issue 22: the
replica fetchers moved onto `yak.wire.KafkaConnection`; this says whether the hot path
stayed as fast).

    .venv/bin/python benchmarks/replication_ab.py BEFORE_TREE AFTER_TREE [--rounds 3]
        [--partitions 4] [--mib 256] [--before-set K=V ...] [--after-set K=V ...]

A tree is a directory holding a `yak/` package (`git archive <commit> | tar -x -C DIR`).
Each round runs, for each tree in turn, a child process with that tree first on
`sys.path`: two brokers in one event loop (as tests/cluster/test_replica_fetcher.py
does: the test plays the controller, publishing partition states), the leader's
partitions filled with `--mib` MiB of 100 KiB batches (1 KiB records) before the
follower starts, then the time until the follower's replica fetcher has copied all of
it (log end offsets equal). Reported: MiB/s of the catch-up and the process CPU seconds
it took (leader serving + follower fetching, both in the one process), per round, and
the after/before ratio of the medians. `--before-set`/`--after-set` add broker settings
to one side (both brokers), so one tree can be compared with itself under two settings
(`replication_ab.py T T --after-set num.replica.fetchers=2`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r'''
import asyncio, json, os, sys, tempfile, time
from pathlib import Path

async def main(partitions: int, mib: int, extra: list) -> dict:
    from yak.broker.server import start_broker
    from yak.cluster.replica_fetcher import FetcherConfig, ReplicaFetcherManager
    from yak.config import BrokerConfig
    from yak.partition import PartitionState
    from yak.protocol.records import Record, build_batch
    from yak.storage import LogConfig

    tmp = Path(tempfile.mkdtemp(prefix="repl-ab-"))
    running, fetchers, addresses = {}, {}, {}
    config = LogConfig.from_props({})
    states = {}

    class Controller:
        def __init__(self, topic_id):
            self.topic_id = topic_id
        async def submit(self, change):
            st = states[change.partition]
            new = PartitionState(st.replicas, change.new_isr, st.leader, st.leader_epoch,
                                 st.partition_epoch + 1)
            publish(change.topic, change.partition, new)
            return new

    def publish(topic, partition, state):
        states[partition] = state
        for n in state.replicas:
            running[n].broker.replica_manager.apply_partition_state(
                topic, partition, topic_id, state, config)

    for n in (1, 2):
        cfg = BrokerConfig.load(data_dir=str(tmp / f"b{n}"), listen="127.0.0.1:0",
                                overrides=(f"node.id={n}", "replica.lag.time.max.ms=60000",
                                           "replica.fetch.wait.max.ms=200", *extra))
        rb = await start_broker(cfg)
        running[n] = rb
        addresses[n] = ("127.0.0.1", rb.port)
        fetchers[n] = ReplicaFetcherManager(
            rb.broker.replica_manager, addresses.get,
            FetcherConfig.from_broker_config(cfg, broker_epoch=lambda n=n: 1000 + n))
        await fetchers[n].start()
    T = "repl"
    await running[1].broker.topics.create(T, partitions, {})
    topic_id = running[1].broker.topics.get(T).topic_id
    ctl = Controller(topic_id)
    for n in (1, 2):
        running[n].broker.replica_manager.alter_partition = ctl
    for p in range(partitions):
        publish(T, p, PartitionState((1, 2), (1,), 1, 1, 1))
    batch = memoryview(build_batch([Record(b"k%d" % i, os.urandom(1024)) for i in range(100)]))
    rm1 = running[1].broker.replica_manager
    per_partition = (mib << 20) // len(batch) // partitions
    for p in range(partitions):
        for _ in range(per_partition):
            r = rm1.append_local(T, p, batch, 1)
            assert r.error is None or int(r.error) == 0, r
    total = sum(rm1.get_partition(T, p).log_end_offset for p in range(partitions))
    rm2 = running[2].broker.replica_manager
    nbytes = per_partition * partitions * len(batch)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for p in range(partitions):
        fetchers[2].follow(T, p, 1, 1)
    while sum(rm2.get_partition(T, p).log_end_offset for p in range(partitions)) < total:
        await asyncio.sleep(0.005)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    for f in fetchers.values():
        await f.stop()
    for rb in running.values():
        await rb.stop()
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    return {"mib": nbytes / (1 << 20), "wall_s": wall, "cpu_s": cpu,
            "mib_per_s": nbytes / (1 << 20) / wall, "cpu_s_per_gib": cpu / (nbytes / (1 << 30))}

import uvloop
uvloop.install()
print(json.dumps(asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]),
                                  json.loads(sys.argv[3]) if len(sys.argv) > 3 else []))))
'''


def one(tree: Path, partitions: int, mib: int, extra: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", CHILD, str(partitions), str(mib),
                          json.dumps(extra)], cwd=tree,
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise SystemExit(f"{tree}: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--before-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--after-set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    rows: dict[str, list[dict]] = {"before": [], "after": []}
    for r in range(a.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for name in order:
            res = one(getattr(a, name).resolve(), a.partitions, a.mib,
                      getattr(a, f"{name}_set"))
            rows[name].append(res)
            print(f"round {r + 1} {name}: {res['mib_per_s']:.0f} MiB/s, "
                  f"{res['cpu_s_per_gib']:.2f} CPU s/GiB", file=sys.stderr)
    med = {k: statistics.median(x["mib_per_s"] for x in v) for k, v in rows.items()}
    cpu = {k: statistics.median(x["cpu_s_per_gib"] for x in v) for k, v in rows.items()}
    summary = {"rounds": rows, "median_mib_per_s": med, "median_cpu_s_per_gib": cpu,
               "throughput_ratio_after_over_before": med["after"] / med["before"],
               "cpu_ratio_after_over_before": cpu["after"] / cpu["before"],
               "settings": {"before": a.before_set, "after": a.after_set},
               "load_avg": os.getloadavg()}
    text = json.dumps(summary, indent=1)
    if a.out:
        a.out.write_text(text)
    print(text)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        main()
