"""The Share groups pages' API (KIP-932): the share groups, and one group's members, start
offset and lag per partition, what is in flight and the dead-letter topic.

Membership, start offsets and lag come over the wire (ListGroups type share,
ShareGroupDescribe, DescribeShareGroupOffsets through `yak.client.share_groups`, the
requests `yak share-group` sends). No Kafka API reads a share partition's in-flight
records (Kafka's tools show start offset and lag only), nor a group's configs yet (Yak
answers DescribeConfigs on GROUP not at all), so the records in flight, acquired, by
delivery count and the dead-letter topic are read from the broker's own share metrics
(yak/share/metrics.py) when the gateway runs inside `yak serve`: they cover the share
partitions that broker leads, and the page says so (`in_flight.source`). A standalone
gateway has no broker beside it: those parts are null.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Request

from yak.gateway.cluster import ClusterClient, ClusterError
from yak.gateway.console_api.common import ERRORS, cluster_of, page_router
from yak.gateway.errors import RestError

router = page_router()

_GAUGES = {
    "yak_share_partition_in_flight_messages": "in_flight",
    "yak_share_partition_acquired_messages": "acquired",
}
_BY_COUNT = "yak_share_group_in_flight_by_delivery_count"
_DLQ = "yak_share_group_dead_letter_topic_info"


def _share_call(cluster: ClusterClient, fn: Any) -> Any:
    """`fn(client)` with Yak's share-group admin client, the cluster's bootstrap and
    security; a Kafka error becomes a ClusterError, an unknown group a 404."""
    from yak.client.share_groups import ShareAdminClient
    from yak.errors import KafkaError

    try:
        with ShareAdminClient(cluster.bootstrap, client_id="yak-console",
                              request_timeout_ms=int(cluster.timeout_s * 1000), retries=1,
                              security=cluster.security) as c:
            return fn(c)
    except KafkaError as e:
        name = e.code.name.upper()
        what = e.message.rpartition(": ")[0] or e.message  # "what: code_name"
        if name == "GROUP_ID_NOT_FOUND":
            raise RestError(404, 40405, f"Share group not found ({what}).") from None
        raise ClusterError(f"{name}: {what}", int(e.code), name) from None
    except OSError as e:
        raise ClusterError(f"the cluster is unreachable: {e}", -195, "_TRANSPORT") from None


def _broker_share_state(request: Request, group: str) -> dict[str, Any] | None:
    """In flight / acquired per partition, in-flight records by delivery count and the
    dead-letter topic of `group`, from the embedded broker's metrics; None standalone."""
    metrics = request.app.state.gateway.settings.broker_metrics
    if metrics is None:
        return None
    reg = metrics.registry.restricted_registry([*_GAUGES, _BY_COUNT, _DLQ])
    parts: dict[tuple[str, int], dict[str, int]] = {}
    by_count: dict[int, int] = {}
    dlq = None
    for family in reg.collect():
        for s in family.samples:
            if s.labels.get("group") != group:
                continue
            if s.name in _GAUGES:
                key = (s.labels["topic"], int(s.labels["partition"]))
                parts.setdefault(key, {})[_GAUGES[s.name]] = int(s.value)
            elif s.name == _BY_COUNT:
                by_count[int(s.labels["delivery_count"])] = int(s.value)
            elif s.name == _DLQ:
                dlq = s.labels["topic"]
    return {"partitions": parts, "by_delivery_count": by_count, "dead_letter_topic": dlq}


@router.get("/share-groups", responses=ERRORS)
async def share_groups(request: Request) -> Any:
    """Every share group of the cluster with its state (ListGroups type share)."""
    cluster = cluster_of(request)
    found = await asyncio.to_thread(_share_call, cluster, lambda c: c.list_share_groups())
    return [{"group_id": g.group_id, "state": g.state} for g in found]


@router.get("/share-groups/{group}", responses=ERRORS)
async def share_group(request: Request, group: str) -> Any:
    """One share group: state, members and assignments, per partition the start offset,
    log end offset and lag, and (inside `yak serve`) in flight and acquired counts, the
    in-flight records by delivery count and the dead-letter topic."""
    cluster = cluster_of(request)
    doc = await asyncio.to_thread(_share_call, cluster, lambda c: c.report(group))
    here = _broker_share_state(request, group)
    for p in doc["partitions"]:
        counts = here["partitions"].get((p["topic"], p["partition"])) if here else None
        p["in_flight"] = counts.get("in_flight") if counts else None
        p["acquired"] = counts.get("acquired") if counts else None
    doc["in_flight"] = None if here is None else {
        "source": "the share partitions led by the broker this console runs in",
        "by_delivery_count": [{"delivery_count": c, "records": n}
                              for c, n in sorted(here["by_delivery_count"].items())],
    }
    doc["dead_letter_topic"] = here["dead_letter_topic"] if here else None
    return doc
