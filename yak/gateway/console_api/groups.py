"""The Consumer groups pages' API: the group list (lag and members per group), one
group (members, assignment, lag per partition), and the actions on an empty group: reset
its offsets (preview, then apply), delete its offsets on a topic, delete the group."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import Request, Response
from pydantic import BaseModel, Field

from yak.gateway import errors as E
from yak.gateway.cluster import ClusterClient, ClusterError
from yak.gateway.console_api.common import ERRORS, TOPIC_NAME, cluster_of, page_router
from yak.gateway.errors import MAX_SAFE_INT, RestError

router = page_router()


@router.get("/groups", responses=ERRORS)
async def groups(request: Request) -> Any:
    cluster = cluster_of(request)
    rows = await cluster.groups()

    async def fill(row: dict[str, Any]) -> None:
        try:
            lag = await cluster.group_lag(row["group_id"])
            row["lag"] = sum(r["lag"] for r in lag)
            row["partitions"] = len(lag)
        except ClusterError:
            row["lag"] = None
        try:
            row["members"] = len((await cluster.describe_group(row["group_id"]))["members"])
        except ClusterError:
            row["members"] = None

    await asyncio.gather(*(fill(r) for r in rows))
    return rows


@router.get("/groups/{group}", responses=ERRORS)
async def group_detail(request: Request, group: str) -> Any:
    cluster = cluster_of(request)
    known = {g["group_id"] for g in await cluster.groups()}
    if group not in known:
        raise RestError(404, 40405, "Consumer group not found.")
    desc, lag = await asyncio.gather(cluster.describe_group(group), cluster.group_lag(group))
    desc["lag"] = lag
    desc["total_lag"] = sum(r["lag"] for r in lag)
    return desc


# ------------------------------------------------------------------ group offsets: reset, delete

RESET_MODES = ("earliest", "latest", "offset", "timestamp", "shift")


class _ResetBase(BaseModel):
    topic: str = Field(pattern=TOPIC_NAME)
    partitions: list[int] | None = None
    apply: bool = False


class ResetToEnd(_ResetBase):
    to: Literal["earliest", "latest"]
    value: None = None


class ResetToOffset(_ResetBase):
    to: Literal["offset"]
    value: int = Field(ge=0, le=MAX_SAFE_INT)  # clamped to the log


class ResetToTimestamp(_ResetBase):
    to: Literal["timestamp"]
    value: int = Field(ge=0, le=MAX_SAFE_INT)  # ms since the epoch


class ResetShift(_ResetBase):
    to: Literal["shift"]
    value: int = Field(ge=-MAX_SAFE_INT, le=MAX_SAFE_INT)  # negative moves back


# One model per mode, so the OpenAPI document says which modes need which value (a
# request the schema allows is one the server accepts).
ResetBody = Annotated[ResetToEnd | ResetToOffset | ResetToTimestamp | ResetShift,
                      Field(discriminator="to")]


async def _empty_group(cluster: ClusterClient, group: str, doing: str) -> dict[str, Any]:
    """The group, described; refused (409) while it has active members: Kafka takes
    offset changes only for an empty group (a live member would overwrite them)."""
    known = {g["group_id"] for g in await cluster.groups()}
    if group not in known:
        raise RestError(404, 40405, "Consumer group not found.")
    desc = await cluster.describe_group(group)
    if desc["members"]:
        raise RestError(409, 40901, f"cannot {doing} of group {group!r}: it is "
                        f"{desc['state']} with {len(desc['members'])} active member(s); "
                        "stop its consumers first (Kafka requires the group to be empty)")
    return desc


@router.post("/groups/{group}/offsets/reset", responses=ERRORS)
async def reset_group_offsets(request: Request, group: str, body: ResetBody) -> Any:
    """The group's committed offsets on one topic moved to the earliest or latest offset,
    an offset, a timestamp's offset, or shifted by N (clamped to the log). Without
    `apply`, a preview: current and new offset per partition, nothing committed."""
    cluster = cluster_of(request)
    tm = await cluster.topic(body.topic)
    if tm is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    parts = sorted(tm.partitions)
    if body.partitions:
        missing = sorted(set(body.partitions) - set(parts))
        if missing:
            raise RestError(404, E.PARTITION_NOT_FOUND,
                            f"topic {body.topic!r} has no partition {missing[0]}")
        parts = sorted(set(body.partitions))
    desc = await _empty_group(cluster, group, "reset the offsets")
    tps = [(body.topic, p) for p in parts]
    current, marks = await asyncio.gather(cluster.group_offsets(group), cluster.watermarks(tps))

    def clamp(tp: tuple[str, int], off: int) -> int:
        return min(max(off, marks[tp].log_start_offset), marks[tp].high_watermark)

    target: dict[tuple[str, int], int] = {}
    v = body.value or 0
    if body.to == "timestamp":
        found = await asyncio.gather(*(cluster.offset_for_time(t, p, v) for t, p in tps))
        # No record at or after the time: the end of the log, as Kafka's tool does.
        target = {tp: (o if o >= 0 else marks[tp].high_watermark)
                  for tp, o in zip(tps, found, strict=True)}
    for tp in tps:
        if body.to == "earliest":
            target[tp] = marks[tp].log_start_offset
        elif body.to == "latest":
            target[tp] = marks[tp].high_watermark
        elif body.to == "offset":
            target[tp] = clamp(tp, v)
        elif body.to == "shift":
            if tp not in current:  # the group's state, not the request: a conflict
                raise RestError(409, E.ILLEGAL_STATE,
                                f"cannot shift the offset of {group!r} on "
                                f"{tp[0]}-{tp[1]}: it has no committed offset (reset it to "
                                "the earliest, the latest or an offset instead)")
            target[tp] = clamp(tp, current[tp] + v)
    if body.apply:
        await _commit_offsets(cluster, group, target)
    rows = [{"topic": t, "partition": p, "current": current.get((t, p)), "new": target[(t, p)],
             "log_start_offset": marks[(t, p)].log_start_offset,
             "high_watermark": marks[(t, p)].high_watermark} for t, p in tps]
    return {"group": group, "state": desc["state"], "topic": body.topic, "to": body.to,
            "value": body.value, "applied": body.apply, "partitions": rows}


async def _commit_offsets(cluster: ClusterClient, group: str,
                          target: dict[tuple[str, int], int]) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as CTP

    req = ConsumerGroupTopicPartitions(
        group, [CTP(t, p, o) for (t, p), o in sorted(target.items())])
    futs = cluster.admin.alter_consumer_group_offsets([req], request_timeout=cluster.timeout_s)
    res = await cluster._future(futs[group])
    for tp in res.topic_partitions:
        if tp.error is not None:
            raise ClusterError(f"{tp.error.name()}: reset offsets of {group!r} on "
                               f"{tp.topic}-{tp.partition}: {tp.error.str()}",
                               tp.error.code(), tp.error.name())


def _offset_delete(cluster: ClusterClient, group: str, topic: str,
                   parts: list[int]) -> tuple[str | None, list[tuple[int, str | None]]]:
    """OffsetDelete (KIP-496) at the group's coordinator, with Yak's own client (no Python
    Kafka client has it): (the group-level error name, [(partition, error name)])."""
    from kio.schema.offset_delete.v0 import request as req_mod
    from kio.schema.offset_delete.v0.response import OffsetDeleteResponse

    from yak.client.connection import BrokerConnectionError
    from yak.client.transactions import TransactionalClient
    from yak.errors import ErrorCode, KafkaError

    request = req_mod.OffsetDeleteRequest(group_id=group, topics=(
        req_mod.OffsetDeleteRequestTopic(name=topic, partitions=tuple(
            req_mod.OffsetDeleteRequestPartition(partition_index=p) for p in parts)),))
    client = TransactionalClient(cluster.bootstrap, client_id="yak-console",
                                 request_timeout_ms=int(cluster.timeout_s * 1000), retries=1,
                                 security=cluster.security)
    try:
        for _ in range(3):  # the coordinator may move between FindCoordinator and the call
            node = client.find_coordinator(group, key_type=0)
            resp = client._connect(node).send(request, OffsetDeleteResponse)
            if resp.error_code not in (ErrorCode.not_coordinator,
                                       ErrorCode.coordinator_not_available,
                                       ErrorCode.coordinator_load_in_progress):
                break
    except BrokerConnectionError as e:
        raise ClusterError(f"the cluster is unreachable: {e.message}", -195,
                           "_TRANSPORT") from None
    except KafkaError as e:
        name = getattr(e.code, "name", str(e.code)).upper()
        raise ClusterError(f"{name}: {e.message}", int(e.code), name) from None
    finally:
        client.close()
    top = None if resp.error_code is ErrorCode.none else resp.error_code.name.upper()
    return top, sorted((int(p.partition_index),
                        None if p.error_code is ErrorCode.none else p.error_code.name.upper())
                       for t in resp.topics for p in t.partitions)


@router.delete("/groups/{group}/offsets/{topic}", responses=ERRORS)
async def delete_group_offsets(request: Request, group: str, topic: str) -> Any:
    """Delete the group's committed offsets on a topic (OffsetDelete). The broker refuses
    (GROUP_SUBSCRIBED_TO_TOPIC) while an active member consumes the topic."""
    cluster = cluster_of(request)
    tm = await cluster.topic(topic)
    if tm is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    known = {g["group_id"] for g in await cluster.groups()}
    if group not in known:
        raise RestError(404, 40405, "Consumer group not found.")
    top, results = await asyncio.to_thread(_offset_delete, cluster, group, topic,
                                           sorted(tm.partitions))
    failed = [(p, e) for p, e in results if e]
    if top or failed:
        name = top or failed[0][1]
        where = topic if top else f"{topic}-{failed[0][0]}"
        raise RestError(409, 40902, f"{name}: the broker refused to delete the offsets of "
                        f"group {group!r} on {where}")
    return {"group": group, "topic": topic,
            "partitions": [{"partition": p, "error": e} for p, e in results]}


@router.delete("/groups/{group}", status_code=204, response_class=Response, responses=ERRORS)
async def delete_group(request: Request, group: str) -> Response:
    """Delete an empty group and its committed offsets (DeleteGroups); the broker refuses
    (NON_EMPTY_GROUP) one with active members."""
    cluster = cluster_of(request)
    known = {g["group_id"] for g in await cluster.groups()}
    if group not in known:
        raise RestError(404, 40405, "Consumer group not found.")
    futs = cluster.admin.delete_consumer_groups([group], request_timeout=cluster.timeout_s)
    try:
        await cluster._future(futs[group])
    except ClusterError as e:
        raise RestError(409, 40903, f"{e.name or 'ERROR'}: the broker refused to delete "
                        f"group {group!r}: {e.message}") from None
    return Response(status_code=204)
