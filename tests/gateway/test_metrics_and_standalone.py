"""/metrics contents, `yak gateway` standalone, idle consumer expiry, a dead broker."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer

from .conftest import start_standalone


def sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_metrics_cover_requests_topics_partitions_and_lag(gateway: Any, http: httpx.Client) -> None:
    http.post("/api/topics", json={"name": "met-t", "partitions": 2})
    p = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 5})
    for i in range(100):
        p.produce("met-t", value=b"x" * 100, key=str(i).encode())
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "met-g",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["met-t"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 60 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)  # commits 60-ish of 100: lag stays > 0
    c.close()

    text = http.get("/metrics").text
    assert sample(text, "yak_broker_requests_total", api="produce") >= 1
    assert sample(text, "yak_broker_request_latency_seconds_count", api="fetch") >= 1
    assert sample(text, "yak_broker_topic_messages_in_total", topic="met-t") == 100
    assert sample(text, "yak_broker_topic_bytes_in_total", topic="met-t") > 100 * 100
    assert sample(text, "yak_broker_topic_messages_out_total", topic="met-t") >= got
    assert sample(text, "yak_broker_topic_bytes_out_total", topic="met-t") > 0
    assert sample(text, "yak_broker_connections") >= 1
    assert sample(text, "yak_cluster_up") == 1
    sizes = [sample(text, "yak_partition_size_bytes", topic="met-t", partition=str(i))
             for i in (0, 1)]
    assert all(s is not None and s > 0 for s in sizes), sizes
    hws = [sample(text, "yak_partition_high_watermark", topic="met-t", partition=str(i))
           for i in (0, 1)]
    assert sum(hws) == 100
    lag = sample(text, "yak_consumer_group_lag_sum", group="met-g")
    assert lag == 100 - got
    assert re.search(r'yak_gateway_http_requests_total\{method="POST",route="/api/topics"', text)


@pytest.mark.slow
def test_standalone_gateway_expiry_and_dead_broker(broker_factory: Any, tmp_path: Path) -> None:
    broker = broker_factory()
    gw = start_standalone(tmp_path / "gw", broker.bootstrap, "--consumer-timeout", "1",
                          "--request-timeout", "3")
    try:
        with httpx.Client(base_url=gw.url, timeout=30) as http:
            assert http.post("/api/topics", json={"name": "sa-t"}).status_code == 201
            r = http.post("/topics/sa-t", json={"records": [{"value": {"a": 1}}]})
            assert r.status_code == 200 and r.json()["offsets"][0]["offset"] == 0
            msgs = http.get("/api/topics/sa-t/messages", params={"offset": 0}).json()
            assert [m["offset"] for m in msgs["messages"]] == [0]

            # An idle REST consumer instance expires.
            r = http.post("/consumers/sa-g", json={"name": "idle", "format": "json"})
            assert r.status_code == 200
            base = "/consumers/sa-g/instances/idle"
            assert http.get(f"{base}/assignments").status_code == 200
            deadline = time.monotonic() + 15
            while http.get(f"{base}/assignments").status_code == 200:
                assert time.monotonic() < deadline, "idle instance never expired"
                time.sleep(1.5)  # each GET touches the instance: wait past the timeout
            assert http.get(f"{base}/assignments").json()["error_code"] == 40403

            # The broker dies: errors say so, quickly, and the gateway stays up.
            broker.kill()
            t0 = time.monotonic()
            r = http.get("/api/health")
            assert r.status_code == 503 and r.json()["up"] is False
            r = http.get("/topics")
            assert r.status_code == 503 and r.json()["error_code"] == 50301
            assert "unreachable" in r.json()["message"]
            assert time.monotonic() - t0 < 15
            assert "yak_cluster_up 0.0" in http.get("/metrics").text
            # ...and it recovers when the broker is back.
            broker.start()
            deadline = time.monotonic() + 30
            while http.get("/api/health").status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.5)  # back-off of this wait-for-health loop
            assert "sa-t" in http.get("/topics").json()
    finally:
        gw.stop()
