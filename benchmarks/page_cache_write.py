"""What a write into NEW page-cache pages costs on this machine, and why it moves (issue 28).

    .venv/bin/python benchmarks/page_cache_write.py [--dir /tmp] [--mib 1024]
        [--chunk-kib 256] [--pause 5]

Every replica of a partition writes each byte into its own page cache once (a log append is
a `pwritev` past the end of the segment file), so the kernel's price for that write is paid
three times at RF=3 whatever the broker's code does. On a VM whose balloon driver reports
free memory to the host (Linux free page reporting, `/sys/module/page_reporting`), a page
freed for long enough is handed back to the host, and the next write that lands on it
faults it in again there: the guest sees the copy into the page cache take several times
longer. This measures the system and user CPU per KiB of four writes of `--mib` MiB into
a new file (`--chunk-kib` per `pwritev`, as the log's appends):

1. `first`: right after start-up (whatever state the machine's free memory is in);
2. `reused`: right after deleting the previous file (its freshly freed pages come back);
3. `after pause`: after deleting it and waiting `--pause` seconds (time for the freed
   pages to be reported to the host);
4. `overwrite`: the same file's cached pages written again (no new pages at all).

With `reported_kib` (what the guest has reported to the host so far) printed around each
step, where the kernel exposes it. One JSON line per step on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

REPORTED = Path("/sys/module/page_reporting/parameters/reported_kib")


def reported_kib() -> int | None:
    try:
        return int(REPORTED.read_text())
    except (OSError, ValueError):
        return None


def write(path: Path, total: int, chunk: bytes, create: bool) -> dict[str, float]:
    flags = os.O_WRONLY | (os.O_CREAT | os.O_TRUNC if create else 0)
    fd = os.open(path, flags, 0o644)
    try:
        n = total // len(chunk)
        t0, w0 = os.times(), time.perf_counter()
        for i in range(n):
            os.pwritev(fd, [chunk], i * len(chunk))
        t1, w1 = os.times(), time.perf_counter()
    finally:
        os.close(fd)
    kib = n * len(chunk) / 1024
    return {"sys_us_per_kib": round((t1.system - t0.system) / kib * 1e6, 3),
            "user_us_per_kib": round((t1.user - t0.user) / kib * 1e6, 3),
            "wall_s": round(w1 - w0, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path, default=Path("/tmp"))
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--chunk-kib", type=int, default=256)
    ap.add_argument("--pause", type=float, default=5.0)
    args = ap.parse_args()
    chunk = os.urandom(args.chunk_kib * 1024)
    total = args.mib << 20
    path = args.dir / f"page-cache-write-{os.getpid()}"
    try:
        for step in ("first", "reused", "after pause", "overwrite"):
            if step == "after pause":
                path.unlink()
                time.sleep(args.pause)
            elif step == "reused":
                path.unlink()
            before = reported_kib()
            row = write(path, total, chunk, create=step != "overwrite")
            after = reported_kib()
            row = {"step": step, **row, "reported_kib_before": before,
                   "reported_kib_after": after}
            print(json.dumps(row), flush=True)
    finally:
        path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
