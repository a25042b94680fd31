"""The suite's report: medians over rounds, Yak/peer ratios and target verdicts.

Built from synthetic runs so the arithmetic is checked exactly; the suite itself is run
by hand (it installs system packages and takes minutes), see docs/benchmarks/README.md.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

# `bench/` is a top-level folder, not an installed package, and `bench` here would be this
# test package: load the report module from its file.
_PATH = Path(__file__).resolve().parents[2] / "bench" / "suite" / "report.py"
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
    meta = {"date": "d", "command": "python -m bench.suite", "cpu": "c", "cores": 2,
            "memory_gib": 1, "kernel": "k", "python": "3", "work_dir_fs": "ext4", "rounds": 3,
            "versions": {"x": "1"}, "durability": {"yak": "page cache"}, "problems": ["p"]}
    paths = report.write(RUNS, [{"ceiling": "disk", "MB_per_s": 500.0}], meta, tmp_path)
    md = paths[0].read_text()
    assert "| Yak (confluent-kafka) | 100 | 400,000 | 300,000-500,000 |" in md
    assert "| tansu (confluent-kafka) | 100 | 250,000 | 200,000-900,000 | 25.0 | 1.60 |" in md
    assert "yak produce 1024 B round 1: boom" in md and "- p" in md
    assert json.loads(paths[1].read_text())["runs"] == RUNS
    pngs = [p for p in paths if p.suffix == ".png"]
    assert len(pngs) == 2 and all(p.stat().st_size > 10_000 for p in pngs)
