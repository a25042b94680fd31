"""The Broker page's API: one broker's address and status, its configs
(DescribeConfigs), its log dirs (DescribeLogDirs) and the partitions it leads and follows."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Request

from yak.gateway.cluster import ClusterClient
from yak.gateway.console_api.common import (
    ERRORS,
    all_brokers,
    broker_racks,
    cluster_of,
    page_router,
)
from yak.gateway.errors import RestError

router = page_router()




def _broker_log_dirs(host: str, port: int, timeout_s: float, security: Any) -> list[dict[str, Any]]:
    """DescribeLogDirs v4 on one broker: its log directories with their space and the
    size and offset lag of every partition they hold."""
    from yak.client.connection import Connection, build
    from yak.protocol.kio_compat import schema_module

    conn = Connection(host, port, client_id="yak-console", timeout_s=timeout_s,
                      security=security)
    try:
        resp = conn.send(
            build(schema_module("describe_log_dirs", 4, "request").DescribeLogDirsRequest,
                  topics=None),
            schema_module("describe_log_dirs", 4, "response").DescribeLogDirsResponse)
    finally:
        conn.close()
    out = []
    for d in resp.results:
        parts = sorted(({"topic": str(t.name), "partition": int(p.partition_index),
                         "size": int(p.partition_size), "offset_lag": int(p.offset_lag)}
                        for t in d.topics for p in t.partitions),
                       key=lambda r: (r["topic"], r["partition"]))
        out.append({"path": str(d.log_dir), "error_code": int(d.error_code),
                    "total_bytes": int(d.total_bytes), "usable_bytes": int(d.usable_bytes),
                    "size": sum(p["size"] for p in parts), "partitions": parts})
    return out


def _broker_configs(cluster: ClusterClient, broker_id: int) -> list[dict[str, Any]]:
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    def source(v: Any) -> str:
        try:
            return ConfigSource(v).name
        except ValueError:
            return getattr(v, "name", str(v))

    res = ConfigResource(ResourceType.BROKER, str(broker_id))
    entries = cluster.admin.describe_configs([res], request_timeout=cluster.timeout_s)[res].result(
        cluster.timeout_s + 5)
    return [{"name": e.name, "value": None if e.is_sensitive else e.value,
             "is_default": bool(e.is_default), "read_only": bool(e.is_read_only),
             "sensitive": bool(e.is_sensitive),
             "source": source(e.source)}
            for e in sorted(entries.values(), key=lambda e: e.name)]


@router.get("/brokers/{broker_id}", responses=ERRORS)
async def broker_detail(request: Request, broker_id: int) -> Any:
    """One broker: its address and status, its configs (DescribeConfigs), its log dirs
    (DescribeLogDirs: space, size per partition) and the partitions it leads and follows
    (with whether it is in their ISR)."""
    cluster = cluster_of(request)
    md = await cluster.metadata()
    led: list[dict[str, Any]] = []
    followed: list[dict[str, Any]] = []
    leaders: dict[int, int] = {}
    replicas: dict[int, int] = {}
    for name, tm in sorted(md.topics.items()):
        for pid, pm in sorted(tm.partitions.items()):
            leaders[pm.leader] = leaders.get(pm.leader, 0) + 1
            for r in pm.replicas:
                replicas[r] = replicas.get(r, 0) + 1
            if broker_id not in pm.replicas and pm.leader != broker_id:
                continue
            row = {"topic": name, "partition": pid, "leader": pm.leader,
                   "replicas": pm.replicas, "isr": pm.isr, "in_sync": broker_id in pm.isr}
            (led if pm.leader == broker_id else followed).append(row)
    known = {b["id"]: b for b in all_brokers(request, md, leaders, replicas,
                                             await broker_racks(request, md))}
    if broker_id not in known:
        raise RestError(404, 40403, f"Broker {broker_id} not found.")
    out: dict[str, Any] = {**known[broker_id], "controller": broker_id == md.controller_id,
                           "led": led, "followed": followed, "configs": None,
                           "log_dirs": None, "errors": {}}
    if not out["online"]:
        out["errors"]["configs"] = out["errors"]["log_dirs"] = "the broker is offline"
        return out
    host, port = md.brokers[broker_id]
    configs, dirs = await asyncio.gather(
        asyncio.to_thread(_broker_configs, cluster, broker_id),
        asyncio.to_thread(_broker_log_dirs, host, port, cluster.timeout_s, cluster.security),
        return_exceptions=True)
    for key, val in (("configs", configs), ("log_dirs", dirs)):
        if isinstance(val, BaseException):
            out["errors"][key] = str(val) or type(val).__name__
        else:
            out[key] = val
    return out
