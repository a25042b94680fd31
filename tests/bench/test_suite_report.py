"""The suite's report: medians over rounds, Yak/peer ratios and target verdicts.

Built from synthetic runs so the arithmetic is checked exactly; the suite itself is run
by hand (it installs system packages and takes minutes), see docs/benchmarks/README.md.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

# `benchmarks/` is a top-level folder of scripts, not an installed package:
# load the report module from its file.
_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "suite" / "report.py"
_spec = importlib.util.spec_from_file_location("yak_suite_report", _PATH)
assert _spec is not None and _spec.loader is not None
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def _run(broker: str, workload: str, size: int, rate: float, us: float, rnd: int,
         **extra: float) -> dict:
    return {"broker": broker, "workload": workload, "size": size, "round": rnd, "msgs": 1000,
            "msgs_per_s": rate, "MB_per_s": rate * size / 1e6, "server_us_per_msg": us,
            "server_cpu_pct": 10.0, "other_cpu_pct": 50.0, "rss_mb": 60.0, **extra}


RUNS = [
    _run("yak", "produce", 100, 300_000, 0.20, 1),
    _run("yak", "produce", 100, 500_000, 0.10, 2),
    _run("yak", "produce", 100, 400_000, 0.15, 3),
    _run("tansu", "produce", 100, 200_000, 0.30, 1),
    _run("tansu", "produce", 100, 250_000, 0.40, 2),
    _run("tansu", "produce", 100, 900_000, 0.35, 3),
    _run("yak", "consume", 100, 100_000, 0.50, 1),
    _run("tansu", "consume", 100, 200_000, 0.10, 1),
    _run("yak", "latency", 100, 10_000, 20.0, 1, p50_ms=0.4, p95_ms=1.0, p99_ms=3.0,
         p999_ms=6.0, max_ms=9.0),
    _run("yak", "latency", 100, 10_000, 20.0, 2, p50_ms=0.5, p95_ms=1.0, p99_ms=7.0,
         p999_ms=9.0, max_ms=12.0),
    {"broker": "yak", "workload": "produce", "size": 1024, "round": 1, "error": "boom"},
]


def test_medians_min_max_and_failed_runs_left_out() -> None:
    agg = report.aggregate(RUNS)
    y = agg[("produce", "yak", 100)]
    assert (y["runs"], y["msgs_per_s"], y["min"], y["max"]) == (3, 400_000, 300_000, 500_000)
    assert y["us_per_msg"] == 0.15
    assert agg[("produce", "tansu", 100)]["msgs_per_s"] == 250_000
    assert ("produce", "yak", 1024) not in agg  # the failed run is not a zero
    lat = agg[("latency", "yak", 100)]
    assert (lat["p99_ms"], lat["p99_min"], lat["p99_max"]) == (5.0, 3.0, 7.0)


def test_targets_use_ratios_of_medians() -> None:
    rows = "\n".join(report.targets(report.aggregate(RUNS)))
    assert "| produce 100 B msg/s Yak/tansu >= 1.0 | 1.60 " in rows and "PASS" in rows
    assert "| consume 100 B msg/s Yak/tansu >= 1.0 | 0.50 " in rows
    assert "produce <= 0.3 us | 0.150 us | PASS" in rows
    assert "consume <= 0.2 us | 0.500 us | **FAIL**" in rows
    assert "| 5.00 ms | PASS" in rows  # median p99 of 3 and 7


def test_write_produces_markdown_json_and_plots(tmp_path: Path) -> None:
    meta = {"date": "d", "command": "python -m benchmarks.suite", "cpu": "c", "cores": 2,
            "memory_gib": 1, "kernel": "k", "python": "3", "work_dir_fs": "ext4", "rounds": 3,
            "versions": {"x": "1"}, "durability": {"yak": "page cache"}, "problems": ["p"]}
    paths = report.write(RUNS, [{"ceiling": "disk", "MB_per_s": 500.0}], meta, tmp_path)
    md = paths[0].read_text()
    assert "| Yak (confluent-kafka) | 100 | 400,000 | 300,000-500,000 |" in md
    assert "| tansu (confluent-kafka) | 100 | 250,000 | 200,000-900,000 | 25.0 | 1.60 |" in md
    assert "yak produce 1024 B round 1: boom" in md and "- p" in md
    assert json.loads(paths[1].read_text())["runs"] == RUNS
    pngs = [p for p in paths if p.suffix == ".png"]
    if importlib.util.find_spec("matplotlib") is None:  # only in the `bench` extra
        assert pngs == [] and "no plots" in md
    else:
        assert len(pngs) == 2 and all(p.stat().st_size > 10_000 for p in pngs)
        assert all(f"]({p.name})" in md for p in pngs)


@pytest.mark.slow
def test_suite_runs_end_to_end_against_yak(tmp_path: Path) -> None:
    """The harness itself (servers, drivers, alternation, report) on Yak alone, tiny counts."""
    import subprocess
    import sys

    repo = _PATH.parents[2]
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "benchmarks.suite", "--brokers", "yak", "--sizes", "100",
         "--rounds", "2", "--scale", "0.01", "--lat-secs", "1", "--rate", "2000",
         "--no-install", "--skip-ceilings", "--work", str(tmp_path / "work"), "--out", str(out)],
        cwd=repo, capture_output=True, text=True, timeout=240,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(next(out.glob("suite-*.json")).read_text())
    runs = doc["runs"]
    assert [(r["workload"], r["round"]) for r in runs] == [
        ("produce", 1), ("consume", 1), ("produce", 2), ("consume", 2),
        ("latency", 1), ("latency", 2)]
    assert all("error" not in r for r in runs), runs
    for r in runs:
        if r["workload"] == "latency":
            assert r["msgs"] >= 1900 and r["p50_ms"] <= r["p99_ms"]
        else:
            assert r["msgs"] == 3000 and r["server_cpu_s"] >= 0
    md = next(out.glob("suite-*.md")).read_text()
    assert "| Yak (confluent-kafka) | 100 |" in md and "## Targets" in md
