"""The Topics pages' API: the topic list (with size, messages and retention per topic),
create, delete (an internal topic only when confirmed by name), one topic's partitions
and configs, and config changes. Its records are `messages.py`'s."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import Query, Request, Response
from pydantic import BaseModel, Field

from yak.gateway import errors as E
from yak.gateway.cluster import ClusterError
from yak.gateway.console_api.common import ERRORS, TOPIC_NAME, cluster_of, is_internal, page_router
from yak.gateway.console_api.reassignments import list_reassignments
from yak.gateway.errors import RestError

router = page_router()


class NewTopicBody(BaseModel):
    name: str = Field(pattern=TOPIC_NAME)
    partitions: int = Field(default=1, ge=1, le=256)
    replication_factor: int = Field(default=1, ge=1, le=16)
    configs: dict[str, str] = Field(default_factory=dict)


class ConfigChanges(BaseModel):
    configs: dict[str, str | None]



@router.get("/topics", responses=ERRORS)
async def topics(request: Request) -> Any:
    cluster = cluster_of(request)
    md = await cluster.metadata()
    tps = [(t, p) for t, tm in md.topics.items() for p in tm.partitions]
    marks = await cluster.watermarks(tps)
    sizes = await cluster.log_dirs()
    rows = []
    for name, tm in sorted(md.topics.items()):
        parts = [(name, p) for p in tm.partitions]
        rows.append({
            "name": name, "internal": is_internal(tm), "partitions": len(tm.partitions),
            "replication_factor": max((len(p.replicas) for p in tm.partitions.values()),
                                      default=0),
            "messages": sum(max(marks[tp].high_watermark - marks[tp].log_start_offset, 0)
                            for tp in parts),
            "size": sum(sizes.get(tp, (0, 0))[0] for tp in parts),
        })
    # Retention of every topic in one DescribeConfigs each would be N round trips; the
    # list shows it for non-internal topics only, concurrently.
    async def retention(row: dict[str, Any]) -> None:
        try:
            cfg = {c["name"]: c["value"] for c in await cluster.topic_configs(row["name"])}
        except ClusterError:
            cfg = {}
        row["retention_ms"] = cfg.get("retention.ms")
        row["retention_bytes"] = cfg.get("retention.bytes")
        row["cleanup_policy"] = cfg.get("cleanup.policy")

    await asyncio.gather(*(retention(r) for r in rows))
    return rows


@router.post("/topics", status_code=201, responses=ERRORS)
async def create_topic(request: Request, body: NewTopicBody) -> Any:
    await cluster_of(request).create_topic(body.name, body.partitions, body.replication_factor,
                                         body.configs)
    return {"name": body.name}


@router.delete("/topics/{topic}", status_code=204, response_class=Response, responses=ERRORS)
async def delete_topic(request: Request, topic: str,
                       confirm: Annotated[str | None, Query(max_length=249)] = None) -> Response:
    """Delete a topic; an internal one (`__consumer_offsets`, `_schemas`, ...) only with
    `?confirm=<its name>`, so that no single click loses the cluster's own state."""
    tm = await cluster_of(request).topic(topic)
    if tm is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    if is_internal(tm) and confirm != topic:
        raise RestError(403, 40302, f"{topic} is an internal topic: deleting it loses the "
                        "state it holds; repeat with ?confirm=<topic name> to delete it")
    await cluster_of(request).delete_topic(topic)
    return Response(status_code=204)


