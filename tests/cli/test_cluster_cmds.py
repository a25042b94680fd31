"""`yak cluster info|health|logdirs` against real brokers: one `yak serve`, and three on etcd
with one of them killed (health then says so, and exits 1)."""

from __future__ import annotations

import json
import time

import pytest

from tests.cli.test_cli import ok, one_line_error, yak
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 - fixtures
from tests.conftest import free_port


@pytest.mark.slow
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
        time.sleep(0.5)  # back-off: until every follower has caught up
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
        time.sleep(0.5)  # back-off of this wait-for-report loop
    assert report["healthy"] is False
    assert report["brokers"] == [1, 2]
    assert {(r["topic"], r["partition"]) for r in report["under_replicated"]} <= {
        ("rep", 0), ("rep", 1), ("rep", 2)
    }
    r = yak("cluster", "health", "--bootstrap", alive)
    assert r.returncode == 1
    assert "Healthy: no" in r.stdout and "Brokers down: 3" in r.stdout


def _free_block(span: int = 20) -> int:
    """A base port with `span` free ports after it (each checked by binding it)."""
    import random
    import socket

    for _ in range(200):
        base = random.randrange(20000, 60000 - span)
        socks = []
        try:
            for p in range(base, base + span):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no block of free ports")


@pytest.mark.slow
def test_start_broker_restarts_one_stopped_broker(tmp_path) -> None:
    from yak.devcluster.local import LocalCluster

    d = str(tmp_path / "yc")
    base = _free_block()
    boot = f"127.0.0.1:{base},127.0.0.1:{base + 1}"
    up = yak("cluster", "up", "-n", "2", "--dir", d, "--base-port", str(base), timeout=150)
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        r = yak("cluster", "start-broker", "2", "--dir", d)
        one_line_error(r, "broker-2 is already running")
        assert r.returncode == 1
        r = yak("cluster", "start-broker", "7", "--dir", d)
        one_line_error(r, "no broker 7", "its brokers: 1, 2")
        assert r.returncode == 2

        old_pid = LocalCluster.load(tmp_path / "yc").process("broker-2").pid
        LocalCluster.load(tmp_path / "yc").process("broker-2").kill()
        status = ok("cluster", "status", "--dir", d)
        line = next(ln for ln in status.splitlines() if ln.startswith("broker-2 "))
        assert f"broker-2   127.0.0.1:{base + 1}" in line
        assert "stopped" in line  # (a running broker's line is followed by its load line)
        r = yak("cluster", "up", "-n", "2", "--dir", d, "--base-port", str(base))
        one_line_error(r, "already running", "yak cluster start-broker N")

        out = ok("cluster", "start-broker", "2", "--dir", d, timeout=150)
        assert f"started broker-2 on 127.0.0.1:{base + 1}" in out
        new_pid = LocalCluster.load(tmp_path / "yc").process("broker-2").pid
        assert new_pid != old_pid
        assert f"running (pid {new_pid})" in ok("cluster", "status", "--dir", d)
        info = json.loads(ok("cluster", "info", "--format", "json", "--bootstrap", boot))
        assert [(x["id"], x["port"]) for x in info["brokers"]] == [(1, base), (2, base + 1)]
        deadline = time.monotonic() + 30
        while (got := _health(boot))[0] != 0 and time.monotonic() < deadline:
            time.sleep(0.5)  # back-off of this wait-for-health loop
        assert got[0] == 0 and got[1]["brokers"] == [1, 2], got

        ok("cluster", "stop", "--dir", d)
        r = yak("cluster", "start-broker", "1", "--dir", d)
        one_line_error(r, "etcd", "is not running", "yak cluster up")
        assert r.returncode == 1
    finally:
        yak("cluster", "stop", "--dir", d, timeout=120)
    r = yak("cluster", "start-broker", "1", "--dir", str(tmp_path / "none"))
    one_line_error(r, "no local cluster")
    assert r.returncode == 2
