"""`yak cluster up|status|stop|purge`: a local Yak cluster in the background, in one directory.

Modelled on Redpanda's `rpk container start|status|stop|purge`: `up` starts an etcd (one
member, or three) and N brokers (`yak serve --metadata etcd://...`, node ids 1..N) as
background processes whose state lives in `--dir` (data, logs, `cluster.json` with every
pid), and returns once every broker has registered and sees the others, printing the
bootstrap servers and the console URL. Every port it opens is within `--base-port` ..
+19 (`yak/cluster/local.py`'s PortPlan): brokers' Kafka listeners from the base port,
their HTTP (REST, console, /metrics) ports from +5, etcd from +10. `status` lists each
process, each broker's address and the controller; `stop` ends every process `up`
started (brokers first, with a controlled shutdown); `purge` also deletes the directory.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from yak.cli.common import fail

if TYPE_CHECKING:
    from yak.devcluster.local import LocalCluster, PortPlan

# The cluster harness (and httpx) are imported by the commands that use them: every other
# `yak` command starts without paying for them.

app = typer.Typer(help="A local Yak cluster (etcd and N brokers) in the background.",
                  no_args_is_help=True)

READY = "Yak broker ready on"
UP_TIMEOUT_S = 80.0  # within the 90 s the issue allows, on a loaded 2-core machine

Dir = Annotated[str, typer.Option("--dir", help="Directory holding the cluster's data, logs"
                                  " and state.")]


@app.command("up")
def up(
    brokers: Annotated[int, typer.Option("-n", "--brokers", help="Number of brokers (1-5).")] = 3,
    directory: Dir = "./yak-cluster",
    base_port: Annotated[int, typer.Option(
        "--base-port", help="First port; every port used is within it .. +19.")] = 9092,
    etcd_members: Annotated[int, typer.Option("--etcd-members", help="1 or 3.")] = 1,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Broker setting KEY=VALUE for every broker; repeatable.")] = None,
) -> None:
    """Start etcd and N brokers in the background; print the bootstrap servers."""
    from yak.devcluster.local import (
        ClusterStateError,
        EtcdNotInstalledError,
        LocalCluster,
        ManagedProcess,
        PortPlan,
    )

    try:
        plan = PortPlan(base_port, brokers, etcd_members)
    except ClusterStateError as e:
        fail(str(e), 2)
    cluster = LocalCluster(Path(directory), plan)
    try:
        etcd = cluster.start_etcd()
    except EtcdNotInstalledError as e:
        fail(str(e), 1)
    except ClusterStateError as e:
        fail(str(e), 1)
    url = etcd.url(cluster.namespace)
    procs: list[ManagedProcess] = []
    deadline = time.monotonic() + UP_TIMEOUT_S
    try:
        for i in range(brokers):
            node_id = i + 1
            argv = [sys.executable, "-m", "yak.cli.main", "serve",
                    "--data-dir", str(cluster.dir / f"broker-{node_id}"),
                    "--listen", f"127.0.0.1:{plan.kafka[i]}",
                    "--http", f"127.0.0.1:{plan.http[i]}",
                    "--metadata", url, "--set", f"node.id={node_id}"]
            for s in set_ or ():
                argv += ["--set", s]
            procs.append(cluster.add_process(ManagedProcess(
                f"broker-{node_id}", argv, cluster.dir / "logs" / f"broker-{node_id}.log",
                env={"PYTHONUNBUFFERED": "1"}, ports=[plan.kafka[i], plan.http[i]])))
        for p in procs:
            p.wait_ready(lambda p=p: READY in p.log_tail(200),
                         max(1.0, deadline - time.monotonic()))
        _wait_registered(plan, brokers, deadline)
        for port in plan.http:
            _wait_http(port, deadline)
    except (ClusterStateError, TimeoutError) as e:
        cluster.stop(10)
        fail(f"the cluster did not start: {e} (logs in {cluster.dir / 'logs'})", 1)
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in plan.kafka)
    print(f"Bootstrap servers: {bootstrap}")
    print(f"Console: http://127.0.0.1:{plan.http[0]}/")
    print(f"Metadata: {url}")
    print(f"Stop with: yak cluster stop --dir {directory}")


def _wait_registered(plan: PortPlan, n: int, deadline: float) -> None:
    """Until every broker's Metadata lists all n brokers (they found each other)."""
    from confluent_kafka.admin import AdminClient

    clients = [AdminClient({"bootstrap.servers": f"127.0.0.1:{p}", "log_level": 0})
               for p in plan.kafka]
    while True:
        try:
            if all(len(c.list_topics(timeout=2).brokers) == n for c in clients):
                return
        except Exception:  # noqa: S110 - not yet: try again until the deadline
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the {n} brokers did not all register in time")
        time.sleep(0.2)


def _wait_http(port: int, deadline: float) -> None:
    import httpx

    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/", timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the console on port {port} did not answer in time")
        time.sleep(0.2)


def _load(directory: str) -> LocalCluster:
    from yak.devcluster.local import ClusterStateError, LocalCluster

    try:
        return LocalCluster.load(Path(directory))
    except ClusterStateError as e:
        fail(str(e), 2)


@app.command("status")
def status(directory: Dir = "./yak-cluster") -> None:
    """Each process of the cluster, each broker's address, and the controller."""
    cluster = _load(directory)
    alive_brokers = []
    for name, pid, alive, ports in cluster.status():
        state = f"running (pid {pid})" if alive else "stopped"
        if name.startswith("broker-"):
            addr = f"127.0.0.1:{ports[0]}"
            extra = f"  console http://127.0.0.1:{ports[1]}/" if len(ports) > 1 else ""
            print(f"{name:<10} {addr:<22} {state}{extra}")
            if alive:
                alive_brokers.append(addr)
        else:
            print(f"{name:<10} {'127.0.0.1:' + str(ports[0]):<22} {state}")
    print(f"controller: {_controller(alive_brokers)}")


def _controller(bootstrap: list[str]) -> str:
    if not bootstrap:
        return "none (no broker is running)"
    from confluent_kafka.admin import AdminClient

    try:
        md = AdminClient({"bootstrap.servers": ",".join(bootstrap), "log_level": 0}
                         ).list_topics(timeout=5)
    except Exception as e:
        return f"unknown ({e})"
    if md.controller_id < 0:
        return "none (electing)"
    b = md.brokers.get(md.controller_id)
    where = f" at {b.host}:{b.port}" if b is not None else ""
    return f"broker {md.controller_id}{where}"


@app.command("stop")
def stop(directory: Dir = "./yak-cluster") -> None:
    """Stop every process the cluster's `up` started (brokers first)."""
    cluster = _load(directory)
    cluster.stop()
    left = [name for name, _pid, alive, _ports in cluster.status() if alive]
    if left:
        fail(f"still running: {', '.join(left)}", 1)
    print(f"stopped the cluster in {directory}")


@app.command("purge")
def purge(directory: Dir = "./yak-cluster") -> None:
    """Stop the cluster and delete its directory (data, logs, state)."""
    cluster = _load(directory)
    cluster.purge()
    if os.path.exists(directory):
        fail(f"could not delete {directory}", 1)
    print(f"purged the cluster in {directory}")
