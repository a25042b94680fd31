"""Storage-layer micro-benchmarks (no sockets): append, random read, recovery scan, compaction.

Run: .venv/bin/python benchmarks/storage_bench.py [--dir DIR] [--scale 1.0]
Reports wall time and CPU time (time.process_time) of this process; throughput is computed
from CPU time ("per core") and from wall time. Results go to docs/benchmarks/storage.md by hand.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable

from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager, checkpoint
from yak.storage.cleaner import clean_log


def measure(fn: Callable[[], int | float]) -> tuple[float, float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    n = fn()
    return n, time.perf_counter() - w0, time.process_time() - c0


def report(name: str, n: float, unit: str, wall: float, cpu: float) -> None:
    print(
        f"{name:<34} {n:>12,.0f} {unit:<8} wall {wall:7.3f}s cpu {cpu:7.3f}s  "
        f"-> {n / cpu:>14,.0f} {unit}/cpu-s  {n / wall:>14,.0f} {unit}/s"
    )


def fresh_manager(path: str, cfg: LogConfig) -> LogManager:
    shutil.rmtree(path, ignore_errors=True)
    m = LogManager(path, cfg, start_cleaner=False)
    m.startup()
    return m


def bench_append(base: str, batch_bytes: int, count: int) -> None:
    cfg = LogConfig(max_message_bytes=batch_bytes + 4096)
    m = fresh_manager(os.path.join(base, f"append{batch_bytes}"), cfg)
    log = m.create("bench", 0)
    value = random.Random(1).randbytes(batch_bytes - 61 - 20)
    batch = build_batch([Record(None, value, int(time.time() * 1000))])

    def run() -> int:
        for _ in range(count):
            log.append_as_leader(batch, 0)
        return count

    n, wall, cpu = measure(run)
    mb = len(batch) * n / 1e6
    report(f"append {batch_bytes // 1024} KiB batches", n, "batches", wall, cpu)
    report(f"append {batch_bytes // 1024} KiB batches", mb, "MB", wall, cpu)
    m.shutdown()


def bench_append_small(base: str, count: int, rounds: int = 5) -> None:
    """Per-batch overhead: 1-record batches of 100 B, so the header parse, validation and
    bookkeeping dominate, not the copy; plain and idempotent (producer id, sequences).
    Best of `rounds` (CPU us per append); run with --dir on tmpfs (/dev/shm) to keep the
    disk out of it."""
    now = int(time.time() * 1000)
    for idempotent in (False, True):
        m = fresh_manager(os.path.join(base, "append-small"), LogConfig())
        log = m.create("bench", 0)
        if idempotent:  # prebuilt: one producer, consecutive sequences across the rounds
            batches = [
                build_batch([Record(b"k", b"v" * 100, now)], producer_id=1, producer_epoch=0,
                            base_sequence=i)
                for i in range(count * rounds)
            ]
        else:
            batches = [build_batch([Record(b"k", b"v" * 100, now)])] * (count * rounds)
        best = float("inf")
        for r in range(rounds):
            todo = batches[r * count : (r + 1) * count]
            c0 = time.process_time()
            for b in todo:
                log.append_as_leader(b, 0)
            best = min(best, time.process_time() - c0)
        kind = "idempotent" if idempotent else "plain"
        print(f"append 1-record 100 B batches ({kind:<10}) {count:>9,}  best of {rounds}: "
              f"{best / count * 1e6:.2f} us CPU per append")
        m.shutdown()


def bench_append_ir(base: str, mode: str, count: int) -> None:
    """No timing: `count` prebuilt 1-record 100 B batches (`mode`: plain/idempotent, with
    "-build" only building them) appended to a fresh log, for an instruction counter:
    valgrind --tool=callgrind on the run with appends minus the build-only run, / count."""
    kind, _, only_build = mode.partition("-")
    m = fresh_manager(os.path.join(base, "append-ir"), LogConfig())
    log = m.create("bench", 0)
    now = int(time.time() * 1000)
    idem = kind == "idempotent"
    batches = [
        build_batch([Record(b"k", b"v" * 100, now)], producer_id=1 if idem else -1,
                    producer_epoch=0 if idem else -1, base_sequence=i if idem else -1)
        for i in range(count)
    ]
    if not only_build:
        for b in batches:
            log.append_as_leader(b, 0)
    m.crash()


def bench_key_check(count: int, rounds: int = 5) -> None:
    """Cost of refusing keyless records on compacted topics (`keyless_records`, run per
    batch only when cleanup.policy has compact): 100 records of 100 B per batch, plain
    and compressed (the batch is decompressed for the check). CPU ns per record."""
    from yak.protocol import compression
    from yak.protocol.records import keyless_records, parse_header

    now = int(time.time() * 1000)
    recs = [Record(b"key-%d" % i, bytes(100), now) for i in range(100)]
    for codec in (compression.NONE, compression.LZ4, compression.ZSTD):
        raw = build_batch(recs, compression_type=codec)
        h = parse_header(raw)
        best = float("inf")
        for _ in range(rounds):
            c0 = time.process_time()
            for _ in range(count):
                keyless_records(raw, h)
            best = min(best, time.process_time() - c0)
        print(f"key check, 100 x 100 B records, {compression.CODEC_NAMES[codec]:<5} "
              f"{best / count / 100 * 1e9:7.0f} ns CPU per record")


def bench_read(base: str, lookups: int) -> None:
    cfg = LogConfig(segment_bytes=64 * 1024 * 1024)
    m = fresh_manager(os.path.join(base, "read"), cfg)
    log = m.create("bench", 0)
    rng = random.Random(2)
    now = int(time.time() * 1000)
    batches = [build_batch([Record(b"k", rng.randbytes(100), now) for _ in range(10)])
               for _ in range(16)]
    for i in range(100_000):  # 1M records, ~20 segments of 64 MiB? (~150 MB)
        log.append_as_leader(batches[i % 16], 0)
    log.update_high_watermark()
    end = log.log_end_offset
    offsets = [rng.randrange(end) for _ in range(lookups)]

    def run() -> int:
        for off in offsets:
            r = log.read(off, 16384, max_offset=end)
            assert r.size
        return lookups

    n, wall, cpu = measure(run)
    report(f"random read by offset ({len(log.segments)} segs)", n, "lookups", wall, cpu)
    m.shutdown()


def _evict(path: str) -> None:
    """fsync and drop this log's files from the page cache (POSIX_FADV_DONTNEED), so the
    next restart reads them from the disk; touches no other process's cache."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _unclean_restart(path: str, cfg: LogConfig) -> tuple[float, float, str]:
    """Time LogManager.startup() after a crash; leaves the directory as unclean as it was."""
    w0, c0 = time.perf_counter(), time.process_time()
    m = LogManager(path, cfg, start_cleaner=False)
    m.startup()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    assert not m.was_clean_shutdown
    log = m.get("bench", 0)
    stats = getattr(log, "recovery_stats", None)  # not in the pre-issue-10 code
    what = (
        f"scanned {len(stats.scanned)}/{stats.segments} segments, "
        f"{stats.bytes_scanned / 1e6:,.0f} MB"
        if stats is not None
        else ""
    )
    m.crash()
    return wall, cpu, what


