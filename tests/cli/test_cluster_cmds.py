"""`yak cluster info|health|logdirs` against real brokers: one `yak serve`, and three on etcd
with one of them killed (health then says so, and exits 1)."""

from __future__ import annotations

import json
import time

from tests.cli.test_cli import ok, one_line_error, yak
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 - fixtures
from tests.conftest import free_port


def test_info_health_logdirs_on_one_broker(broker_factory) -> None:
    broker = broker_factory(**{"broker.rack": "rack-a"})
    b = ["--bootstrap", broker.bootstrap]
    ok("topic", "create", "sized", "-p", "2", *b)
    ok("produce", "sized", "-p", "0", *b, stdin="one\ntwo\nthree\n")
    host, port = broker.bootstrap.rsplit(":", 1)

    info = json.loads(ok("cluster", "info", "--format", "json", *b))
    assert info["cluster_id"]
    assert info["controller"] == 1
    (only,) = info["brokers"]
    assert (only["id"], only["host"], only["port"], only["rack"]) == (1, host, int(port), "rack-a")
    assert only["controller"] is True
    av = only["api_versions"]
    assert av["apis"] > 20
    assert av["produce"][0] <= 9 <= av["produce"][1]
    assert av["fetch"][1] >= 12
    text = ok("cluster", "info", *b)
    assert f"Cluster id: {info['cluster_id']}" in text
    assert "Controller: 1" in text
    assert f"1*       {broker.bootstrap}" in text and "rack-a" in text
    assert f"Produce v{av['produce'][0]}-{av['produce'][1]}" in text

    r = yak("cluster", "health", "--format", "json", *b)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "healthy": True,
        "controller": 1,
        "brokers": [1],
        "brokers_down": [],
        "under_replicated": [],
        "leaderless": [],
        "offline": [],
    }
    text = ok("cluster", "health", *b)
    assert "Healthy: yes" in text and "Under-replicated partitions (0): none" in text

    got = json.loads(ok("cluster", "logdirs", "--topic", "sized", "--format", "json", *b))
    (row,) = got["brokers"]
    assert row["broker"] == 1
    (d,) = row["log_dirs"]
    assert d["total_bytes"] >= d["usable_bytes"] > 0
    sizes = {(p["topic"], p["partition"]): p["size"] for p in d["partitions"]}
    assert set(sizes) == {("sized", 0), ("sized", 1)}
    assert sizes[("sized", 0)] > 0 and sizes[("sized", 1)] == 0
    text = ok("cluster", "logdirs", *b)
    assert "sized-0" in text and "sized-1" in text and "TOPIC-PARTITION" in text

    for cmd in ("info", "health", "logdirs"):
        r = yak("cluster", cmd, "--format", "yaml", *b)
        one_line_error(r, "--format")
        assert r.returncode == 2
        r = yak("cluster", cmd, "--bootstrap", f"127.0.0.1:{free_port()}", "--timeout", "2")
        one_line_error(r, "cannot reach broker")
        assert r.returncode == 1


def _health(bootstrap: str) -> tuple[int, dict]:
    r = yak("cluster", "health", "--format", "json", "--bootstrap", bootstrap, "--timeout", "5")
    return r.returncode, json.loads(r.stdout)


def test_health_of_three_brokers_with_one_killed(cluster_factory) -> None:  # noqa: F811
    c = cluster_factory(3)
    b = ["--bootstrap", c.bootstrap]
    ok("topic", "create", "rep", "-p", "3", "-r", "3", *b)
    deadline = time.monotonic() + 30
    while (got := _health(c.bootstrap))[0] != 0 and time.monotonic() < deadline:
        time.sleep(0.5)  # until every follower has caught up
    assert got[0] == 0, got
    assert got[1]["brokers"] == [1, 2, 3]

    info = json.loads(ok("cluster", "info", "--format", "json", *b))
    assert [x["id"] for x in info["brokers"]] == [1, 2, 3]
    assert sum(x["controller"] for x in info["brokers"]) == 1
    logdirs = json.loads(ok("cluster", "logdirs", "-t", "rep", "--format", "json", *b))
    for row in logdirs["brokers"]:  # three replicas: every broker holds every partition
        parts = [(p["topic"], p["partition"]) for d in row["log_dirs"] for p in d["partitions"]]
        assert sorted(parts) == [("rep", 0), ("rep", 1), ("rep", 2)]

    c[3].kill()
    alive = ",".join(c[n].bootstrap for n in (1, 2))
    deadline = time.monotonic() + 40
    while True:
        rc, report = _health(alive)
        if rc == 1 and report["under_replicated"] and report["brokers_down"] == [3]:
            break
        assert time.monotonic() < deadline, report
        time.sleep(0.5)
    assert report["healthy"] is False
    assert report["brokers"] == [1, 2]
    assert {(r["topic"], r["partition"]) for r in report["under_replicated"]} <= {
        ("rep", 0), ("rep", 1), ("rep", 2)
    }
    r = yak("cluster", "health", "--bootstrap", alive)
    assert r.returncode == 1
    assert "Healthy: no" in r.stdout and "Brokers down: 3" in r.stdout
