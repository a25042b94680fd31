"""`yak cluster up|status|stop|purge|start-broker|add-broker`: a local Yak cluster in the
background, in one directory; `yak cluster info|health|logdirs`: any Kafka-compatible
cluster, over the wire.

Modelled on Redpanda's `rpk container start|status|stop|purge`: `up` starts an etcd (one
member, or three) and N brokers (`yak serve --metadata etcd://...`, node ids 1..N) as
background processes whose state lives in `--dir` (data, logs, `cluster.json` with every
pid), and returns once every broker has registered and sees the others, printing the
bootstrap servers and the console URL (`--racks a,b,c`: broker i gets `broker.rack` =
RACKS[i mod len], the way several brokers share one host safely). Every port it opens is
within `--base-port` .. +19 (`yak/devcluster/local.py`'s PortPlan): brokers' Kafka
listeners from the base port, their HTTP (REST, console, /metrics) ports from +5, etcd from
+10. `--tiered` also starts an S3 store (SeaweedFS, yak/devcluster/objectstore.py) on +20 ..
+30 and gives every broker tiered storage on it (`remote.log.storage.system.enable`,
`remote.storage.uri`); topics then opt in with `remote.storage.enable=true`. `status` lists
each process, each broker's address and the controller, and the store's address; `stop` ends
every process `up` started (brokers first, with a controlled shutdown, then the store and
etcd); `purge` also deletes the directory, the store's data with it; `start-broker N` starts
one stopped broker again (its data, ports and command as `up` recorded them in
`cluster.json`) while the rest of the cluster runs; `add-broker` starts one more broker
(the next node id, up to 5) with the settings `up` was given, as an operator adds a machine:
the controller places new partitions on it, and `partition.autobalancing.mode=node_add`
moves existing ones there.

`info`, `health` and `logdirs` reach any cluster through `--bootstrap` (as rpk's `cluster
info`, `cluster health` and `cluster logdirs describe` do); they live in
yak/cli/cluster_info.py and are registered here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

# `_describe_log_dirs` is imported from here by `yak cluster rebalance`.
from yak.cli.cluster_info import _describe_log_dirs, health, info, logdirs  # noqa: F401
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
    racks: Annotated[str | None, typer.Option(
        "--racks", help="Comma-separated racks: broker i gets broker.rack=RACKS[i % len],"
        " so replicas spread over them (and consumers with client.rack read nearby).")]
        = None,
    tiered: Annotated[bool, typer.Option(
        "--tiered", help="Also run an S3 store (SeaweedFS, ports +20..+30) and give every"
        " broker tiered storage on it; topics opt in with remote.storage.enable=true.")]
        = False,
) -> None:
    """Start etcd and N brokers in the background; print the bootstrap servers."""
    from yak.devcluster.local import (
        ClusterStateError,
        EtcdNotInstalledError,
        LocalCluster,
        ManagedProcess,
        PortPlan,
    )
    from yak.devcluster.objectstore import (
        STORE_ACCESS_KEY,
        STORE_SECRET_KEY,
        WeedNotInstalledError,
        find_weed,
    )

    try:
        plan = PortPlan(base_port, brokers, etcd_members, tiered)
    except ClusterStateError as e:
        fail(str(e), 2)
    rack_names = _parse_racks(racks) if racks is not None else []
    if tiered:
        try:
            find_weed()  # before anything starts: a missing binary is a usage error
        except WeedNotInstalledError as e:
            fail(str(e), 2)
    cluster = LocalCluster(Path(directory), plan)
    cluster.racks = rack_names
    try:
        etcd = cluster.start_etcd()
    except EtcdNotInstalledError as e:
        fail(str(e), 1)
    except ClusterStateError as e:
        hint = ""
        if "already running" in str(e):
            hint = (f"; or start one stopped broker with `yak cluster start-broker N --dir"
                    f" {directory}`")
        fail(f"{e}{hint}", 1)
    url = etcd.url(cluster.namespace)
    procs: list[ManagedProcess] = []
    deadline = time.monotonic() + UP_TIMEOUT_S
    try:
        if tiered:
            cluster.start_store(max(1.0, deadline - time.monotonic()))
            # SeaweedFS runs without -s3.config: any key signs; the user's --set come after
            # these, so they win.
            cluster.broker_settings += [
                "remote.log.storage.system.enable=true",
                f"remote.storage.uri={cluster.store_uri}",
                f"remote.storage.access.key.id={STORE_ACCESS_KEY}",
                f"remote.storage.secret.access.key={STORE_SECRET_KEY}"]
        cluster.broker_settings += list(set_ or ())
        for i in range(brokers):
            procs.append(cluster.add_process(cluster.broker_process(i + 1)))
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
    if cluster.store_uri is not None:
        print(f"Object store: {cluster.store_uri}")
        print(f"Object store credentials: AWS_ACCESS_KEY_ID={STORE_ACCESS_KEY}"
              f" AWS_SECRET_ACCESS_KEY={STORE_SECRET_KEY}")
    print(f"Stop with: yak cluster stop --dir {directory}")


def _parse_racks(racks: str) -> list[str]:
    """`--racks a,b,c` -> ["a", "b", "c"]; a blank or unprintable name is exit 2."""
    names = [r.strip() for r in racks.split(",")]
    if not names or any(not r or not r.isprintable() for r in names):
        fail(f"invalid --racks {racks!r}: expected comma-separated, non-empty rack names"
             " (e.g. a,b,c)", 2)
    return names


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
    """Each process of the cluster, each broker's address and load, and the controller."""
    cluster = _load(directory)
    processes = cluster.status()
    loads = _loads(cluster) if any(a and not n.startswith("broker-")
                                   for n, _p, a, _ports in processes) else {}
    alive_brokers = []
    for name, pid, alive, ports in processes:
        state = f"running (pid {pid})" if alive else "stopped"
        if name.startswith("broker-"):
            addr = f"127.0.0.1:{ports[0]}"
            extra = f"  console http://127.0.0.1:{ports[1]}/" if len(ports) > 1 else ""
            print(f"{name:<10} {addr:<22} {state}{extra}")
            if alive:
                alive_brokers.append(addr)
                report = loads.get(int(name.removeprefix("broker-")))
                print(f"{'':<10} load: {report.summary() if report is not None else 'no report yet'}")
        elif name == "s3":
            print(f"{name:<10} {'127.0.0.1:' + str(ports[0]):<22} {state}"
                  f"  object store {cluster.store_uri}")
        else:
            print(f"{name:<10} {'127.0.0.1:' + str(ports[0]):<22} {state}")
    print(f"controller: {_controller(alive_brokers)}")


