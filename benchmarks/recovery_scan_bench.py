"""Unclean restart of ONE partition with a large active segment (issue 27, run C's slow restarts).

In the 30-minute chaos run C (docs/reliability.md) no segment rolled (segment.bytes 1 GiB), so
every restart after a kill -9 recovered each partition's whole active segment, batch by batch,
even when the recovery point (from an earlier flush or clean shutdown) was near its end.

This script builds, with the storage layer (the broker's own `LogManager` and `PartitionLog`),
one partition as such a crash leaves it:
- `--mib` MiB in one segment, in small idempotent batches (`--records` records of
  `--value-bytes` each per batch, `--producers` producer ids, as the chaos workloads write);
- a flush at `--rp-fraction` of it (the recovery point, checkpointed), more data after it;
- then a crash (`LogManager.crash()`: no flush, no checkpoint, no clean-shutdown marker).

It then times `LogManager.startup()` on fresh copies of that directory (wall and CPU), checks
that the log ends where it ended and that a read from the recovery point returns the
records, and prints what the loader reports (bytes scanned). `--profile` prints the top
cProfile entries of one startup.

`--cycles N` repeats run C's pattern instead: restart after a crash, write `--cycle-mib`
MiB more, crash again, N times, and prints each restart's recovery.

`--trees A,B` runs the measurement in child processes with PYTHONPATH set to each tree in
turn (alternating, `--rounds` each), on the same crashed directory, so a before/after
comparison sees the same data and the same machine load: build the old tree with
`git archive <commit> | tar -x -C /tmp/recov-before`.

Run: .venv/bin/python benchmarks/recovery_scan_bench.py [--mib 16] [--rounds 5]
     [--rp-fraction 0.95] [--rp-from flush|shutdown] [--profile]
     [--trees /tmp/recov-before,/work/main]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TOPIC = "bench"


def build_crashed(path: str, mib: float, records: int, value_bytes: int, producers: int,
                  rp_fraction: float, rp_from: str) -> dict:
    """The crashed data dir; returns what the recovery must find. `rp_from`: `flush` (a
    flush makes the recovery point: no producer snapshot there, as with flush.ms or
    write.caching=false) or `shutdown` (a clean shutdown and restart make it: a snapshot
    there, as after a `bounce` in the chaos run)."""
    from yak.protocol.records import Record, build_batch
    from yak.storage import LogConfig, LogManager

    m = LogManager(path, LogConfig(), start_cleaner=False)
    m.startup()
    plog = m.create(TOPIC, 0)
    target = int(mib * 1024 * 1024)
    seqs = [0] * producers
    written = 0
    flushed_at = -1
    i = 0
    now = int(time.time() * 1000)
    while written < target:
        pid = i % producers
        recs = [Record(b"k%d" % (i % 64), os.urandom(value_bytes), now + i)
                for _ in range(records)]
        batch = build_batch(recs, producer_id=1000 + pid, producer_epoch=0,
                            base_sequence=seqs[pid])
        seqs[pid] += records
        plog.append_as_leader(batch, 3)
        written += len(batch)
        i += 1
        if flushed_at < 0 and written >= rp_fraction * target:
            if rp_from == "flush":
                plog.flush()
                m.checkpoint()
            else:
                m.shutdown()
                m = LogManager(path, LogConfig(), start_cleaner=False)
                m.startup()
                plog = m.get(TOPIC, 0)
            flushed_at = plog.recovery_point
    plog.update_high_watermark()
    out = {"log_end": plog.log_end_offset, "recovery_point": flushed_at, "bytes": written,
           "batches": i, "segments": len(plog.segments)}
    m.crash()
    return out


def one_startup(src: str, work: str, expect: dict, profile: bool) -> dict:
    """Copy `src` to `work`, time LogManager.startup() on it, check the result."""
    from yak.storage import LogConfig, LogManager

    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(src, work)
    os.sync()
    m = LogManager(work, LogConfig(), start_cleaner=False, recovery_threads=1)
    prof = cProfile.Profile() if profile else None
    w0, c0 = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    m.startup()
    if prof:
        prof.disable()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    try:
        assert not m.was_clean_shutdown
        plog = m.get(TOPIC, 0)
        assert plog.log_end_offset == expect["log_end"], (plog.log_end_offset, expect)
        rp = expect["recovery_point"]
        res = plog.read(rp, 1 << 20)
        assert res.first_offset <= rp < res.next_offset, (rp, res.first_offset)
        stats = plog.recovery_stats
        out = {"wall": wall, "cpu": cpu, "bytes_scanned": stats.bytes_scanned,
               "scanned": list(stats.scanned)}
    finally:
        m.shutdown()
    if prof:
        st = pstats.Stats(prof)
        st.sort_stats("tottime").print_stats(18)
    return out


def crash_cycles(src: str, work: str, cycles: int, cycle_mib: float, records: int,
                 value_bytes: int) -> list[dict]:
    """Run C's pattern: restart after a crash (timed), write `cycle_mib` more, crash
    again, `cycles` times, on a copy of `src`. Before issue 27 the recovery point stayed
    where the checkpoint had it, so each restart scanned and replayed more."""
    from yak.protocol.records import Record, build_batch
    from yak.storage import LogConfig, LogManager

    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(src, work)
    out = []
    pid_seq: dict[int, int] = {}
    for _ in range(cycles):
        m = LogManager(work, LogConfig(), start_cleaner=False, recovery_threads=1)
        w0, c0 = time.perf_counter(), time.process_time()
        m.startup()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        plog = m.get(TOPIC, 0)
        st = plog.recovery_stats
        out.append({"wall": wall, "cpu": cpu, "bytes_scanned": st.bytes_scanned,
                    "recovery_point": st.recovery_point, "log_end": plog.log_end_offset})
        m.wait_for_flushes(60)  # what a broker's flusher does in the seconds after
        if not pid_seq:  # go on with the producers' sequences from the producer state
            for pid in range(1000, 1004):
                e = plog.producer_state.producers.get(pid)
                pid_seq[pid] = (e.batches[-1].last_seq + 1) if e and e.batches else 0
        written, i = 0, 0
        now = int(time.time() * 1000)
        while written < cycle_mib * 1024 * 1024:
            pid = 1000 + i % 4
            recs = [Record(b"k%d" % (i % 64), os.urandom(value_bytes), now + i)
                    for _ in range(records)]
            b = build_batch(recs, producer_id=pid, producer_epoch=0,
                            base_sequence=pid_seq[pid])
            pid_seq[pid] += records
            plog.append_as_leader(b, 3)
            written += len(b)
            i += 1
        m.crash()
    return out


def run_cycles(args: argparse.Namespace, src: str, expect: dict, trees: list[str]) -> None:
    """`--cycles`: each tree in a child process on the same crashed directory."""
    for t in trees:
        cmd = [sys.executable, os.path.abspath(__file__), "--child-src", src,
               "--child-expect", json.dumps(expect), "--cycles", str(args.cycles),
               "--cycle-mib", str(args.cycle_mib), "--records", str(args.records),
               "--value-bytes", str(args.value_bytes)]
        if args.dir:
            cmd += ["--dir", args.dir]
        p = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=t), capture_output=True,
                           text=True, check=False, cwd=t)
        if p.returncode:
            print(p.stdout, p.stderr)
            raise SystemExit(f"child for {t} failed")
        rows = json.loads(p.stdout.strip().splitlines()[-1][len("RESULT "):])
        print(f"\ntree {t}: {args.cycles} crash/restart cycles, {args.cycle_mib} MiB "
              f"written between crashes; load {os.getloadavg()[0]:.1f}")
        print("| restart | wall s | cpu s | bytes scanned | recovery point | log end |")
        print("|---|---|---|---|---|---|")
        for i, r in enumerate(rows):
            print(f"| {i + 1} | {r['wall']:.3f} | {r['cpu']:.3f} | {r['bytes_scanned']} | "
                  f"{r['recovery_point']} | {r['log_end']} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--mib", type=float, default=16)
    ap.add_argument("--records", type=int, default=2, help="records per batch")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--rp-fraction", type=float, default=0.95)
    ap.add_argument("--rp-from", choices=("flush", "shutdown"), default="flush")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--trees", default=None, help="comma-separated source trees to compare")
    ap.add_argument("--cycles", type=int, default=0,
                    help="crash/restart cycles (run C's pattern) instead of single startups")
    ap.add_argument("--cycle-mib", type=float, default=2.0, help="written between crashes")
    # internal: one measurement in a child process
    ap.add_argument("--child-src", default=None)
    ap.add_argument("--child-expect", default=None)
    args = ap.parse_args()

    if args.child_src:
        work = tempfile.mkdtemp(prefix="yak-recov-work-", dir=args.dir)
        try:
            if args.cycles:
                cyc = crash_cycles(args.child_src, os.path.join(work, "d"), args.cycles,
                                   args.cycle_mib, args.records, args.value_bytes)
                print("RESULT " + json.dumps(cyc))
                return
            r = one_startup(args.child_src, os.path.join(work, "d"),
                            json.loads(args.child_expect), args.profile)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print("RESULT " + json.dumps(r))
        return

    base = tempfile.mkdtemp(prefix="yak-recov-scan-", dir=args.dir)
    try:
        src = os.path.join(base, "crashed")
        t0 = time.perf_counter()
        expect = build_crashed(src, args.mib, args.records, args.value_bytes, args.producers,
                               args.rp_fraction, args.rp_from)
        print(f"recovery point from a {args.rp_from} at {args.rp_fraction:.2f} of the data")
        print(f"built in {time.perf_counter() - t0:.1f} s: {expect['bytes'] / 1e6:.1f} MB in "
              f"{expect['batches']} batches, {expect['segments']} segment(s), recovery point "
              f"{expect['recovery_point']}, log end {expect['log_end']}; "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        trees = args.trees.split(",") if args.trees else [None]
        if args.cycles:
            run_cycles(args, src, expect, [t or os.getcwd() for t in trees])
            return
        results: dict[str, list[dict]] = {t or "this": [] for t in trees}
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for t in order:
                if t is None:
                    work = os.path.join(base, "work")
                    res = one_startup(src, work, expect, args.profile and r == 0)
                else:
                    env = dict(os.environ, PYTHONPATH=t)
                    cmd = [sys.executable, os.path.abspath(__file__), "--child-src", src,
                           "--child-expect", json.dumps(expect)]
                    if args.dir:
                        cmd += ["--dir", args.dir]
                    if args.profile and r == 0:
                        cmd.append("--profile")
                    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False,
                                       cwd=t)
                    if p.returncode:
                        print(p.stdout, p.stderr)
                        raise SystemExit(f"child for {t} failed")
                    if args.profile and r == 0:
                        print(f"--- profile, tree {t}\n{p.stdout}")
                    res = json.loads(p.stdout.strip().splitlines()[-1][len("RESULT "):])
                results[t or "this"].append(res)
                print(f"round {r} {t or 'this'}: wall {res['wall']:.3f} s cpu {res['cpu']:.3f} s"
                      f" scanned {res['bytes_scanned']} bytes; load {os.getloadavg()[0]:.1f}",
                      flush=True)
        print("\n| tree | median wall s | median cpu s | bytes scanned |")
        print("|---|---|---|---|")
        for t, rs in results.items():
            print(f"| {t} | {statistics.median(x['wall'] for x in rs):.3f} | "
                  f"{statistics.median(x['cpu'] for x in rs):.3f} | {rs[0]['bytes_scanned']} |")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