def bench_recovery(base: str, sizes_gb: list[float], segment_mb: int = 128) -> None:
    """Unclean restart of one partition of 1 GB / 10 GB (64 KiB batches, `segment_mb`
    segments): with the recovery point the roll flushes checkpointed (only the segment
    written since the last roll is scanned) and with the checkpoint removed (every byte is
    scanned, what happened when the checkpoint stayed empty), from the page cache and from
    the disk; then a clean restart."""
    cfg = LogConfig(segment_bytes=segment_mb * 1024 * 1024)
    value = random.Random(3).randbytes(64 * 1024)
    batch = build_batch([Record(None, value, int(time.time() * 1000))])
    for gb in sizes_gb:
        path = os.path.join(base, f"recovery-{gb:g}gb")
        m = fresh_manager(path, cfg)
        log = m.create("bench", 0)
        w0 = time.perf_counter()
        for _ in range(int(gb * 1e9) // len(batch)):
            log.append_as_leader(batch, 0)
        wait = getattr(m, "wait_for_flushes", None)  # the roll flusher (issue 10)
        if wait is not None:
            wait(3600)
        size, n_segs = log.size_in_bytes, len(log.segments)
        print(f"{gb:g} GB log: {size / 1e6:,.0f} MB in {n_segs} segments, active "
              f"{log.segments[-1].size / 1e6:,.0f} MB, recovery point {log.recovery_point:,} "
              f"of {log.log_end_offset:,} (written in {time.perf_counter() - w0:.1f} s)")
        m.crash()
        rp_file = os.path.join(path, checkpoint.RECOVERY_POINT_FILE)
        with open(rp_file, "rb") as f:
            saved = f.read()
        for cache in ("page cache", "disk"):
            for label, keep in (("recovery point", True), ("no checkpoint", False)):
                if not keep:
                    os.remove(rp_file)
                if cache == "disk":
                    _evict(path)
                wall, cpu, what = _unclean_restart(path, cfg)
                checkpoint.write_atomic(rp_file, saved)
                print(f"  unclean restart, {label:<14} {cache:<10}: wall {wall:7.3f} s, "
                      f"cpu {cpu:6.3f} s  {what}")
        m2 = LogManager(path, cfg, start_cleaner=False)
        m2.startup()
        m2.shutdown()
        _evict(path)
        w0, c0 = time.perf_counter(), time.process_time()
        m3 = LogManager(path, cfg, start_cleaner=False)
        m3.startup()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        assert m3.was_clean_shutdown
        m3.shutdown()
        print(f"  clean restart (disk): wall {wall * 1000:.1f} ms, cpu {cpu * 1000:.1f} ms")
        shutil.rmtree(path, ignore_errors=True)


def bench_compaction(base: str, total_mb: int, value_size: int, keys: int) -> None:
    cfg = LogConfig(segment_bytes=16 * 1024 * 1024, cleanup_policy="compact",
                    min_cleanable_dirty_ratio=0.0)
    m = fresh_manager(os.path.join(base, "compact"), cfg)
    log = m.create("bench", 0)
    rng = random.Random(4)
    now = int(time.time() * 1000)
    per_batch = max(1, 16384 // value_size)
    n_batches = total_mb * 1024 * 1024 // (per_batch * (value_size + 20))
    value = rng.randbytes(value_size)
    for _ in range(n_batches):
        recs = [Record(b"key-%d" % rng.randrange(keys), value, now) for _ in range(per_batch)]
        log.append_as_leader(build_batch(recs), 0)
    log.roll()
    log.update_high_watermark()
    size = log.size_in_bytes
    stats = None

    def run() -> float:
        nonlocal stats
        stats = clean_log(log, now, force=True)
        return size / 1e6

    n, wall, cpu = measure(run)
    assert stats is not None
    report(f"compaction ({value_size} B values)", n, "MB", wall, cpu)
    print(f"  kept {stats.records_kept:,} of {stats.records_read:,} records, "
          f"{size / 1e6:,.0f} MB -> {log.size_in_bytes / 1e6:,.1f} MB")
    m.shutdown()


def bench_group_commit(base: str, threads: int, per_thread: int) -> None:
    """write.caching=false: every append is fsynced before its ack; concurrent appenders
    share fsyncs (group commit). Counts fdatasync calls on the log."""
    import threading

    cfg = LogConfig(write_caching=False)
    m = fresh_manager(os.path.join(base, "sync"), cfg)
    log = m.create("bench", 0)
    batch = build_batch([Record(None, b"x" * 1000, int(time.time() * 1000))])
    calls = [0]
    real = os.fdatasync

    def counting(fd: int) -> None:
        calls[0] += 1
        real(fd)

    def worker() -> None:
        for _ in range(per_thread):
            r = log.append_as_leader(batch, 0)
            log.sync(r.last_offset + 1)

    def run() -> int:
        ts = [threading.Thread(target=worker) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return threads * per_thread

    os.fdatasync = counting  # type: ignore[assignment]
    try:
        n, wall, cpu = measure(run)
    finally:
        os.fdatasync = real  # type: ignore[assignment]
    report(f"fsynced appends, {threads} threads", n, "acks", wall, cpu)
    print(f"  {calls[0]:,} fdatasync calls for {n:,} acknowledged appends "
          f"({n / max(calls[0], 1):.1f} appends per fsync)")
    m.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="data dir (default: a temp dir on /tmp)")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--ir-mode", default="plain", help="append_ir: plain|idempotent[-build]")
    ap.add_argument("--ir-count", type=int, default=20000)
    ap.add_argument("--recovery-gb", default="1", help="log sizes for --only recovery, e.g. 1,10")
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="yak-bench-")
    s = args.scale
    todo = (
        args.only.split(",")
        if args.only
        else ["append", "append_small", "keys", "read", "recovery", "compaction", "sync"]
    )
    print(f"data dir {base}; cpu count {os.cpu_count()}")
    try:
        if "append" in todo:
            bench_append(base, 1024 * 1024, int(1000 * s))
            bench_append(base, 16 * 1024, int(100_000 * s))
        if "append_small" in todo:
            bench_append_small(base, int(100_000 * s))
        if "append_ir" in todo:
            bench_append_ir(base, args.ir_mode, args.ir_count)
        if "keys" in todo:
            bench_key_check(int(2000 * s))
        if "read" in todo:
            bench_read(base, int(100_000 * s))
        if "recovery" in todo:
            bench_recovery(base, [float(x) * s for x in args.recovery_gb.split(",")])
        if "compaction" in todo:
            bench_compaction(base, int(100 * s), 1024, 10_000)
            bench_compaction(base, int(100 * s), 100, 10_000)
        if "sync" in todo:
            bench_group_commit(base, 1, int(300 * s))
            bench_group_commit(base, 8, int(300 * s))
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
