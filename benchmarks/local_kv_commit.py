"""What one commit to the single broker's local metadata store costs its event loop, by the
number of keys in the store (issue 25; docs/tiered.md "Where the metadata lives").

A store holding N durable keys of ~300 bytes (a remote log segment's metadata is about
that), then C commits of one put each, as the remote log manager makes them. Per commit:
the event loop thread's CPU time (`time.thread_time` on the loop thread with nothing else
on the loop, so the writer thread's work and the disk wait are not counted), the
commit's wall time (the fsynced write included), and the lateness of a probe coroutine
that sleeps 1 ms during a second run of the same commits (what a Produce on the same loop would wait: the loop's own
work plus any GIL the writer thread holds). Real files, fsync on.

    .venv/bin/python benchmarks/local_kv_commit.py --keys 10 1000 10000 --commits 100
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from yak.cluster.local_kv import LocalKV  # noqa: E402

VALUE = b"x" * 300


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * q))] * 1000


async def commit_cpu(kv: LocalKV, commits: int, tag: str) -> tuple[list[float], list[float]]:
    """Commits with nothing else on the loop: the loop thread's CPU per commit is the
    commit's own (awaiting the writer costs the loop no CPU)."""
    loop_cpu: list[float] = []
    wall: list[float] = []
    for i in range(commits):
        c0, w0 = time.thread_time(), time.perf_counter()
        await kv.put(f"/bench/remote_log/{tag}-{i:08d}", VALUE)
        loop_cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    return loop_cpu, wall


async def probe_lateness(kv: LocalKV, commits: int) -> list[float]:
    """The same commits with a coroutine that sleeps 1 ms: how late it wakes."""
    late: list[float] = []
    done = False

    async def probe() -> None:
        while not done:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append(max(0.0, time.perf_counter() - t - 0.001))

    task = asyncio.get_running_loop().create_task(probe())
    await asyncio.sleep(0.01)
    await commit_cpu(kv, commits, "probed")
    done = True
    await task
    return late


async def measure(kv: LocalKV, commits: int) -> tuple[list[float], list[float], list[float]]:
    cpu, wall = await commit_cpu(kv, commits, "seg")
    return cpu, wall, await probe_lateness(kv, commits)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, nargs="+", default=[10, 1000, 10000])
    ap.add_argument("--commits", type=int, default=100)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="yak-local-kv-"))
    for n in args.keys:
        path = tmp / f"kv-{n}.json"
        kv = LocalKV(path).open_sync()
        kv.load_initial({f"/bench/key/{i:08d}": VALUE for i in range(n)})
        cpu, wall, late = asyncio.run(measure(kv, args.commits))
        print(f"{n:6d} keys ({path.stat().st_size / 1e6:5.2f} MB file), {args.commits} commits:"
              f" loop CPU/commit median {statistics.median(cpu) * 1000:6.3f} ms"
              f" p99 {pct(cpu, 0.99):6.3f} ms | commit wall median"
              f" {statistics.median(wall) * 1000:6.2f} ms | probe late p99"
              f" {pct(late, 0.99):6.2f} ms max {max(late) * 1000:6.2f} ms", flush=True)
        os.unlink(path)


if __name__ == "__main__":
    main()
