"""The randomized transactional workload (yak/chaos/workloads.py) for a minute: several
transactional producers, each SIGKILLed now and then mid-transaction and restarted with
the same transactional id, and read_committed consumers; the history checker must find no
aborted read (G1a), no lost committed write, no duplicate and no offset-order violation.
G0 (write cycles between concurrent transactions) is allowed: Kafka does not order
transactions across partitions."""

from __future__ import annotations

import json

import pytest

from yak.chaos.workloads import TxnWorkload, WorkloadConfig


@pytest.mark.slow
def test_transactions_under_producer_kills(broker, tmp_path) -> None:
    report = TxnWorkload(WorkloadConfig(
        broker.bootstrap, topic="chaos", partitions=4, producers=3, consumers=2,
        seconds=60, kill_every_s=3.0, seed=12, work_dir=str(tmp_path / "chaos"),
    )).run()
    result = report.result
    (tmp_path / "verdict.json").write_text(json.dumps(result.to_dict(), indent=1))
    failures = result.failures(allowed={"G0"})
    assert failures == [], [a.detail for a in failures[:10]]
    # the run really exercised what it claims
    assert report.kills >= 10
    assert result.stats["txns_committed"] > 200
    assert result.stats["txns_aborted"] > 50
    assert result.stats["distinct_values_read"] >= result.stats["sends_acked"] * 0.5
    assert result.stats["records_read"] > 0