def _loads(cluster: LocalCluster) -> dict[int, Any]:
    """The brokers' latest load reports (yak/cluster/broker_load.py), read from the
    cluster's etcd; empty when etcd does not answer within 3 s."""
    import asyncio

    from yak.cluster.broker_load import read_loads
    from yak.cluster.etcd import EtcdClient
    from yak.cluster.layout import ClusterKeys

    if cluster.etcd is None:
        return {}

    async def read() -> dict[int, Any]:
        async with EtcdClient(cluster.etcd.endpoints, timeout=3.0) as c:  # type: ignore[union-attr]
            r = await c.range(ClusterKeys(cluster.namespace).broker_loads, prefix=True)
            return read_loads(r.kvs)

    try:
        return asyncio.run(asyncio.wait_for(read(), 5.0))
    except Exception:  # noqa: BLE001 - status shows what it can
        return {}


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


@app.command("start-broker")
def start_broker(
    node_id: Annotated[int, typer.Argument(help="The broker's node id (1..N).")],
    directory: Dir = "./yak-cluster",
) -> None:
    """Start one stopped broker of the local cluster again, on its data and ports."""
    from yak.devcluster.local import _port_free

    cluster = _load(directory)
    name = f"broker-{node_id}"
    brokers = sorted(int(n.split("-", 1)[1]) for n in cluster.processes
                     if n.startswith("broker-"))
    if name not in cluster.processes:
        listed = ", ".join(map(str, brokers)) or "none"
        fail(f"no broker {node_id} in the cluster in {directory} (its brokers: {listed})", 2)
    proc = cluster.processes[name]
    if proc.is_alive():
        fail(f"{name} is already running (pid {proc.pid})", 1)
    etcd = cluster.etcd.members if cluster.etcd is not None else []
    if not etcd or not all(m.is_alive() for m in etcd):
        fail(f"etcd of the cluster in {directory} is not running: start the whole cluster"
             f" with `yak cluster up --dir {directory}`", 1)
    _check_store(cluster, directory)
    busy = [p for p in proc.ports if not _port_free(p)]
    if busy:
        fail(f"cannot start {name}: ports {', '.join(map(str, busy))} are in use", 1)
    proc.env = {"PYTHONUNBUFFERED": "1"}
    _start_and_wait(cluster, proc)
    print(f"started {name} on 127.0.0.1:{proc.ports[0]} (pid {proc.pid})")


