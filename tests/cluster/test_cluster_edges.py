"""The edges against a cluster, given its bootstrap list: the standalone gateway (REST
produce and a REST consumer group, through a leader's death) and the `yak` CLI (topic
create/describe, produce, consume, group describe)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.cluster.test_cluster_metadata import _metadata, _wait
from tests.conftest import REPO
from tests.gateway.conftest import start_standalone
from tests.gateway.test_rest import JSON_V2, new_consumer, poll_until


@pytest.mark.slow
def test_gateway_on_a_cluster_through_a_leader_death(cluster_factory, tmp_path: Path) -> None:
    c = cluster_factory(3)
    gw = start_standalone(tmp_path, c.bootstrap)
    try:
        http = httpx.Client(base_url=gw.url, timeout=30)
        r = http.post("/api/topics", json={"name": "gw", "partitions": 3,
                                           "replication_factor": 3})
        assert r.status_code == 201, r.text
        assert http.get("/brokers").json()["brokers"] == [1, 2, 3]
        parts = http.get("/topics/gw/partitions").json()
        assert all(len(p["replicas"]) == 3 and sum(x["leader"] for x in p["replicas"]) == 1
                   for p in parts)
        body = {"records": [{"value": {"n": i}} for i in range(30)]}
        r = http.post("/topics/gw", headers={"content-type": JSON_V2}, json=body)
        assert r.status_code == 200 and all(o["error_code"] is None
                                            for o in r.json()["offsets"]), r.text
        base = new_consumer(http, "gw-g")
        assert http.post(f"{base}/subscription", json={"topics": ["gw"]}).status_code == 204
        assert len(poll_until(http, base, 30)) == 30

        leader = _metadata(c[1].bootstrap, "gw")[2][0][1]
        c[leader].kill()
        _wait(lambda: _metadata(next(b for n, b in c.brokers.items() if n != leader)
                                .bootstrap, "gw")[2][0][1] not in (leader, -1), 20, "moved")
        body = {"records": [{"value": {"n": i}, "partition": 0} for i in range(30, 40)]}
        r = http.post("/topics/gw", headers={"content-type": JSON_V2}, json=body)
        assert r.status_code == 200 and all(o["error_code"] is None
                                            for o in r.json()["offsets"]), r.text
        later = poll_until(http, base, 10, deadline_s=40)
        assert sorted(x["value"]["n"] for x in later) == list(range(30, 40))
    finally:
        gw.stop()


def _yak(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from yak.cli.main import app; app()", *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


@pytest.mark.slow
def test_cli_on_a_cluster(cluster_factory) -> None:
    c = cluster_factory(3)
    b = ["-b", c.bootstrap]
    r = _yak("topic", "create", "cli", "-p", "3", "-r", "3", *b)
    assert r.returncode == 0, r.stderr
    r = _yak("topic", "describe", "cli", "--format", "json", *b)
    assert r.returncode == 0, r.stderr
    described = json.loads(r.stdout)
    parts = described["partitions"]
    assert len(parts) == 3
    assert all(sorted(p["replicas"]) == [1, 2, 3] and sorted(p["isr"]) == [1, 2, 3]
               for p in parts)
    assert sorted(p["leader"] for p in parts) == [1, 2, 3]
    produced = subprocess.run(
        [sys.executable, "-c", "from yak.cli.main import app; app()", "produce", "cli", *b],
        input="".join(f"line-{i}\n" for i in range(50)), capture_output=True, text=True,
        timeout=60, cwd=REPO)
    assert produced.returncode == 0, produced.stderr
    r = _yak("consume", "cli", "--from-beginning", "-n", "50", "-g", "cli-g",
             "--idle-timeout", "20", *b)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(f"line-{i}" for i in range(50))
    r = _yak("group", "describe", "cli-g", "--format", "json", *b)
    assert r.returncode == 0, r.stderr
    assert "cli" in r.stdout