@router.get("/topics/{topic}", responses=ERRORS)
async def topic_detail(request: Request, topic: str) -> Any:
    cluster = cluster_of(request)
    tm = await cluster.topic(topic)
    if tm is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    tps = [(topic, p) for p in sorted(tm.partitions)]
    marks, sizes, configs, moving = await asyncio.gather(
        cluster.watermarks(tps), cluster.log_dirs(), cluster.topic_configs(topic),
        _moving(cluster, topic))
    tiered = any(c["name"] == "remote.storage.enable" and c["value"] == "true"
                 for c in configs)
    remote = await _tiered_offsets(cluster, tm) if tiered else {}
    parts = []
    for tp in tps:
        pm = tm.partitions[tp[1]]
        m = marks[tp]
        size, lag = sizes.get(tp, (0, 0))
        parts.append({
            "partition": pm.partition, "leader": pm.leader, "replicas": pm.replicas,
            "isr": pm.isr, "error": pm.error,
            "log_start_offset": m.log_start_offset, "high_watermark": m.high_watermark,
            # DescribeLogDirs' offset_lag is log end minus high watermark on the leader.
            "log_end_offset": m.high_watermark + lag if m.high_watermark >= 0 else -1,
            "last_stable_offset": m.last_stable_offset, "size": size,
            # A partition being reassigned (issue 23): its adding and removing replicas.
            **moving.get(pm.partition, {"adding": [], "removing": []}),
        })
        if tiered:  # issue 25: the leader's local log start and what is uploaded
            parts[-1].update(remote.get(pm.partition, {"local_start_offset": None,
                                                       "uploaded_upto": None}))
    return {"name": topic, "internal": is_internal(tm), "tiered": tiered, "partitions": parts,
            "configs": configs}


async def _tiered_offsets(cluster: Any, tm: Any) -> dict[int, dict[str, int | None]]:
    """A tiered topic's partitions on their leaders: ListOffsets EARLIEST_LOCAL (-4, the
    local log's start) and LATEST_TIERED (-5, the last offset uploaded), as `yak tiered
    status` asks them (`yak.client.special_offsets`); None where a leader does not answer (remote
    bytes are in the bucket, which the console does not read)."""
    from yak.client.special_offsets import (
        EARLIEST_LOCAL,
        LATEST_TIERED,
        list_special_offsets,
    )

    md = await cluster.metadata()
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for p, pm in tm.partitions.items():
        by_leader.setdefault(pm.leader, []).append((tm.name, p))
    out: dict[int, dict[str, int | None]] = {}
    for leader, tps in by_leader.items():
        if leader not in md.brokers:
            continue
        host, port = md.brokers[leader]
        try:
            local, tiered = await asyncio.gather(*(asyncio.to_thread(
                list_special_offsets, host, port, tps, ts, cluster.timeout_s, cluster.security)
                for ts in (EARLIEST_LOCAL, LATEST_TIERED)))
        except Exception:  # noqa: BLE001, S112 - a detail of the page
            continue
        for tp in tps:
            lo, last = local.get(tp), tiered.get(tp)
            out[tp[1]] = {"local_start_offset": lo if isinstance(lo, int) else None,
                          "uploaded_upto": last + 1 if isinstance(last, int) and last >= 0
                          else None}
    return out


async def _moving(cluster: Any, topic: str) -> dict[int, dict[str, list[int]]]:
    """The topic's partitions being reassigned (ListPartitionReassignments on a bootstrap
    broker): partition -> adding and removing replicas; {} when the list cannot be had
    (the page shows the partitions without the marks)."""
    host, _, port = cluster.bootstrap.split(",")[0].rpartition(":")
    try:
        moves = await asyncio.to_thread(list_reassignments, host, int(port),
                                        cluster.timeout_s, cluster.security)
    except Exception:  # a detail of the page
        return {}
    return {m["partition"]: {"adding": m["adding"], "removing": m["removing"]}
            for m in moves if m["topic"] == topic}


@router.put("/topics/{topic}/configs", responses=ERRORS)
async def alter_configs(request: Request, topic: str, body: ConfigChanges) -> Any:
    cluster = cluster_of(request)
    if await cluster.topic(topic) is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    if body.configs:
        await cluster.alter_topic_configs(topic, body.configs)
    return {"configs": await cluster.topic_configs(topic)}
