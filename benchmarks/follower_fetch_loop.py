"""The follower's fetch loop in one process, without sockets (issue 28): a ReplicaManager
following one partition, its `_SourceFetcher._fetch` driven with answers built beforehand
(a stand-in connection returns them), so one fetch is the request's encode, the
response's decode and the append as follower (CRC, validation, pwritev, index entries,
producer state, high watermark). Event-loop thread CPU per fetch, and with `--profile`
the Python calls per fetch (deterministic, so comparable under load).

    .venv/bin/python benchmarks/follower_fetch_loop.py TREE [TREE ...] [--fetches 5000]
        [--records 40] [--pairs 2] [--profile]

Each TREE holds a `yak/` package (`git archive <commit> | tar -x`); the trees are run
alternately (A B B A per pair), each in a fresh process.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import asyncio, cProfile, pstats, struct, sys, tempfile, time, uuid
sys.path.insert(0, sys.argv[1])
from yak.cluster.replica_fetcher import FetcherConfig, ReplicaFetcherManager, _SourceFetcher
from yak.partition import PartitionState, ReplicaManager
from yak.protocol.fetch_codec import FetchPartitionResult, FetchTopicResult, encode_fetch_response
from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager

N, RECS, PROFILE = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
TID = uuid.uuid4()
WARM = 50


class NoIsr:
    async def submit(self, change):
        raise AssertionError("a follower changes no ISR")


def answers():
    now = int(time.time() * 1000)
    out, off = [], 0
    for _ in range(N + WARM):
        b = bytearray(build_batch([Record(b"k", b"v" * 100, now) for _ in range(RECS)],
                                  base_offset=off, producer_id=7, producer_epoch=0,
                                  base_sequence=off % 2**31))
        struct.pack_into(">i", b, 12, 0)  # partition leader epoch 0 (not under the CRC)
        off += RECS
        bufs, _ = encode_fetch_response(15, [FetchTopicResult("", TID, [FetchPartitionResult(
            0, 0, off, off, 0, None, -1, [bytes(b)], len(b))])], 0, 0, 0)
        out.append(b"\0\0\0\0\0" + b"".join(bytes(x) for x in bufs))
    return out


class Conn:
    is_open = True

    def __init__(self, frames):
        self.frames, self.i, self.cid = frames, 0, 0

    def next_correlation_id(self):
        self.cid += 1
        return self.cid

    async def request_frame(self, frame, cid, timeout):
        self.i += 1
        return memoryview(self.frames[self.i - 1])

    def close(self):
        pass


async def main():
    lm = LogManager(tempfile.mkdtemp(), LogConfig(), start_cleaner=False)
    lm.startup()
    rm = ReplicaManager(2, lm, replica_lag_time_max_ms=300, alter_partition=NoIsr())
    rm.apply_partition_state("t", 0, TID, PartitionState((1, 2, 3), (1, 2, 3), 1, 0, 0),
                             LogConfig())
    f = _SourceFetcher(ReplicaFetcherManager(rm, lambda n: ("127.0.0.1", 1),
                                             FetcherConfig(node_id=2)), 1, 0)
    f._task.cancel()
    f.add("t", 0, 0)
    pf = f.partitions[("t", 0)]
    f._conn = Conn(answers())
    for _ in range(WARM):
        await f._fetch([pf])
    prof = cProfile.Profile(time.thread_time) if PROFILE else None
    if prof:
        prof.enable()
    t = time.thread_time()
    for _ in range(N):
        await f._fetch([pf])
    dt = time.thread_time() - t
    calls = ""
    if prof:
        prof.disable()
        calls = f", {pstats.Stats(prof).total_calls / N:.1f} calls per fetch (profiled)"
    assert rm.get_partition("t", 0).log_end_offset == (N + WARM) * RECS, pf.last_error
    print(f"{sys.argv[1]}: {dt / N * 1e6:.1f} us per fetch{calls}")
    rm.io_pool.shutdown(wait=True)
    lm.shutdown()


asyncio.run(main())
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trees", nargs="+", type=Path)
    ap.add_argument("--fetches", type=int, default=5000)
    ap.add_argument("--records", type=int, default=40, help="records of 100 B per answer")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    order = []
    for i in range(a.pairs):
        order += a.trees if i % 2 == 0 else list(reversed(a.trees))
        order += list(reversed(a.trees)) if i % 2 == 0 else a.trees
    for tree in order:
        subprocess.run([sys.executable, "-c", CHILD, str(tree.resolve()), str(a.fetches),
                        str(a.records), "1" if a.profile else "0"], check=True)


if __name__ == "__main__":
    main()
