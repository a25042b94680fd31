"""`yak serve` under cProfile, timing the event-loop thread by its CPU (time.thread_time),
so a loaded machine's waits do not show up as hot spots. The profile goes to $PROF_OUT
when the broker exits (SIGTERM). Used by benchmarks/cluster_bench.py with
YAK_BENCH_PROFILE=<dir to keep the profiles> YAK_BENCH_PROFILE_SCRIPT=benchmarks/profile_serve.py.

    PROF_OUT=b1.prof python benchmarks/profile_serve.py serve --data-dir d --listen 127.0.0.1:9092
"""

from __future__ import annotations

import cProfile
import os
import sys
import time

from yak.cli.main import app

if __name__ == "__main__":
    profile = cProfile.Profile(time.thread_time)
    sys.argv = ["yak", *sys.argv[1:]]
    profile.enable()
    try:
        app()
    except SystemExit:
        pass
    finally:
        profile.disable()
        profile.dump_stats(os.environ["PROF_OUT"])
