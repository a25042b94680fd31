"""The suite's client CPU column: what sets the 100 B rate is the client, not the broker.

At 100 B one Python confluent-kafka process is the bottleneck for Yak and tansu alike
(msg/s ~ 1 / client CPU per message, run by run), so the report shows the client's CPU
per message next to the broker's, to tell a slower broker from a client that got less CPU.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "suite" / "report.py"
_spec = importlib.util.spec_from_file_location("yak_suite_report_cpu", _PATH)
assert _spec is not None and _spec.loader is not None
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def _run(broker: str, rnd: int, rate: float, client_cpu_s: float | None) -> dict:
    rec = {"broker": broker, "workload": "produce", "size": 100, "round": rnd, "msgs": 1_000_000,
           "msgs_per_s": rate, "MB_per_s": rate * 100 / 1e6, "server_us_per_msg": 0.2,
           "server_cpu_pct": 10.0, "other_cpu_pct": 5.0, "rss_mb": 60.0}
    if client_cpu_s is not None:
        rec["client_cpu_s"] = client_cpu_s
    return rec


RUNS = [
    _run("yak", 1, 500_000, 2.0),
    _run("yak", 2, 700_000, 1.4),
    _run("yak", 3, 650_000, 1.6),
    _run("tansu", 1, 600_000, 1.7),
    _run("tansu", 2, 610_000, None),  # a peer driver that did not report client CPU
]


def test_client_cpu_per_message_is_the_median_over_runs() -> None:
    agg = report.aggregate(RUNS)
    assert agg[("produce", "yak", 100)]["client_us_per_msg"] == 1.6
    # runs without the figure are left out, not counted as zero
    assert agg[("produce", "tansu", 100)]["client_us_per_msg"] == 1.7


def test_throughput_table_shows_the_client_column() -> None:
    lines = report.throughput_table(report.aggregate(RUNS), "produce", [100], ["yak", "tansu"])
    assert lines[0].endswith("| client CPU us/msg | runs |")
    assert lines[1].count("|---") == lines[0].count("|") - 1
    assert lines[2].endswith("| 1.60 | 3 |") and lines[3].endswith("| 1.70 | 2 |")
    missing = report.throughput_table(
        report.aggregate([_run("yak", 1, 1.0, None)]), "produce", [100], ["yak"])
    assert missing[2].endswith("| - | 1 |")
