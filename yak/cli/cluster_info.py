"""`yak cluster info|health|logdirs`: any Kafka-compatible cluster, over the wire, as rpk's
`cluster info`, `cluster health` and `cluster logdirs describe`: brokers, controller and
cluster id (with each broker's API versions); under-replicated, leaderless and offline
partitions with an exit code for scripts; DescribeLogDirs' bytes per broker and
topic-partition. Registered on `yak cluster` by yak/cli/cluster.py (which holds the local
harness's commands); apart from it so that neither module passes ~600 lines.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from yak.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    Bootstrap,
    Timeout,
    client_security,
    connect_admin,
    fail,
    secured,
    wait,
)

__all__ = ["_describe_log_dirs", "health", "info", "logdirs"]


Format = Annotated[str, typer.Option("--format", help="text or json.")]

PRODUCE_KEY, FETCH_KEY = 0, 1


def _check_format(fmt: str) -> None:
    if fmt not in ("text", "json"):
        fail(f"invalid --format {fmt!r}: expected text or json", exit_code=2)


def _api_versions(host: str, port: int, timeout: float) -> dict[str, Any]:
    """What ApiVersions says of one broker: how many APIs, and the Produce/Fetch ranges.

    Kafka's ApiVersions carries no software name or version for the broker (KIP-511 sends
    only the client's), so the API ranges are the version information there is.
    """
    from yak.client.connection import Connection, build
    from yak.protocol.kio_compat import schema_module

    conn = Connection(host, port, client_id="yak-cli", timeout_s=timeout,
                      security=client_security())
    try:
        resp = conn.send(
            build(schema_module("api_versions", 3, "request").ApiVersionsRequest,
                  client_software_name="yak-cli", client_software_version="0.1"),
            schema_module("api_versions", 3, "response").ApiVersionsResponse,
        )
    finally:
        conn.close()
    ranges = {int(k.api_key): [int(k.min_version), int(k.max_version)] for k in resp.api_keys}
    return {"apis": len(ranges), "produce": ranges.get(PRODUCE_KEY),
            "fetch": ranges.get(FETCH_KEY)}


@secured
def info(
    fmt: Format = "text",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Any cluster: its id, controller, and brokers (address, rack, API versions)."""
    _check_format(fmt)
    admin, _md = connect_admin(bootstrap, timeout)
    desc = wait(admin.describe_cluster(request_timeout=timeout), timeout,
                "cannot describe the cluster")
    controller = desc.controller.id if desc.controller is not None else None
    brokers = []
    for n in sorted(desc.nodes, key=lambda n: n.id):
        row: dict[str, Any] = {"id": n.id, "host": n.host, "port": n.port, "rack": n.rack,
                               "controller": n.id == controller}
        try:
            row["api_versions"] = _api_versions(n.host, n.port, timeout)
        except Exception as e:  # one broker down must not hide the others
            row["api_versions"] = None
            row["error"] = str(e)
        brokers.append(row)
    if fmt == "json":
        print(json.dumps({"cluster_id": desc.cluster_id, "controller": controller,
                          "brokers": brokers}))
        return
    print(f"Cluster id: {desc.cluster_id}")
    print(f"Controller: {'none' if controller is None else controller}")
    print(f"{'BROKER':<8} {'ADDRESS':<24} {'RACK':<12} API VERSIONS")
    for b in brokers:
        av = b["api_versions"]
        if av is None:
            versions = f"unreachable ({b['error']})"
        else:
            parts = [f"{av['apis']} APIs"]
            for name in ("produce", "fetch"):
                if av[name]:
                    parts.append(f"{name.capitalize()} v{av[name][0]}-{av[name][1]}")
            versions = ", ".join(parts)
        bid = f"{b['id']}{'*' if b['controller'] else ''}"
        print(f"{bid:<8} {b['host'] + ':' + str(b['port']):<24} {b['rack'] or '-':<12} {versions}")


