"""The leader's Python work per follower Fetch, in one process, without sockets (issue 28).

A real ReplicaManager leads one partition (replicas 1, 2, 3, all in sync,
min.insync.replicas=2) in a temporary directory. Each round is RF=3's steady state at the
leader: the two followers' fetches (Fetch v15 request bytes, as the replica fetcher
encodes them, through `fetch_codec.decode_fetch_request` and the Fetch handler's
`handle`, which calls `fetch_messages` and encodes the answer) arrive at their log ends
and park in the fetch purgatory; an acks=all produce of one batch appends and wakes them;
they read the batch (the second pass after the wake-up) and answer; their next fetches
(the next round's) move the high watermark and complete the produce. The handler runs
with a stand-in for the broker's composition (no authorizer, no quotas, the real
`BrokerMetrics`, `ClusterTopicManager` over a one-topic id map and the leader's
`ReplicationThrottle` with no rate set, as a cluster broker has), which is what a
plaintext follower connection reaches; the connection's own path is not in it.

Reported: event-loop thread CPU per follower fetch (the round's CPU, the produce's
append and delayed produce included, divided by its two fetches), best of `--repeat`
blocks, and with `--profile` cProfile's per-call figures (deterministic: comparable under
load).

    .venv/bin/python benchmarks/leader_fetch_serve.py TREE [TREE ...] [--rounds 3000]
        [--pairs 2] [--records 40] [--profile]

Each TREE holds a `yak/` package (`git archive <commit> | tar -x`); the trees run
alternately (A B B A per pair), each in a fresh process.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import asyncio, cProfile, pstats, sys, tempfile, time, uuid
from types import SimpleNamespace
sys.path.insert(0, sys.argv[1])
from yak.broker.context import RequestContext
from yak.broker.handlers import fetch as fh
from yak.broker.metrics import BrokerMetrics
from yak.cluster.cluster_topics import ClusterTopicManager
from yak.cluster.replication_throttle import UNTHROTTLED, ReplicationThrottle
from yak.partition import AppendOrigin, PartitionState, ReplicaManager
from yak.protocol.fetch_client_codec import (FetchRequestPartition, FetchRequestTopic,
                                             encode_fetch_request)
from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager

ROUNDS, RECS, REPEAT, PROFILE = (int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                                 sys.argv[5] == "1")
TID = uuid.uuid4()
TID_STR = str(TID)
T = "bench"
VERSION = 15
WARM = 100


class Store:
    """The metadata image's id -> name map (all `topic_name` reads)."""

    def topic_name(self, topic_id):
        return T if topic_id == TID_STR else None


class Isr:
    async def submit(self, change):
        raise AssertionError("the ISR stays (1, 2, 3)")


