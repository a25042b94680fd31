"""Unclean-restart log loading: sequential vs parallel (`num.recovery.threads.per.data.dir`).

Builds one data dir as a crash leaves it (many partitions, each with rolled segments and an
unflushed tail), then times `LogManager.startup()` on fresh copies of it with 1, 2, 4 and 8
recovery threads, in rounds that alternate the order. Each copy is synced before it is
timed, so the copy's own writeback is not charged to the recovery.

Conditions:
- `quiet`: nothing else of this script runs;
- `cold`: the copy's files are dropped from the page cache first (posix_fadvise DONTNEED),
  so recovery reads the disk;
- `contended`: as `cold`, and `--writers` other processes each write `--chunk-mib` MiB
  chunks with an fsync after each, beside the recovery, on the same file system (the chaos
  run's situation: a restart while benchmarks wrote gigabytes with fsyncs). Recovery's
  reads, file creations and truncations queue behind their writeback.

Run: .venv/bin/python benchmarks/recovery_bench.py [--dir DIR] [--partitions 48]
     [--batches 150] [--rounds 3] [--threads 1,2,4,8] [--conditions quiet,cold,contended]
     [--writers 2] [--chunk-mib 8]
Prints one line per measurement and a summary (median wall seconds per thread count).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time

from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager

CFG = LogConfig(segment_bytes=1024 * 1024, index_interval_bytes=4096)


def build_crashed(path: str, partitions: int, batches: int) -> dict[tuple[str, int], int]:
    """A data dir left by a crash; returns each log's end offset."""
    m = LogManager(path, CFG, start_cleaner=False)
    m.startup()
    for p in range(partitions):
        plog = m.create("bench", p)
        for i in range(batches):
            recs = [Record(b"k%d" % (i % 16), os.urandom(100)) for _ in range(10)]
            plog.append_as_leader(build_batch(recs), 1)
        plog.update_high_watermark()
    m.wait_for_flushes(60)
    ends = {(p.topic, p.partition): p.log_end_offset for p in m.logs()}
    m.crash()
    return ends


def drop_cache(path: str) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def fsync_writer(path: str, stop: multiprocessing.synchronize.Event,  # type: ignore[name-defined]
                 chunk_mib: int) -> None:
    chunk = os.urandom(chunk_mib * 1024 * 1024)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        n = 0
        while not stop.is_set():
            os.write(fd, chunk)
            os.fsync(fd)
            n += 1
            if n % max(1, 256 // chunk_mib) == 0:  # keep the file at about 256 MiB
                os.lseek(fd, 0, os.SEEK_SET)
    finally:
        os.close(fd)
        os.remove(path)


def timed_startup(src: str, work: str, threads: int, cold: bool,
                  ends: dict[tuple[str, int], int]) -> tuple[float, float]:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(src, work)
    os.sync()
    if cold:
        drop_cache(work)
    m = LogManager(work, CFG, start_cleaner=False, recovery_threads=threads)
    w0, c0 = time.perf_counter(), time.process_time()
    m.startup()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    try:
        assert not m.was_clean_shutdown
        got = {(p.topic, p.partition): p.log_end_offset for p in m.logs()}
        assert got == ends, "recovered logs differ from what was written"
        assert all(p.recovery_stats.scanned for p in m.logs())
    finally:
        m.shutdown()
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--partitions", type=int, default=48)
    ap.add_argument("--batches", type=int, default=150, help="1 KiB batches per partition")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2,4,8")
    ap.add_argument("--conditions", default="quiet,cold,contended")
    ap.add_argument("--writers", type=int, default=2, help="fsync writers when contended")
    ap.add_argument("--chunk-mib", type=int, default=8, help="each writer's write size")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="yak-recovery-", dir=args.dir)
    try:
        src = os.path.join(base, "crashed")
        ends = build_crashed(src, args.partitions, args.batches)
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _d, fs in os.walk(src) for f in fs)
        print(f"data dir: {args.partitions} partitions, {size / 1e6:.1f} MB, every log with "
              f"an unflushed tail; rounds {args.rounds}")
        threads = [int(t) for t in args.threads.split(",")]
        results: dict[tuple[str, int], list[float]] = {}
        for cond in args.conditions.split(","):
            stop = multiprocessing.Event()
            writers = []
            if cond == "contended":
                for i in range(args.writers):
                    w = multiprocessing.Process(target=fsync_writer, args=(
                        os.path.join(base, f"noise-{i}"), stop, args.chunk_mib))
                    w.start()
                    writers.append(w)
                time.sleep(1.0)
            try:
                for r in range(args.rounds):
                    order = threads if r % 2 == 0 else threads[::-1]
                    for t in order:
                        wall, cpu = timed_startup(src, os.path.join(base, "work"), t,
                                                  cond != "quiet", ends)
                        results.setdefault((cond, t), []).append(wall)
                        print(f"{cond:<10} threads {t}: wall {wall:6.3f} s  cpu {cpu:6.3f} s",
                              flush=True)
            finally:
                stop.set()
                for w in writers:
                    w.join(60)
        print("\nmedian wall seconds of startup()")
        print("| condition | " + " | ".join(f"{t} thread{'s' if t > 1 else ''}" for t in threads)
              + " |")
        print("|---|" + "---|" * len(threads))
        for cond in args.conditions.split(","):
            row = [statistics.median(results[(cond, t)]) for t in threads]
            print(f"| {cond} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
