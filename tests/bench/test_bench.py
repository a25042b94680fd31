"""`yak bench` against a real broker: the numbers it reports must be the ones that happened.

Counts are cross-checked with what an independent consumer (watermarks) sees afterwards,
and the broker's CPU must come from the broker's own pid, found by its listening port.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from yak.bench.meter import find_listener_pid
from yak.bench.runner import run
from yak.bench.spec import BenchSpec, Latency

REPO = Path(__file__).resolve().parents[2]
YakBroker = Any  # tests/conftest.py's broker fixture (a real broker subprocess)


def _log_size(bootstrap: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check"})
    try:
        total = 0
        for p in range(partitions):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
        return total
    finally:
        c.close()


def test_latency_percentiles_nearest_rank() -> None:
    lat = Latency.from_ns([ms * 1_000_000 for ms in range(100, 0, -1)])
    assert lat is not None
    assert (lat.count, lat.p50, lat.p95, lat.p99, lat.p999, lat.max) == (100, 50, 95, 99, 100, 100)
    assert lat.mean == 50.5
    assert Latency.from_ns([]) is None


@pytest.mark.parametrize(
    ("mode", "changes", "message"),
    [
        ("e2e", {"rate": 0}, "target rate"),
        ("e2e", {"message_size": 4}, ">= 8"),
        ("produce", {"acks": "2"}, "acks"),
        ("produce", {"count": 0, "duration_s": 0}, "count or a duration"),
        ("produce", {"compression": "brotli"}, "compression"),
    ],
)
def test_spec_rejects_what_cannot_be_measured(mode: str, changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BenchSpec(**changes).validate(mode)


def test_produce_then_consume_counts_match_the_log(broker: YakBroker) -> None:
    spec = BenchSpec(bootstrap=broker.bootstrap, topic="tput", message_size=200, count=30_000,
                     partitions=3, producers=2, timeout_s=60,
                     topic_config={"retention.ms": "3600000"})
    seen: list[int] = []
    res = run("produce", spec, progress=lambda done, total: seen.append(done))
    assert res.errors == 0 and res.notes == []
    assert res.messages == 30_000 and res.bytes == 30_000 * 200
    assert _log_size(broker.bootstrap, "tput", 3) == 30_000  # what the broker really holds
    assert res.msgs_per_s == pytest.approx(30_000 / res.seconds, rel=1e-3)
    assert res.latency_ms is not None and res.latency_ms.count == 30_000
    assert res.broker is not None and res.broker.pid == broker.pid
    assert res.broker.cpu_s > 0 and res.broker.cpu_us_per_msg == pytest.approx(
        1e6 * res.broker.cpu_s / 30_000, rel=0.01)
    assert res.client_cpu_s > 0 and res.broker.rss_mb_end > 10
    assert seen and max(seen) <= 30_000
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (fut,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "tput")]).values()
    assert fut.result(10)["retention.ms"].value == "3600000"  # the topic the run created

    read = run("consume", BenchSpec(bootstrap=broker.bootstrap, topic="tput", message_size=200,
                                    count=0, consumers=2, timeout_s=60))
    assert read.messages == 30_000 and read.errors == 0 and read.notes == []
    assert read.spec.partitions == 3  # taken from the topic, not the default
    # serving 6 MB may cost the broker less than one 10 ms clock tick: only the pid is certain
    assert read.broker is not None and read.broker.pid == broker.pid

    part = run("consume", BenchSpec(bootstrap=broker.bootstrap, topic="tput", count=1_000,
                                    timeout_s=60))
    assert part.messages == 1_000


def test_e2e_latency_is_measured_per_message(broker: YakBroker) -> None:
    spec = BenchSpec(bootstrap=broker.bootstrap, topic="lat", message_size=64, count=3_000,
                     rate=2_000, linger_ms=0, partitions=2, consumers=2, timeout_s=60)
    res = run("e2e", spec)
    assert res.errors == 0
    assert res.messages == 3_000 == _log_size(broker.bootstrap, "lat", 2)
    lat = res.latency_ms
    assert lat is not None and lat.count == 3_000
    assert 0 < lat.p50 <= lat.p95 <= lat.p99 <= lat.p999 <= lat.max < 10_000
    # paced at 2k msg/s: 3k messages take ~1.5 s, not a burst
    assert 1.2 < res.seconds < 10 and res.msgs_per_s < 2_600
    assert res.broker is not None and res.broker.pid == broker.pid


def test_consume_of_missing_topic_is_an_error(broker: YakBroker) -> None:
    from yak.bench.runner import BenchError

    with pytest.raises(BenchError, match="does not exist"):
        run("consume", BenchSpec(bootstrap=broker.bootstrap, topic="nope", count=0))


def test_listener_pid_is_the_broker(broker: YakBroker) -> None:
    assert find_listener_pid(broker.port) == broker.pid


def _yak(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from yak.cli.main import app; app()", "bench", *args],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )


def test_cli_json_round_trip(broker: YakBroker, tmp_path) -> None:
    out = tmp_path / "p.json"
    p = _yak("produce", "-b", broker.bootstrap, "-t", "cli", "-n", "5000", "-s", "50",
             "--acks", "1", "--compression", "lz4", "--json", "-o", str(out))
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert json.loads(out.read_text()) == res
    assert res["messages"] == 5000 and res["spec"]["compression"] == "lz4"
    assert res["broker"]["pid"] == broker.pid
    c = _yak("consume", "-b", broker.bootstrap, "-t", "cli", "-s", "50", "--json")
    assert c.returncode == 0, c.stderr
    assert json.loads(c.stdout)["messages"] == 5000 == _log_size(broker.bootstrap, "cli", 1)
    table = _yak("consume", "-b", broker.bootstrap, "-t", "cli", "-n", "10")
    assert table.returncode == 0 and "msg/s" in table.stdout and "broker CPU" in table.stdout


def test_cli_usage_errors_are_one_line() -> None:
    p = _yak("e2e", "--rate", "0", "-b", "127.0.0.1:1")
    assert p.returncode == 2 and p.stderr.startswith("yak: error:") and "rate" in p.stderr
    assert "Traceback" not in p.stderr
