"""CPU per batch of an unclean restart of a log full of transactions (no sockets).

Why: a restarted broker with many small transactions spends its recovery replaying
producer state and reading every COMMIT/ABORT marker back (docs/reliability.md, finding 9).
This builds one partition of `--txns` transactions (one 5-record batch and one marker each,
`--producers` producers, every third aborted) once, then restarts it `--runs` times as after
kill -9 with no recovery point and no producer-state snapshot, so every batch is scanned,
CRC-checked and replayed. Prints CPU seconds (time.process_time) and CPU microseconds per
batch of `LogManager.startup()`.

A/B two trees in one run (the machine is shared: compare ratios, alternate the runs):

    for t in old new; do git archive <commit> | tar -x -C /tmp/rb-$t; done
    for i in 1 2 3 4 5; do for t in old new; do
        PYTHONPATH=/tmp/rb-$t .venv/bin/python benchmarks/txn_recovery_bench.py --label $t --runs 1
    done; done
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager


def build(path: str, txns: int, producers: int) -> None:
    shutil.rmtree(path, ignore_errors=True)
    m = LogManager(path, LogConfig(), start_cleaner=False)
    m.startup()
    log = m.create("t", 0)
    seq = [0] * producers
    for i in range(txns):
        p = i % producers
        batch = build_batch([Record(b"k%d" % j, b"v" * 100) for j in range(5)],
                            producer_id=1000 + p, producer_epoch=0, base_sequence=seq[p],
                            transactional=True)
        seq[p] += 5
        log.append_as_leader(batch, 0)
        log.append_txn_marker(1000 + p, 0, 0, commit=i % 3 != 0, leader_epoch=0)
    m.crash()


def restart(src: str, work: str) -> tuple[float, int, int]:
    """(CPU seconds of startup, batches, aborted-transaction index entries)."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(src, work)
    os.remove(os.path.join(work, "recovery-point-offset-checkpoint"))
    part = os.path.join(work, "t-0")
    for n in os.listdir(part):
        if n.endswith(".snapshot"):
            os.remove(os.path.join(part, n))
    m = LogManager(work, LogConfig(), start_cleaner=False)
    c0 = time.process_time()
    m.startup()
    cpu = time.process_time() - c0
    log = m.get("t", 0)
    assert log is not None
    batches = sum(1 for s in log.segments for _ in s.iter_headers(0))
    aborted = sum(len(s.txn_index) for s in log.segments)
    m.shutdown()
    return cpu, batches, aborted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/yak-txn-recovery-bench")
    ap.add_argument("--txns", type=int, default=30_000)
    ap.add_argument("--producers", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    src, work = os.path.join(a.dir, "src"), os.path.join(a.dir, "work")
    stamp = os.path.join(a.dir, f"built-{a.txns}-{a.producers}")
    if not os.path.exists(stamp):  # the log is the same for every tree: build it once
        build(src, a.txns, a.producers)
        open(stamp, "w").close()
    for _ in range(a.runs):
        cpu, batches, aborted = restart(src, work)
        print(f"{a.label:<6} startup cpu {cpu:6.3f} s  {cpu / batches * 1e6:6.2f} us/batch"
              f"  ({batches} batches, {aborted} aborted transactions indexed)")


if __name__ == "__main__":
    main()
