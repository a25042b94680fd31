"""Where the replica fetch path spends its CPU (issue 28): runs `replication_ab.py`'s child
(two brokers in one event loop, the follower catching up `--mib` MiB of 100 KiB batches
of 1 KiB records) under cProfile, and prints the top functions by internal and by
cumulative time. Leader serving and follower appending share the one process.

    PYTHONPATH=TREE .venv/bin/python benchmarks/replication_profile.py [--mib 128] [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replication_ab import CHILD  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    sys.argv = ["child", str(a.partitions), str(a.mib)]
    prof = cProfile.Profile()
    # Profile the catch-up only (not the imports, the broker start or the fill).
    child = CHILD.replace("    cpu0 = time.process_time()\n",
                          "    _prof.enable()\n    cpu0 = time.process_time()\n")
    child = child.replace("    wall = time.perf_counter() - t0\n",
                          "    wall = time.perf_counter() - t0\n    _prof.disable()\n")
    assert child.count("_prof.") == 2, "replication_ab.py's child changed shape"
    exec(compile(child, "replication_child", "exec"), {"__name__": "__child__", "_prof": prof})
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(a.top)
        print(out.getvalue())


if __name__ == "__main__":
    main()
