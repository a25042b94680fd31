"""Latency of the etcd operations the cluster depends on, through yak.cluster.etcd.

Starts its own single-member etcd (Debian's etcd-server) in a temp dir on free ports, then
times, one at a time and then `--concurrency` at once: range, put, a fenced controller write
(nested txn), a partition compare-and-set, and a lease keepalive. Prints p50/p99 in ms and
the client's CPU per operation, which is what limits a broker's metadata path.

    .venv/bin/python benchmarks/etcd_bench.py --ops 2000 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from yak.cluster.controller import FencedWriter
from yak.cluster.etcd import Compare, EtcdClient, Op
from yak.cluster.lease import LeaseKeeper
from yak.devcluster.local import LocalEtcd, free_ports


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


async def timed(name: str, n: int, conc: int, op: Callable[[int], Awaitable[object]]) -> None:
    lat: list[float] = []
    sem = asyncio.Semaphore(conc)

    async def one(i: int) -> None:
        async with sem:
            t0 = time.perf_counter()
            await op(i)
            lat.append(time.perf_counter() - t0)

    t0, wall0 = os.times(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    t1, wall = os.times(), time.perf_counter() - wall0
    user, system = (t1.user - t0.user) / n * 1e6, (t1.system - t0.system) / n * 1e6
    print(f"{name:<24} c={conc:<3} {n / wall:6.0f} op/s  p50 {statistics.median(lat) * 1000:6.2f}"
          f" ms  p99 {pct(lat, 0.99):7.2f} ms  client CPU user {user:5.0f} + sys"
          f" {system:5.0f} us/op")


async def main(ops: int, concurrency: int, base: Path) -> None:
    c1, p1 = free_ports(2)
    etcd = LocalEtcd(base, [c1], [p1]).start()
    try:
        async with EtcdClient(etcd.endpoints) as c:
            keeper = LeaseKeeper(c, 9000, 2000, name="bench")
            lease = await keeper.start()
            r = await c.txn([Compare.create_revision("/b/controller", "==", 0)],
                            [Op.put("/b/controller", '{"brokerId":1}', lease=lease)])
            writer = FencedWriter(c, "/b/controller", r.revision, keeper)
            await c.put("/b/p", "x")
            for conc in (1, concurrency):
                await timed("range (linearizable)", ops, conc, lambda i: c.get("/b/p"))
                await timed("put", ops, conc, lambda i: c.put(f"/b/k{i % 100}", "v" * 100))
                await timed("fenced put (nested txn)", ops, conc,
                            lambda i: writer.put(f"/b/f{i % 100}", "v" * 100))

                async def cas(i: int) -> None:
                    kv = await c.get(f"/b/cas{i % 100}")
                    await writer.compare_and_put(f"/b/cas{i % 100}",
                                                 kv.mod_revision if kv else 0, "v")

                await timed("read + fenced CAS", ops, conc, cas)
                await timed("lease keepalive", ops, conc, lambda i: c.lease_keepalive(lease))
            await keeper.stop()
    finally:
        etcd.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(main(args.ops, args.concurrency, Path(d)))
