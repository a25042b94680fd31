"""The share-group chaos workload (issue 24) against a real 3-broker cluster (etcd, `yak
serve` subprocesses, confluent-kafka's ShareConsumer): a short run with kill and pause
faults, the share workload alone, must pass its checker (yak/chaos/checker_share.py) with
deliveries, redeliveries, confirmed acknowledgements of every type and a dead-letter topic
holding exactly the rejected and limit-reached values. Its report is kept in
test-artifacts/chaos-share/."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from yak.chaos.history import load_history
from yak.chaos.runner import ChaosConfig, run

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_share_workload_under_kills_and_pauses_passes(tmp_path: Path) -> None:
    out = REPO / "test-artifacts" / "chaos-share"
    shutil.rmtree(out, ignore_errors=True)
    summary = run(ChaosConfig(
        report_dir=out, cluster_dir=tmp_path / "cluster", duration_s=60, brokers=3,
        faults=["kill", "pause"], seed=24, interval=(5.0, 8.0), hold=(3.0, 6.0),
        workloads=("share",), title="share-group chaos run (issue 24)",
        command="tests/chaos/test_share_chaos.py"))
    explain = json.dumps({k: summary.get(k) for k in ("anomaly_counts", "errors",
                                                      "anomalies")}, default=str)[:4000]
    assert summary["valid"], explain
    assert summary["anomalies_found"] == 0 and summary["errors"] == [], explain
    c = summary["counts"]
    assert c["faults_injected"] >= 2, c
    assert c["share_sends_acked"] > 300, c
    assert c["share_deliveries"] >= c["share_sends_acked"], c
    assert c["share_redeliveries"] > 0 and c["share_max_delivery_count"] == 3, c
    for t in ("accept", "release", "reject"):
        assert c[f"share_acks_{t}_ok"] > 0, (t, c)
    assert c["share_drained"] == 1 and c["dlq_values"] > 0, c
    # the share topic's sends were also held to the final reads of its log
    assert c["acked_writes_checked"] == c["share_sends_acked"], c
    ops = load_history(out / "history.json")
    kinds = {op["op"] for op in ops}
    assert {"share_config", "share_poll", "share_ack", "share_drained",
            "share_dlq"} <= kinds, kinds
    assert "share:" in (out / "summary.md").read_text()
