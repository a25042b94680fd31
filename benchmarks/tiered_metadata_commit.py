"""What committing the remote log metadata costs (issue 25; docs/tiered.md "Where the
metadata lives"): per version, the metadata store's compare-and-set (etcd, and the single
broker's local store in a file) and the bucket's create-only manifest (SeaweedFS's S3 on
127.0.0.1), with a remote log of N segments; a read of the committed version from each (a
new leader's), and from the store a re-read with nothing changed (a follower's round: the
head only). Real etcd, real SeaweedFS, real files.

    .venv/bin/python benchmarks/tiered_metadata_commit.py --segments 10 1000 --commits 50
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.tiered.seaweed import SeaweedS3  # noqa: E402
from yak.cluster.etcd import EtcdClient  # noqa: E402
from yak.cluster.layout import ClusterKeys  # noqa: E402
from yak.cluster.local_kv import LocalKV  # noqa: E402
from yak.cluster.remote_log_metadata import KVRemoteLogMetadata  # noqa: E402
from yak.devcluster.local import LocalEtcd, free_ports  # noqa: E402
from yak.tiered.metadata import (  # noqa: E402
    Manifest,
    ManifestStore,
    RemoteLogSegmentMetadata,
    SegmentState,
)
from yak.tiered.store import RemoteStore, parse_uri  # noqa: E402

FILES = {k: (1000, 12345) for k in ("log", "index", "timeindex", "snapshot",
                                    "leader-epoch-checkpoint")}


def segment(i: int, state: SegmentState) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentMetadata.new_id(), i * 1000,
                                    i * 1000 + 999, 1_700_000_000_000 + i, 4 << 20,
                                    [(0, i * 1000)], state, FILES, 1, 1_700_000_000_000)


def versions(topic_id: str, n: int, commits: int) -> list[Manifest]:
    """Version 1 with `n` finished segments, then copy rounds: each adds two segments
    STARTED, then finishes them (two versions per round, as `_copy` commits)."""
    segs = tuple(segment(i, SegmentState.COPY_SEGMENT_FINISHED) for i in range(n))
    out = [Manifest("bench", 0, topic_id, 1, 0, 1, 0, segs)]
    i = n
    while len(out) < commits + 1:
        m = out[-1]
        new = (segment(i, SegmentState.COPY_SEGMENT_STARTED),
               segment(i + 1, SegmentState.COPY_SEGMENT_STARTED))
        i += 2
        started = replace(m, version=m.version + 1, segments=m.segments + new)
        ids = {s.segment_id for s in new}
        finished = replace(started, version=started.version + 1, segments=tuple(
            s.with_state(SegmentState.COPY_SEGMENT_FINISHED, 1) if s.segment_id in ids else s
            for s in started.segments))
        out += [started, finished]
    return out[:commits + 1]


def ms(samples: list[float]) -> str:
    s = sorted(samples)
    return (f"median {statistics.median(s) * 1000:7.2f} ms  p99 "
            f"{s[min(len(s) - 1, int(len(s) * 0.99))] * 1000:7.2f} ms")


async def run_kv(name: str, backend: KVRemoteLogMetadata, vs: list[Manifest]) -> None:
    # Version 1 (the long remote log) is the setup, adopted in batches if it is long.
    assert await backend.commit(Manifest("bench", 0, vs[0].topic_id), vs[0])
    times = []
    for old, new in zip(vs, vs[1:], strict=False):
        t = time.perf_counter()
        assert await backend.commit(old, new)
        times.append(time.perf_counter() - t)
    loads, rereads = [], []
    for _ in range(20):
        fresh = KVRemoteLogMetadata(backend.client, backend.keys)  # a new leader: all keys
        t = time.perf_counter()
        m = await fresh.load("bench", vs[0].topic_id, 0)
        loads.append(time.perf_counter() - t)
        t = time.perf_counter()  # a follower's next round, nothing changed: the head only
        m = await fresh.load("bench", vs[0].topic_id, 0)
        rereads.append(time.perf_counter() - t)
    assert m is not None and m.version == vs[-1].version
    print(f"  {name:22s} commit {ms(times)}   load {ms(loads)}   unchanged {ms(rereads)}")


async def run_bucket(store: RemoteStore, vs: list[Manifest]) -> None:
    ms_ = ManifestStore(store)
    assert await ms_.commit(vs[0])
    times = []
    for new in vs[1:]:
        t = time.perf_counter()
        assert await ms_.commit(new)
        times.append(time.perf_counter() - t)
    loads = []
    for _ in range(20):
        t = time.perf_counter()
        m = await ms_.load("bench", vs[0].topic_id, 0)
        loads.append(time.perf_counter() - t)
    assert m.version == vs[-1].version
    print(f"  {'bucket (SeaweedFS S3)':22s} commit {ms(times)}   load {ms(loads)}")


async def main_async(args: argparse.Namespace, tmp: Path, etcd: LocalEtcd,
                     weed: SeaweedS3) -> None:
    store = RemoteStore(parse_uri(f"s3://bench/p?endpoint={weed.endpoint}&region=us-east-1"),
                        {"access_key_id": "b", "secret_access_key": "bsecret"})
    async with EtcdClient(etcd.endpoints) as client:
        for n in args.segments:
            vs = versions(f"etcd{n}", n, args.commits)
            print(f"remote log of {n} segments, {args.commits} commits"
                  f" (manifest {len(vs[-1].to_bytes()) / 1024:.0f} KiB):")
            await run_kv("etcd", KVRemoteLogMetadata(client, ClusterKeys("bench")), vs)
            local = LocalKV(tmp / f"kv-{n}.json").open_sync()
            vs = versions(f"local{n}", n, args.commits)
            await run_kv("local store (file)", KVRemoteLogMetadata(local, ClusterKeys("b")), vs)
            await run_bucket(store, versions(f"bucket{n}", n, args.commits))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--segments", type=int, nargs="+", default=[10, 1000])
    ap.add_argument("--commits", type=int, default=50)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="yak-tiered-meta-"))
    ports = free_ports(2)
    etcd = LocalEtcd(tmp / "etcd", ports[:1], ports[1:]).start()
    weed = SeaweedS3(str(tmp))
    try:
        weed.start()
        weed.create_bucket("bench")
        asyncio.run(main_async(args, tmp, etcd, weed))
    finally:
        weed.stop()
        etcd.stop()


if __name__ == "__main__":
    main()
