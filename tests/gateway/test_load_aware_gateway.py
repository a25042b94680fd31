"""The issue's load-aware test (issue 23): a broker slowed on purpose (SIGSTOP for 2 s in a
loop) receives fewer keyless records from a gateway with `--partitioner load_aware`
within 10 s, while a gateway with the default partitioner, producing beside it under the
same pauses, keeps giving it its share.

Real parts: three `yak serve` brokers on etcd, two `yak gateway` processes, REST
producers over HTTP; the partitions' leaders are fixed (two per broker), so a record's
partition in the REST answer names the broker that took it."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import httpx
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 - fixtures
from tests.gateway.conftest import start_standalone

T = 30
LEADERS = {0: 1, 1: 2, 2: 3, 3: 1, 4: 2, 5: 3}
WINDOW_S = 10.0
CT = "application/vnd.kafka.binary.v2+json"


def produce_for(url: str, seconds: float, got: Counter[int], lock: threading.Lock) -> None:
    """POST 5 keyless records at a time until `seconds` pass; count them per leader."""
    body = {"records": [{"value": "eHl6"} for _ in range(5)]}
    deadline = time.monotonic() + seconds
    with httpx.Client(base_url=url, timeout=T) as http:
        while time.monotonic() < deadline:
            r = http.post("/topics/slow", json=body, headers={"Content-Type": CT})
            r.raise_for_status()
            placed = Counter(LEADERS[o["partition"]] for o in r.json()["offsets"]
                             if o.get("error_code") is None)
            with lock:
                got.update(placed)


@pytest.mark.slow
def test_a_paused_broker_gets_fewer_keyless_records(cluster_factory, tmp_path) -> None:  # noqa: F811
    # Kafka's default session (9 s), so a 2 s pause never costs broker 3 its session.
    c = cluster_factory(3, broker_session_timeout_ms="9000",
                        broker_heartbeat_interval_ms="2000")
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})
    admin.create_topics([NewTopic("slow", 6, replica_assignment=[[LEADERS[p]] for p in
                                                                 range(6)])])["slow"].result(T)
    boot = f"{c[1].bootstrap},{c[2].bootstrap}"
    aware = start_standalone(tmp_path / "aware", boot, "--partitioner", "load_aware")
    plain = start_standalone(tmp_path / "plain", boot)
    try:
        # Warm up both (metadata, connections to every leader) before the pauses.
        for gw in (aware, plain):
            produce_for(gw.url, 1.0, Counter(), threading.Lock())
        got = {"aware": Counter(), "plain": Counter()}
        lock = threading.Lock()
        threads = [threading.Thread(target=produce_for, args=(gw.url, WINDOW_S, got[name], lock))
                   for name, gw in (("aware", aware), ("plain", plain)) for _ in range(4)]
        for t in threads:
            t.start()
        pid = c[3].pid
        deadline = time.monotonic() + WINDOW_S
        try:
            while time.monotonic() < deadline:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(2.0)  # the pause
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.5)  # it runs briefly between pauses
        finally:
            os.kill(pid, signal.SIGCONT)
        for t in threads:
            t.join(T + WINDOW_S)
    finally:
        aware.stop()
        plain.stop()
    a, p = got["aware"], got["plain"]
    assert sum(a.values()) > 100 and sum(p.values()) > 30, got
    share_aware = a[3] / sum(a.values())
    share_plain = p[3] / sum(p.values())
    print(f"records per broker in {WINDOW_S:.0f} s: load_aware {dict(a)} (broker 3:"
          f" {share_aware:.0%}), default {dict(p)} (broker 3: {share_plain:.0%})")
    # Default: broker 3 keeps about its third (each paused request still lands there).
    assert share_plain > 0.2, got
    # Load-aware: well under its third, and under half of what the default gives it.
    assert share_aware < 0.15 and share_aware < share_plain / 2, got
