"""The Overview page's API: `/api/health` (the header's connection dot) and
`/api/overview` (brokers, counts, under-replicated partitions, totals)."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import Query, Request

from yak.gateway.cluster import ClusterError
from yak.gateway.console_api.common import (
    ERRORS,
    all_brokers,
    broker_racks,
    cluster_of,
    is_internal,
    page_router,
)
from yak.gateway.console_api.reassignments import list_reassignments
from yak.gateway.errors import V2Response

router = page_router()


@router.get("/health")
async def health(request: Request) -> Any:
    try:
        rtt = await cluster_of(request).ping()
    except ClusterError as e:
        return V2Response({"up": False, "error": e.message}, status_code=503)
    return {"up": True, "rtt_ms": round(rtt * 1000, 2)}


@router.get("/overview", responses=ERRORS)
async def overview(
    request: Request,
    urp_offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    urp_limit: Annotated[int, Query(ge=1, le=500)] = 20,
) -> Any:
    """The cluster at a glance; the under-replicated partitions one page at a time
    (`urp_offset`, `urp_limit`), all of them counted."""
    gw = request.app.state.gateway
    cluster = cluster_of(request)
    md = await cluster.metadata()
    tps = [(t, p) for t, tm in md.topics.items() for p in tm.partitions]
    marks = await cluster.watermarks(tps)
    sizes = await cluster.log_dirs()
    # Replication at a glance (issue 11): leaders and replicas per broker, partitions whose
    # ISR is smaller than their replica set (under-replicated) and those with no leader.
    leaders: dict[int, int] = {}
    replicas: dict[int, int] = {}
    urp: list[dict[str, Any]] = []
    offline = 0
    for name, tm in sorted(md.topics.items()):
        for pid, pm in sorted(tm.partitions.items()):
            leaders[pm.leader] = leaders.get(pm.leader, 0) + 1
            for r in pm.replicas:
                replicas[r] = replicas.get(r, 0) + 1
            if pm.leader < 0:
                offline += 1
            if len(pm.isr) < len(pm.replicas) or pm.leader < 0:
                urp.append({"topic": name, "partition": pid, "leader": pm.leader,
                            "replicas": pm.replicas, "isr": pm.isr})
    user = [t for t in md.topics.values() if not is_internal(t)]
    internal = [t for t in md.topics.values() if is_internal(t)]
    out: dict[str, Any] = {
        "cluster_id": md.cluster_id,
        "controller_id": md.controller_id,
        "brokers": all_brokers(request, md, leaders, replicas, await broker_racks(request, md)),
        "under_replicated": len(urp),
        "offline_partitions": offline,
        "under_replicated_partitions": urp[urp_offset:urp_offset + urp_limit],
        "under_replicated_offset": urp_offset,
        "under_replicated_limit": urp_limit,
        # Topics and partitions counted alike: the user's, and the internal ones apart.
        "topics": len(user),
        "partitions": sum(len(t.partitions) for t in user),
        "internal_topics": len(internal),
        "internal_partitions": sum(len(t.partitions) for t in internal),
        # Sum of high watermarks: its rate of change is the cluster's messages in per second.
        "messages_total": sum(max(m.high_watermark, 0) for m in marks.values()),
        "bytes_total": sum(s for s, _ in sizes.values()),
        "time": time.time(),
        "embedded": gw.embedded,
    }
    if gw.settings.broker_metrics is not None:
        out["broker"] = gw.settings.broker_metrics.totals()
    out["reassignments"] = await _moving_count(cluster, md)
    return out


async def _moving_count(cluster: Any, md: Any) -> int | None:
    """Partitions being reassigned (issue 23; ListPartitionReassignments on a live broker),
    None when the list cannot be had."""
    if not md.brokers:
        return None
    host, port = next(iter(md.brokers.values()))
    try:
        return len(await asyncio.to_thread(list_reassignments, host, port, cluster.timeout_s,
                                           cluster.security))
    except Exception:  # a detail of the page
        return None
