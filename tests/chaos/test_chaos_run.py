"""`yak chaos` against real 3-broker clusters (etcd, `yak serve` subprocesses, librdkafka
clients), the CI runs of issue 16:

- a short run (fixed seed, kill and pause faults, leader-targeted variants included, every
  workload) must find zero anomalies; its report is kept in test-artifacts/chaos-ci/;
- the self-check: the same tool against a cluster with unclean.leader.election.enable=true
  and a schedule that elects an out-of-sync replica must report lost acknowledged writes
  (report kept in test-artifacts/chaos-self-check/). A checker that passed this run
  could not be trusted with the first one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from yak.chaos.history import load_history
from yak.chaos.runner import ChaosConfig, run
from yak.chaos.verdicts import attribute_run

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"

# The follower that will be elected (broker 3) is paused past its session and out of the
# ISR; the two in-sync replicas are killed while it is still paused, so when it resumes it
# is the only live replica; 30 s later the others come back and follow it, truncating
# every write acknowledged while broker 3 was away.
UNCLEAN_SCHEDULE = [
    {"at": 6, "fault": "pause", "target": "broker3", "hold": 22},
    {"at": 16, "fault": "kill", "target": "broker1", "hold": 26},
    {"at": 16, "fault": "kill", "target": "broker2", "hold": 26},
]


def _explain(summary: dict) -> str:
    return json.dumps({k: summary.get(k) for k in ("anomaly_counts", "errors", "anomalies")},
                      indent=1, default=str)[:4000]


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_ci_run_under_kills_and_pauses_finds_no_anomaly(tmp_path: Path) -> None:
    out = ARTIFACTS / "chaos-ci"
    shutil.rmtree(out, ignore_errors=True)
    summary = run(ChaosConfig(
        report_dir=out, cluster_dir=tmp_path / "cluster", duration_s=100, brokers=3,
        faults=["kill", "kill-leader", "pause", "pause-leader"], seed=16,
        interval=(5.0, 9.0), hold=(3.0, 6.0), title="CI chaos run (issue 16)",
        command="tests/chaos/test_chaos_run.py"))
    assert summary["anomalies_found"] == 0, _explain(summary)
    assert summary["errors"] == [], _explain(summary)
    assert summary["valid"]
    counts = summary["counts"]
    assert counts["faults_injected"] >= 5, counts
    assert {k.split("-")[0] for k in counts["faults_by_kind"]} == {"kill", "pause"}, counts
    assert counts["acked_writes_checked"] >= 3000, counts
    assert counts["txns_committed"] > 0 and summary["pipeline"]["commits"] > 0, counts
    # every partition of the three topics compared on its three replicas after healing
    assert summary["replicas"]["identical"] == summary["replicas"]["partitions"] == 12
    assert summary["replicas"]["replicas"] == 36, summary["replicas"]
    for name in ("history.json", "summary.json", "summary.md", "timeline.png",
                 "timeline.html"):
        assert (out / name).is_file(), name
    # Every liveness fence attributed (yak/chaos/verdicts.py): the kills and pauses fence
    # their victims, each such fence is explained by its fault; the estimate of time 0 from
    # the restarts (how older runs are read) agrees with the time the run recorded.
    v = summary["verdicts"]
    assert "error" not in v and v["t0_wall_source"] == "recorded by the run", v
    assert sum(v["expected"].values()) >= 1, v
    assert "## Liveness fences" in (out / "summary.md").read_text()
    estimated = attribute_run(tmp_path / "cluster", load_history(out / "history.json"))
    assert abs(estimated["t0_wall"] - v["t0_wall"]) < 0.25, (estimated["t0_wall_source"], v)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_self_check_unclean_election_loses_acked_writes(tmp_path: Path) -> None:
    out = ARTIFACTS / "chaos-self-check"
    shutil.rmtree(out, ignore_errors=True)
    summary = run(ChaosConfig(
        report_dir=out, cluster_dir=tmp_path / "cluster", duration_s=55, brokers=3,
        faults=[], schedule=UNCLEAN_SCHEDULE, workloads=("queue",),
        broker_settings={"unclean.leader.election.enable": "true",
                         "replica.lag.time.max.ms": "3000"},
        title="self-check: unclean leader election", command="tests/chaos/test_chaos_run.py"))
    assert summary["counts"]["faults_injected"] == 3, _explain(summary)
    assert not summary["valid"]
    lost = summary["anomaly_counts"].get("lost_write", 0)
    assert lost >= 50, _explain(summary)
    example = next(a for a in summary["anomalies"] if a["kind"] == "lost_write")
    assert example["partition"].startswith("chaos-queue-") and example["offsets"]
    assert "is not in the final reads" in example["detail"]