async def main():
    with tempfile.TemporaryDirectory() as d:
        lm = LogManager(d, LogConfig(), start_cleaner=False)
        lm.startup()
        rm = ReplicaManager(1, lm, replica_lag_time_max_ms=30_000, alter_partition=Isr())
        config = LogConfig.from_props({"min.insync.replicas": "2"})
        # The composition's leader throttle (compose.py), no rate set: every fetch asks it.
        rm.leader_throttle = ReplicationThrottle.side(
            "leader", SimpleNamespace(node_id=1, leader_replication_throttled_rate=UNTHROTTLED),
            lambda name: None)
        rm.apply_partition_state(T, 0, TID, PartitionState((1, 2, 3), (1, 2, 3), 1, 0, 0),
                                 config)
        broker = SimpleNamespace(
            topics=ClusterTopicManager(Store(), rm, SimpleNamespace(node_id=1)),
            authorizer=None, quotas=SimpleNamespace(fetch=SimpleNamespace(enabled=False)),
            metrics=BrokerMetrics(), replica_manager=rm)
        ctxs = {r: RequestContext(broker, 1, VERSION, 1, "yak-replica-%d" % r,
                                  ("127.0.0.1", 1), extras={"sendfile": True})
                for r in (2, 3)}
        now = int(time.time() * 1000)
        data = memoryview(build_batch([Record(None, b"v" * 100, now) for _ in range(RECS)]))
        # The requests' bytes as they come off the wire (encoded before the timing), decoded
        # in the timing as the connection does.
        frames = {}
        for r in (2, 3):
            client = "yak-replica-%d" % r
            head = 4 + 2 + 2 + 4 + 2 + len(client) + 1
            frames[r] = [memoryview(bytes(encode_fetch_request(
                VERSION, 1, client, r, 100 + r, 500, 1, 10 << 20,
                [FetchRequestTopic(TID, T, [FetchRequestPartition(0, i * RECS, 0, 0, 0,
                                                                  4 << 20)])])))[head:]
                for i in range(WARM + REPEAT * ROUNDS)]
        offsets = {2: 0, 3: 0}

        async def fetch(r):
            ctx = ctxs[r]
            req = fh.decode_request(ctx, frames[r][offsets[r] // RECS])
            return await fh.handle(ctx, req)

        produce = None

        async def one_round():
            nonlocal produce
            f2 = asyncio.ensure_future(fetch(2))
            f3 = asyncio.ensure_future(fetch(3))
            for _ in range(4):
                await asyncio.sleep(0)
            if produce is not None:  # the previous round's: acknowledged by these fetches
                (res,) = await produce
                assert res.error == 0, res.error
            produce = asyncio.ensure_future(rm.append_records([(T, 0, data)], -1,
                                                              AppendOrigin.CLIENT, 30_000))
            r2, r3 = await f2, await f3
            assert r2.size > 0 and r3.size > 0, (r2.size, r3.size)
            offsets[2] += RECS
            offsets[3] += RECS

        for _ in range(WARM):
            await one_round()
        best = float("inf")
        times = []
        prof = cProfile.Profile() if PROFILE else None
        for _ in range(REPEAT):
            if prof is not None:
                prof.enable()
            t0 = time.thread_time()
            for _ in range(ROUNDS):
                await one_round()
            us = (time.thread_time() - t0) / (2 * ROUNDS) * 1e6
            if prof is not None:
                prof.disable()
            times.append(us)
        print("US", min(times), " ".join("%.1f" % t for t in times))
        if prof is not None:
            st = pstats.Stats(prof)
            fetches = 2 * ROUNDS * REPEAT
            rows = []
            for (fn, line, name), (cc, nc, tt, ct, _) in st.stats.items():
                rows.append((tt, ct, nc, "%s:%d(%s)" % (fn.split("/")[-1], line, name)))
            rows.sort(reverse=True)
            print("PROFILE total tottime per fetch %.1f us, function calls per fetch %.1f" % (
                sum(r[0] for r in rows) / fetches * 1e6, sum(r[2] for r in rows) / fetches))
            for tt, ct, nc, where in rows[:40]:
                print("PROFILE %8.2f %8.2f %6.2f %s" % (tt / fetches * 1e6, ct / fetches * 1e6,
                                                        nc / fetches, where))
        produce.cancel()  # the last one: no follower fetches again to acknowledge it
        await asyncio.gather(produce, return_exceptions=True)
        rm.io_pool.shutdown(wait=True)
        lm.shutdown()


asyncio.run(main())
'''


def run_tree(tree: str, args: argparse.Namespace) -> tuple[float, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(Path(tree).resolve()), str(args.rounds),
         str(args.records), str(args.repeat), "1" if args.profile else "0"],
        check=True, capture_output=True, text=True, cwd="/tmp").stdout
    us = 0.0
    profile = []
    for line in out.splitlines():
        if line.startswith("US "):
            us = float(line.split()[1])
        elif line.startswith("PROFILE"):
            profile.append(line[8:])
    return us, profile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="+")
    ap.add_argument("--rounds", type=int, default=3000)
    ap.add_argument("--records", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    results: dict[str, list[float]] = {t: [] for t in args.trees}
    for _pair in range(args.pairs):
        for tree in args.trees + args.trees[::-1]:  # A B B A
            us, profile = run_tree(tree, args)
            results[tree].append(us)
            print(f"{tree}: {us:.1f} us CPU per follower fetch", flush=True)
            if profile:
                print("\n".join(profile))
    for tree, values in results.items():
        print(f"{tree}: median {statistics.median(values):.1f} us per follower fetch "
              f"({', '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
