"""The local-cluster harness (what `yak cluster up` builds on): etcd within the port plan,
state recorded for a later invocation, fault hooks, stop and purge, and the one-line error
when etcd is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from yak.devcluster.local import (
    ClusterStateError,
    EtcdNotInstalledError,
    LocalCluster,
    PortPlan,
    find_etcd,
    free_ports,
)

from .conftest import run


def _base_port() -> int:
    """A base port whose whole 20-port span is free right now."""
    for _ in range(50):
        (p,) = free_ports(1)
        base = p - p % 20
        if base >= 1024 and base + 20 < 65535:
            try:
                PortPlan(base)
            except ClusterStateError:
                continue
            from yak.devcluster.local import _port_free
            if all(_port_free(base + i) for i in range(20)):
                return base
    pytest.skip("no free 20-port span")


def test_port_plan_stays_within_20_ports() -> None:
    plan = PortPlan(9092, brokers=5, etcd_members=3)
    ports = plan.all_ports() + plan.spare
    assert len(set(ports)) == len(ports)
    assert min(ports) == 9092 and max(ports) <= 9092 + 19
    assert PortPlan(9092, 3).kafka == [9092, 9093, 9094]
    for bad in (dict(brokers=6), dict(brokers=0), dict(etcd_members=2)):
        with pytest.raises(ClusterStateError) as e:
            PortPlan(9092, **bad)  # type: ignore[arg-type]
        assert "\n" not in str(e.value)
    with pytest.raises(ClusterStateError):
        PortPlan(65530)


def test_missing_etcd_is_one_line_naming_the_package(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no etcd on PATH
    monkeypatch.setenv("YAK_ETCD", "")
    import yak.devcluster.local as local
    monkeypatch.setattr(local.os, "access", lambda p, m: False)  # nor /usr/bin/etcd
    with pytest.raises(EtcdNotInstalledError) as e:
        find_etcd()
    assert "\n" not in str(e.value) and "etcd-server" in str(e.value)


def test_etcd_is_found_here() -> None:
    assert os.access(find_etcd(), os.X_OK)


def test_cluster_etcd_up_status_faults_stop_purge(tmp_path: Path) -> None:
    base = _base_port()
    d = tmp_path / "yak-cluster"
    cluster = LocalCluster(d, PortPlan(base, brokers=3, etcd_members=3))
    try:
        etcd = cluster.start_etcd()
        assert all(base <= p < base + 20 for m in etcd.members for p in m.ports)
        assert etcd.url("ns") == ("etcd://" + ",".join(f"127.0.0.1:{base + 10 + i}"
                                                       for i in range(3)) + "/ns")

        # another invocation (as `yak cluster status` would be) finds the processes
        again = LocalCluster.load(d)
        assert [(n, alive) for n, _pid, alive, _ports in again.status()] == [
            ("etcd1", True), ("etcd2", True), ("etcd3", True)]
        with pytest.raises(ClusterStateError, match="already running"):
            LocalCluster(d, PortPlan(base, brokers=3, etcd_members=3)).start_etcd()

        async def put_get(value: str) -> bytes:
            from yak.cluster.etcd import EtcdClient
            # the leader first: a paused member's writes would be of unknown outcome (as
            # test_etcd_client's three-member test shows)
            first = f"127.0.0.1:{etcd.leader().ports[0]}"
            eps = [first] + [e for e in etcd.endpoints if e != first]
            async with EtcdClient(eps, timeout=3) as c:
                await c.put("/k", value)
                return (await c.get("/k")).value  # type: ignore[union-attr]

        assert run(put_get("1")) == b"1"
        # fault hooks: pause a follower (a paused minority does not stop the cluster), kill -9
        # another, restart it on its data
        leader = etcd.leader().name
        m2, m3 = (again.process(n) for n in ("etcd1", "etcd2", "etcd3") if n != leader)
        m2.pause()
        assert run(put_get("2")) == b"2"
        m2.resume()
        m3.kill()
        assert not m3.is_alive()
        assert run(put_get("3")) == b"3"
        etcd.restart_member(m3.name)
        assert run(put_get("4")) == b"4"

        # stop from another invocation: every process ends
        LocalCluster.load(d).stop(timeout=10)
        assert not any(alive for _n, _p, alive, _ports in LocalCluster.load(d).status())
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{base + 10}/health", timeout=0.5)
        LocalCluster.load(d).purge()
        assert not d.exists()
        with pytest.raises(ClusterStateError, match="no local cluster"):
            LocalCluster.load(d)
    finally:
        if d.exists():
            LocalCluster.load(d).stop(timeout=5)
        cluster.stop(timeout=5)  # reaps the children this process started


def test_processes_outlive_the_command_that_started_them(tmp_path: Path) -> None:
    """`yak cluster up` returns while etcd keeps running (its own session)."""
    base = _base_port()
    d = tmp_path / "c"
    script = ("import sys; from pathlib import Path; from yak.devcluster.local import *;"
              "c = LocalCluster(Path(sys.argv[1]), PortPlan(int(sys.argv[2])));"
              "c.start_etcd(); print(c.etcd.url())")
    out = subprocess.run([sys.executable, "-c", script, str(d), str(base)], capture_output=True,
                         text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    try:
        cluster = LocalCluster.load(d)
        assert [alive for _n, _p, alive, _ports in cluster.status()] == [True]
        r = httpx.get(f"http://127.0.0.1:{base + 10}/health", timeout=2).json()
        assert r["health"] == "true"
    finally:
        LocalCluster.load(d).stop(timeout=10)
    assert not LocalCluster.load(d).process("etcd1").is_alive()