@secured
def health(
    fmt: Format = "text",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Any cluster: under-replicated, leaderless and offline partitions, brokers down.

    Exit code 0 when healthy, 1 when not (a controller, every replica's broker up, every
    partition led and fully in sync), for scripts. Leaderless: no leader now. Offline: no
    leader and no replica on a live broker (the data cannot be read until one returns).
    """
    _check_format(fmt)
    _admin, md = connect_admin(bootstrap, timeout)
    live = set(md.brokers)
    down: set[int] = set()
    under, leaderless, offline = [], [], []
    for name in sorted(md.topics):
        t = md.topics[name]
        for p in sorted(t.partitions):
            pm = t.partitions[p]
            row = {"topic": name, "partition": p, "leader": pm.leader,
                   "replicas": list(pm.replicas), "isr": list(pm.isrs)}
            down |= set(pm.replicas) - live
            if pm.leader < 0 or pm.leader not in live:
                leaderless.append(row)
                if not set(pm.replicas) & live:
                    offline.append(row)
            if len(pm.isrs) < len(pm.replicas):
                under.append(row)
    controller = md.controller_id if md.controller_id >= 0 else None
    healthy = controller is not None and not (down or under or leaderless or offline)
    report = {
        "healthy": healthy,
        "controller": controller,
        "brokers": sorted(live),
        "brokers_down": sorted(down),
        "under_replicated": under,
        "leaderless": leaderless,
        "offline": offline,
    }
    if fmt == "json":
        print(json.dumps(report))
    else:
        print(f"Healthy: {'yes' if healthy else 'no'}")
        print(f"Controller: {'none' if controller is None else controller}")
        print(f"Brokers: {', '.join(map(str, sorted(live))) or 'none'}")
        print(f"Brokers down: {', '.join(map(str, sorted(down))) or 'none'}")
        for label, rows in (("Under-replicated", under), ("Leaderless", leaderless),
                            ("Offline", offline)):
            listed = ", ".join(f"{r['topic']}/{r['partition']}" for r in rows)
            print(f"{label} partitions ({len(rows)}): {listed or 'none'}")
    if not healthy:
        raise typer.Exit(1)


def _describe_log_dirs(host: str, port: int, timeout: float) -> list[dict[str, Any]]:
    from yak.client.connection import Connection, build
    from yak.protocol.kio_compat import schema_module

    conn = Connection(host, port, client_id="yak-cli", timeout_s=timeout,
                      security=client_security())
    try:
        resp = conn.send(
            build(schema_module("describe_log_dirs", 4, "request").DescribeLogDirsRequest,
                  topics=None),
            schema_module("describe_log_dirs", 4, "response").DescribeLogDirsResponse,
        )
    finally:
        conn.close()
    if resp.error_code:
        from yak.errors import ErrorCode

        raise RuntimeError(ErrorCode(int(resp.error_code)).name.upper())
    dirs = []
    for d in resp.results:
        parts = [
            {"topic": str(t.name), "partition": int(p.partition_index),
             "size": int(p.partition_size), "offset_lag": int(p.offset_lag)}
            for t in d.topics for p in t.partitions
        ]
        parts.sort(key=lambda r: (r["topic"], r["partition"]))
        dirs.append({"path": str(d.log_dir), "error_code": int(d.error_code),
                     "total_bytes": int(d.total_bytes), "usable_bytes": int(d.usable_bytes),
                     "partitions": parts})
    return dirs


@secured
def logdirs(
    topic: Annotated[list[str] | None, typer.Option(
        "--topic", "-t", help="Only this topic, repeatable (default: every topic).")] = None,
    fmt: Format = "text",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Any cluster: each broker's log directories and the bytes of each topic-partition."""
    _check_format(fmt)
    _admin, md = connect_admin(bootstrap, timeout)
    wanted = set(topic or ())
    brokers = []
    failed = False
    for bid in sorted(md.brokers):
        b = md.brokers[bid]
        row: dict[str, Any] = {"broker": bid, "host": b.host, "port": b.port}
        try:
            dirs = _describe_log_dirs(b.host, b.port, timeout)
        except Exception as e:  # one broker down must not hide the others
            failed = True
            row.update(error=str(e) or type(e).__name__, log_dirs=[])
            brokers.append(row)
            continue
        for d in dirs:
            if wanted:
                d["partitions"] = [p for p in d["partitions"] if p["topic"] in wanted]
        row["log_dirs"] = dirs
        brokers.append(row)
    if fmt == "json":
        print(json.dumps({"brokers": brokers}))
    else:
        print(f"{'BROKER':<8} {'DIR':<40} {'TOPIC-PARTITION':<40} {'SIZE':>14} OFFSET-LAG")
        for r in brokers:
            if "error" in r:
                print(f"{r['broker']:<8} cannot describe log dirs: {r['error']}")
                continue
            for d in r["log_dirs"]:
                for p in d["partitions"]:
                    tp = f"{p['topic']}-{p['partition']}"
                    print(f"{r['broker']:<8} {d['path']:<40} {tp:<40} {p['size']:>14} "
                          f"{p['offset_lag']}")
    if failed:
        raise typer.Exit(1)
