"""`yak chaos`: usage mistakes are one line and exit 2 before anything starts; `check`
re-checks a saved history (exit 0 clean, 1 anomalies, 2 unreadable)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def yak(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "yak.cli.main", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--brokers", "2"], "--brokers 2: 1, 3 or 5"),
        (["--etcd-members", "2"], "--etcd-members 2"),
        (["--faults", "kill,explode"], "unknown fault 'explode'"),
        (["--workloads", "queue,bank"], "--workloads 'queue,bank'"),
        (["--interval", "5:1"], "--interval '5:1'"),
        (["--hold", "x"], "--hold 'x'"),
        (["--schedule", "/nonexistent/s.json"], "--schedule /nonexistent/s.json"),
        (["--network", "wifi"], "--network 'wifi'"),
        (["--set", "novalue"], "--set 'novalue'"),
        (["--disk-full-broker", "7"], "--disk-full-broker 7"),
        (["--report", "/tmp/chaos,1"], "a path with a comma cannot hold broker data"),
    ],
)
def test_usage_mistakes_exit_2_with_one_line(args: list[str], says: str, tmp_path: Path
                                            ) -> None:
    r = yak("chaos", "run", "--report", str(tmp_path / "r"), *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("yak: error:") and says in lines[0], lines
    assert not (tmp_path / "r").exists()  # nothing started


def test_bad_schedule_entries(tmp_path: Path) -> None:
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps([{"at": 1, "fault": "meteor"}]))
    r = yak("chaos", "run", "--schedule", str(bad))
    assert r.returncode == 2 and "unknown fault 'meteor'" in r.stderr
    bad.write_text(json.dumps({"at": 1}))
    r = yak("chaos", "run", "--schedule", str(bad))
    assert r.returncode == 2 and "a JSON list" in r.stderr


def test_check_a_saved_history(tmp_path: Path) -> None:
    h = [
        {"op": "send", "process": "p", "partition": "a", "value": 1, "status": "ok",
         "offset": 0},
        {"op": "send", "process": "p", "partition": "a", "value": 2, "status": "ok",
         "offset": 1},
        {"op": "poll", "process": "c", "records": [["a", 0, 1], ["a", 1, 2]]},
    ]
    good = tmp_path / "good.json"
    good.write_text(json.dumps(h))
    r = yak("chaos", "check", str(good))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["valid"] is True
    h[2]["records"] = [["a", 1, 2]]
    lost = tmp_path / "lost.json"
    lost.write_text(json.dumps(h))
    r = yak("chaos", "check", str(lost))
    assert r.returncode == 1
    assert json.loads(r.stdout)["anomaly_counts"] == {"lost_write": 1}
    r = yak("chaos", "check", str(lost), "--allow", "lost_write")
    assert r.returncode == 0
    (tmp_path / "bad.json").write_text(json.dumps([{"op": "send", "process": "p"}]))
    r = yak("chaos", "check", str(tmp_path / "bad.json"))
    assert r.returncode == 2 and "malformed history" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = yak("chaos", "check", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
