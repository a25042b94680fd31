"""What the console's page APIs share: the error responses they document, the caller's
cluster and core, and the facts more than one page shows (which topics are internal,
every broker of the cluster, live or not).

Each page module builds its own `APIRouter` with `page_router()`, so every route has the
prefix, tag and response class it had when the API was one module.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Request

from yak.gateway.cluster import ClusterClient
from yak.gateway.core import GatewayCore
from yak.gateway.errors import ErrorBody, V2Response
from yak.gateway.http_auth import caller_core

ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorBody} for s in (400, 404, 409, 413, 422, 500, 503)
}
TOPIC_NAME = r"^[A-Za-z0-9._-]{1,249}$"
RACKS_MAX_AGE_S = 10.0  # racks change only when a broker restarts: asked again this often


def page_router() -> APIRouter:
    """A page's router: under `/api`, tagged `console`, answering with `V2Response`."""
    return APIRouter(prefix="/api", tags=["console"], default_response_class=V2Response)


def cluster_of(request: Request) -> ClusterClient:
    """The cluster client acting for this request's caller (yak.gateway.http_auth)."""
    return caller_core(request).cluster


def core_of(request: Request) -> GatewayCore:
    """The core acting for this request's caller (yak.gateway.http_auth)."""
    return caller_core(request)


def is_internal(tm: Any) -> bool:
    """Kafka's internal topics and, by convention, every topic whose name starts with "_"
    (`_schemas`, `_confluent-*`): the console offers no one-click delete for them."""
    return bool(tm.internal) or tm.name.startswith("_")


async def broker_racks(request: Request, md: Any) -> dict[int, str | None]:
    """Each broker's `broker.rack` (DescribeCluster: confluent-kafka's Metadata leaves the
    rack out), remembered like the addresses so an offline broker keeps its rack; {} when
    DescribeCluster fails (the pages show no rack rather than no brokers)."""
    state = request.app.state
    known: dict[tuple[Any, int], str | None] = getattr(state, "console_seen_racks", None) or {}
    state.console_seen_racks = known
    asked: dict[Any, float] = getattr(state, "console_racks_asked", None) or {}
    state.console_racks_asked = asked
    cid = md.cluster_id
    now = time.monotonic()
    if all((cid, i) in known for i in md.brokers) and now - asked.get(cid, 0.0) < RACKS_MAX_AGE_S:
        return {i: rack for (c, i), rack in known.items() if c == cid}
    asked[cid] = now
    cluster = cluster_of(request)

    def describe() -> Any:
        return cluster.admin.describe_cluster(request_timeout=cluster.timeout_s).result(
            cluster.timeout_s + 5)

    try:
        for node in (await asyncio.to_thread(describe)).nodes:
            known[(cid, node.id)] = node.rack or None
    except Exception:  # racks are a detail of the page
        pass
    return {i: rack for (c, i), rack in known.items() if c == cid}


def all_brokers(request: Request, md: Any, leaders: dict[int, int],
             replicas: dict[int, int], racks: dict[int, str | None] | None = None
             ) -> list[dict[str, Any]]:
    """Every broker of the cluster, live or not. Metadata lists only live (registered,
    unfenced) brokers; a stopped one is still named by the replica sets of its partitions
    (kept in the cluster's metadata: etcd in a cluster), and this gateway remembers the
    address of every broker it has seen. Those not in Metadata are offline."""
    state = request.app.state
    seen: dict[tuple[Any, int], tuple[str, int]] = getattr(state, "console_seen_brokers", None)
    if seen is None:
        seen = state.console_seen_brokers = {}
    for i, addr in md.brokers.items():
        seen[(md.cluster_id, i)] = addr
    known = set(md.brokers) | {r for r in replicas if r >= 0}
    known |= {i for (cid, i) in seen if cid == md.cluster_id}
    # The brokers' published load (issue 23): `yak serve` hands its gateway its broker's
    # image of them; a standalone gateway has none (None per broker).
    source = getattr(getattr(state, "gateway", None), "settings", None)
    loads = source.broker_loads() if source is not None and source.broker_loads else {}
    out = []
    for i in sorted(known):
        online = i in md.brokers
        host, port = md.brokers[i] if online else seen.get((md.cluster_id, i), (None, None))
        out.append({"id": i, "host": host, "port": port, "online": online,
                    "leaders": leaders.get(i, 0), "replicas": replicas.get(i, 0),
                    "load": loads.get(i), "rack": (racks or {}).get(i)})
    return out

