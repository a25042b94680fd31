"""The chaos tool's object-store faults (`yak chaos run --tiered`, issue 25):

- usage: a store fault without --tiered, or --tiered in network namespaces, is one line
  and exit 2 before anything starts; `--faults all` without --tiered reports them skipped;
- the replica comparison of a tiered topic starts at the replicas' highest local start
  (each deletes uploaded segments on its own schedule), and still finds a differing batch;
- `DutyCycle` (store-slow) really stops and resumes a process, and leaves it running;
- a real run: 3 brokers on etcd, SeaweedFS, the queue topic tiered, store-down,
  store-slow and store-crash-commit on a schedule: no anomaly, no error, every replica
  identical from the common start, segments in the bucket when the faults began, and the
  final reads from offset 0 read what only the store still holds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.chaos.test_replicas import _batches, _write
from yak.chaos.env import ClusterSpec
from yak.chaos.faults import parse_faults, unsupported
from yak.chaos.history import load_history
from yak.chaos.replicas import compare_replicas
from yak.chaos.runner import QUEUE_TOPIC, ChaosConfig, run
from yak.chaos.store import DutyCycle
from yak.devcluster.process import ManagedProcess

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"


def yak(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "yak.cli.main", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("args", "says"), [
    (["--faults", "kill,store-down"], "--faults store-down: the object store's faults need"
                                      " --tiered"),
    (["--faults", "store"], "--faults store: the object store's faults need --tiered"),
    (["--tiered", "--network", "netns", "--faults", "kill"], "--network netns"),
])
def test_usage_mistakes_exit_2_with_one_line(args: list[str], says: str, tmp_path: Path
                                            ) -> None:
    r = yak("chaos", "run", "--report", str(tmp_path / "r"), *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("yak: error:") and says in lines[0], lines
    assert not (tmp_path / "r").exists()


def test_store_faults_are_a_group_and_need_a_tiered_cluster(tmp_path: Path) -> None:
    assert parse_faults("store") == ["store-down", "store-slow", "store-crash-commit"]
    assert set(parse_faults("store")) <= set(parse_faults("all"))
    plain = SimpleNamespace(spec=ClusterSpec(tmp_path, brokers=3))
    tiered = SimpleNamespace(spec=ClusterSpec(tmp_path, brokers=3, tiered=True))
    for name in parse_faults("store"):
        assert unsupported(name, plain) == f"{name} acts on the object store: it needs --tiered"
        assert unsupported(name, tiered) is None
    with pytest.raises(ValueError, match="loopback"):
        ClusterSpec(tmp_path, tiered=True, network="netns")


def test_tiered_replicas_compare_from_their_common_local_start(tmp_path: Path) -> None:
    batches = _batches([b"v%d" % i for i in range(30)])  # 2 records each: offsets 0..59
    _write(tmp_path / "a", batches, 400)
    _write(tmp_path / "b", batches, 400)
    segs = sorted((tmp_path / "b" / "t-0").glob("*.log"))
    assert len(segs) > 3
    for seg in segs[:2]:  # replica b deleted its two oldest (uploaded) segments locally
        for f in seg.parent.glob(seg.stem + ".*"):
            f.unlink()
    dirs = {1: tmp_path / "a", 2: tmp_path / "b"}
    assert not compare_replicas(dirs, "t", 0, 60).identical  # b starts later
    cmp = compare_replicas(dirs, "t", 0, 60, common_start=True)
    assert cmp.identical, cmp.describe()
    start = int(sorted((tmp_path / "b" / "t-0").glob("*.log"))[0].stem)
    assert start > 0 and {d[0] for d in cmp.digests.values()} == {start}
    other = list(batches)
    other[25] = _batches([b"x"] * 26)[25]  # above the common start: still found
    _write(tmp_path / "c", other, 400)
    cmp = compare_replicas({1: tmp_path / "a", 2: tmp_path / "b", 3: tmp_path / "c"},
                           "t", 0, 60, common_start=True)
    assert not cmp.identical and "DIFFER" in cmp.describe()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_duty_cycle_stops_and_resumes_the_store_and_leaves_it_running(tmp_path: Path) -> None:
    proc = ManagedProcess("sleeper", ["sleep", "60"], tmp_path / "sleeper.log").start()
    try:
        cycle = DutyCycle(proc, stopped=0.3, running=0.3)
        cycle.start()
        seen = set()
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            seen.add(_state(proc.pid))
            time.sleep(0.02)
        cycles = cycle.stop()
        assert "T" in seen and "S" in seen, seen  # stopped, then sleeping again
        assert cycles >= 3
        assert _state(proc.pid) != "T" and proc.is_alive()
    finally:
        proc.kill()


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_tiered_run_under_store_faults_finds_no_anomaly(tmp_path: Path) -> None:
    out = ARTIFACTS / "chaos-tiered"
    shutil.rmtree(out, ignore_errors=True)
    schedule = [
        {"at": 12, "fault": "store-slow", "hold": 5},
        {"at": 22, "fault": "store-down", "hold": 5},
        {"at": 50, "fault": "store-crash-commit", "hold": 4},
    ]
    summary = run(ChaosConfig(
        report_dir=out, cluster_dir=tmp_path / "cluster", duration_s=75, brokers=3,
        faults=["store-slow", "store-down", "store-crash-commit"], schedule=schedule,
        workloads=("queue",), seed=25, tiered=True, title="tiered chaos run (issue 25)",
        command="tests/chaos/test_store_faults.py"))
    explain = json.dumps({k: summary.get(k) for k in ("anomaly_counts", "errors")},
                         default=str)[:3000]
    assert summary["anomalies_found"] == 0 and summary["errors"] == [], explain
    assert summary["valid"]
    assert sorted(summary["counts"]["faults_by_kind"]) == [
        "store-crash-commit", "store-down", "store-slow"], summary["counts"]
    assert summary["replicas"]["identical"] == summary["replicas"]["partitions"] == 4
    ops = load_history(out / "history.json")
    starts = [o for o in ops if o.get("op") == "nemesis" and o.get("phase") == "start"]
    assert len(starts) == 3
    assert max(o.get("remote_segments") or 0 for o in starts) > 0, starts
    crash = next(o for o in starts if o["fault"] == "store-crash-commit")
    assert crash["mid_round"] and crash["in_flight"], crash  # STARTED uploads at the kill
    swept = [line.split(": ", 1)[-1] for n in (1, 2, 3)
             for line in (tmp_path / "cluster" / "logs" / f"broker{n}.log").read_text(
                 errors="replace").splitlines() if ": swept" in line]
    print(f"\nstore-crash-commit: {crash['target']}, in flight {crash['in_flight']};"
          f" swept: {swept}")  # whether the kill beat the FINISHED commit: shown with -s
    # the queue's beginning is gone from every local log: the final reads from offset 0
    # (checked by the checker above) read it back from the store
    for n in (1, 2, 3):
        for p in range(4):
            d = tmp_path / "cluster" / f"broker{n}" / "data" / f"{QUEUE_TOPIC}-{p}"
            first = min(int(f.stem) for f in d.glob("*.log"))
            assert first > 0, (n, p)
    assert os.path.isfile(out / "summary.json")