def _check_store(cluster: LocalCluster, directory: str) -> None:
    """A tiered cluster's brokers stop at start-up (exit 2) without their object store."""
    store = cluster.store
    if store is not None and not store.is_alive():
        fail(f"the object store of the cluster in {directory} is not running: start the"
             f" whole cluster with `yak cluster up --tiered --dir {directory}`", 1)


def _start_and_wait(cluster: LocalCluster, proc: Any) -> None:
    """Start a broker process (recording it), then wait for its ready line, until it sees
    every running broker, and for its console; a failure is one line and exit 1."""
    from yak.devcluster.local import ClusterStateError

    try:
        seen = proc.log_path.stat().st_size
    except OSError:
        seen = 0
    deadline = time.monotonic() + UP_TIMEOUT_S

    def ready() -> bool:  # its own READY line, not one of an earlier run in the same log
        with open(proc.log_path, "rb") as f:
            f.seek(seen)
            return READY.encode() in f.read()

    try:
        cluster.add_process(proc)
        proc.wait_ready(ready, max(1.0, deadline - time.monotonic()))
        running = [int(n.split("-", 1)[1]) for n, p in cluster.processes.items()
                   if n.startswith("broker-") and p.is_alive()]
        _wait_sees(proc.ports[0], set(running), deadline)
        if len(proc.ports) > 1:
            _wait_http(proc.ports[1], deadline)
    except (ClusterStateError, TimeoutError) as e:
        fail(f"{proc.name} did not start: {e} (log in {proc.log_path})", 1)


@app.command("add-broker")
def add_broker(
    directory: Dir = "./yak-cluster",
    rack: Annotated[str | None, typer.Option(
        "--rack", help="Its broker.rack (default: the next of `up --racks`, if any).")]
        = None,
) -> None:
    """Start one more broker in the local cluster (the next node id, the settings of `up`).

    New partitions are placed on it; with partition.autobalancing.mode=node_add (the
    default) the controller moves existing ones there."""
    from dataclasses import replace

    from yak.devcluster.local import MAX_BROKERS, ClusterStateError, _port_free

    cluster = _load(directory)
    ids = cluster.broker_ids()
    node_id = max(ids, default=0) + 1
    if node_id > MAX_BROKERS:
        fail(f"the cluster in {directory} has brokers {', '.join(map(str, ids))}: a local"
             f" cluster has at most {MAX_BROKERS} (node ids 1..{MAX_BROKERS}, one port each"
             f" within --base-port .. +9)", 2)
    if rack is not None and (not rack.strip() or not rack.isprintable()):
        fail(f"invalid --rack {rack!r}: a rack is a non-empty, printable name", 2)
    etcd = cluster.etcd.members if cluster.etcd is not None else []
    if not etcd or not all(m.is_alive() for m in etcd):
        fail(f"etcd of the cluster in {directory} is not running: start the cluster with"
             f" `yak cluster up --dir {directory}` first", 1)
    _check_store(cluster, directory)
    try:
        proc = cluster.broker_process(node_id, rack)
    except ClusterStateError as e:
        fail(str(e), 2)
    busy = [p for p in proc.ports if not _port_free(p)]
    if busy:
        fail(f"cannot add broker {node_id}: ports {', '.join(map(str, busy))} are in use"
             " (an outgoing connection may hold one: a --base-port below the ephemeral"
             " range, /proc/sys/net/ipv4/ip_local_port_range, avoids that)", 1)
    cluster.plan = replace(cluster.plan, brokers=len(ids) + 1)
    _start_and_wait(cluster, proc)
    print(f"added broker {node_id} on 127.0.0.1:{proc.ports[0]} (pid {proc.pid}),"
          f" console http://127.0.0.1:{proc.ports[1]}/")


def _wait_sees(port: int, brokers: set[int], deadline: float) -> None:
    """Until the broker on `port` lists every running broker, itself included (it has
    registered; a broker killed a moment ago may still be listed until its session ends)."""
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
    while True:
        try:
            if brokers <= set(client.list_topics(timeout=2).brokers):
                return
        except Exception:  # noqa: S110 - not yet: try again until the deadline
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"it did not see brokers {sorted(brokers)} in time")
        time.sleep(0.2)


@app.command("purge")
def purge(directory: Dir = "./yak-cluster") -> None:
    """Stop the cluster and delete its directory (data, logs, state)."""
    cluster = _load(directory)
    cluster.purge()
    if os.path.exists(directory):
        fail(f"could not delete {directory}", 1)
    print(f"purged the cluster in {directory}")


# ------------------------------------------------------------ any cluster, over the wire

app.command("info")(info)
app.command("health")(health)
app.command("logdirs")(logdirs)
