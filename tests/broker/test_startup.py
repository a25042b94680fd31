"""A part that cannot start stops the broker: exit 1 and one line naming the part, never a
broker that runs without it."""

from __future__ import annotations

import shutil
import subprocess
import sys

from .rawclient import RawClient


def test_a_part_that_cannot_start_stops_the_broker(broker_factory) -> None:
    b = broker_factory()
    with RawClient(b.bootstrap) as raw:
        raw.create_topic("st", 1)
    b.stop()
    # The partition's log directory is now a file: the topic manager cannot host it.
    shutil.rmtree(b.data_dir / "st-0")
    (b.data_dir / "st-0").write_text("not a directory")
    r = subprocess.run(
        [sys.executable, "-m", "yak.cli.main", "serve", "--data-dir", str(b.data_dir),
         "--listen", "127.0.0.1:0", "--http", "none"],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("yak: cannot start topic manager:"), r.stderr
    assert "st-0" in last and "Traceback" not in r.stderr
    assert "Yak broker ready" not in r.stdout
