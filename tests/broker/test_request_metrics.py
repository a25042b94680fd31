"""The per-request count and latency (yak/broker/metrics.py, issue 28: plain accumulators
read at scrape time instead of a Prometheus Counter and Histogram updated per request)
export what prometheus_client's Counter and Histogram of the same names, labels and
buckets export for the same requests: every bucket, the count and the sum."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from yak.broker.metrics import _LATENCY_BUCKETS, BrokerMetrics

# Latencies well inside buckets (the measured one is a little longer than asked for).
_SECONDS = [0.00002, 0.0003, 0.0003, 0.004, 0.07, 0.7, 3.0, 45.0]


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("yak_broker_request") and "_created" not in line:
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def test_requests_and_latency_export_like_prometheus_client() -> None:
    ours = BrokerMetrics()
    ref = CollectorRegistry()
    count = Counter("yak_broker_requests", "Kafka requests handled, by API name.", ["api"],
                    registry=ref)
    latency = Histogram("yak_broker_request_latency_seconds", "x", ["api"],
                        buckets=_LATENCY_BUCKETS, registry=ref)
    sums: dict[str, float] = {}
    for api_key, name in ((0, "produce"), (1, "fetch"), (18, "api_versions")):
        for s in _SECONDS[: 3 + api_key % 5]:
            ours.record_request(api_key, time.perf_counter() - s)
            count.labels(name).inc()
            latency.labels(name).observe(s)
            sums[name] = sums.get(name, 0.0) + s
    mine = _samples(generate_latest(ours.registry).decode())
    theirs = _samples(generate_latest(ref).decode())
    assert mine.keys() == theirs.keys()
    for key, value in theirs.items():
        if "_sum" in key:
            assert mine[key] == pytest.approx(value, abs=0.01)
        else:
            assert mine[key] == value, key
    assert ours.registry.get_sample_value(
        "yak_broker_request_latency_seconds_count", {"api": "fetch"}) == 4


def test_nothing_exported_before_a_request() -> None:
    text = generate_latest(BrokerMetrics().registry).decode()
    assert "yak_broker_requests_total{" not in text
    assert "# TYPE yak_broker_request_latency_seconds histogram" in text
