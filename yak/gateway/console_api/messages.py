"""The topic page's records: browse one partition or all of them (from an offset, a
timestamp, the earliest or the latest records) and produce one record.

A browse reads with a short-lived aiokafka consumer of no group, bounded by
`BROWSE_WAIT_S`, so a slow or empty partition answers with what arrived in time."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from aiokafka import TopicPartition
from fastapi import Query, Request
from pydantic import BaseModel, Field

from yak.gateway import errors as E
from yak.gateway.cluster import ClusterClient
from yak.gateway.console_api.common import ERRORS, cluster_of, core_of, page_router
from yak.gateway.core import OutRecord
from yak.gateway.core.formats import b64 as _b64
from yak.gateway.core.formats import from_b64
from yak.gateway.errors import MAX_SAFE_INT, RestError

router = page_router()

MAX_BROWSE = 500
BROWSE_WAIT_S = 3.0


class ProduceBody(BaseModel):
    key: str | None = None
    value: str | None = None
    partition: int | None = Field(default=None, ge=0, le=2**31 - 1)
    headers: dict[str, str] = Field(default_factory=dict)
    encoding: str = Field(default="text", pattern="^(text|base64)$")


@router.get("/topics/{topic}/messages", responses=ERRORS)
async def browse(
    request: Request, topic: str,
    partition: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    offset: Annotated[int | None, Query(ge=-2, le=MAX_SAFE_INT)] = None,
    timestamp: Annotated[int | None, Query(ge=0, le=MAX_SAFE_INT)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_BROWSE)] = 50,
    all_partitions: Annotated[bool, Query(alias="all")] = False,
) -> Any:
    """Records of one partition from `offset` (default: the last `limit`) or `timestamp`;
    with `all=true`, of every partition of the topic, in timestamp order: the first `limit`
    from `timestamp` (or from the start, with `offset=-2`), or the last `limit`."""
    cluster = cluster_of(request)
    tm = await cluster.topic(topic)
    if tm is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    if all_partitions:
        if offset is not None and offset not in (-1, -2):
            raise RestError(422, 42207, "across all partitions, seek by timestamp, or from "
                            "the earliest (offset=-2) or latest (offset=-1) records")
        return await _browse_all(cluster, topic, sorted(tm.partitions), timestamp,
                                 earliest=offset == -2, limit=limit)
    if partition not in tm.partitions:
        raise RestError(404, E.PARTITION_NOT_FOUND, "Partition not found.")
    m = (await cluster.watermarks([(topic, partition)]))[(topic, partition)]
    if timestamp is not None:
        start = await cluster.offset_for_time(topic, partition, timestamp)
        if start < 0:
            start = m.high_watermark
    elif offset is None or offset == -1:
        start = max(m.high_watermark - limit, m.log_start_offset)
    elif offset == -2:
        start = m.log_start_offset
    else:
        if offset < m.log_start_offset or offset > m.high_watermark:
            raise RestError(
                422, 42207,
                f"offset {offset} is outside the partition's range "
                f"[{m.log_start_offset}, {m.high_watermark}]",
            )
        start = offset
    messages = await _read(cluster, topic, partition, start, m.high_watermark, limit)
    return {
        "topic": topic, "partition": partition, "start": start,
        "log_start_offset": m.log_start_offset, "high_watermark": m.high_watermark,
        "messages": messages,
    }


async def _browse_all(cluster: ClusterClient, topic: str, partitions: list[int],
                      timestamp: int | None, earliest: bool, limit: int) -> dict[str, Any]:
    """Every partition read from its start point (the offset of `timestamp`, its log
    start, or `limit` before its high watermark), merged in timestamp order."""
    tps = [(topic, p) for p in partitions]
    marks = await cluster.watermarks(tps)
    starts: dict[int, int] = {}
    if timestamp is not None:
        found = await asyncio.gather(*(cluster.offset_for_time(topic, p, timestamp)
                                       for p in partitions))
        for p, off in zip(partitions, found, strict=True):
            hw = marks[(topic, p)].high_watermark
            starts[p] = hw if off < 0 else off
    else:
        for p in partitions:
            m = marks[(topic, p)]
            starts[p] = (m.log_start_offset if earliest
                         else max(m.high_watermark - limit, m.log_start_offset))
    ends = {p: marks[(topic, p)].high_watermark for p in partitions}
    want = {p: min(ends[p] - starts[p], limit) for p in partitions if ends[p] > starts[p]}
    out = await _read_many(cluster, topic, starts, ends, want) if want else []
    out.sort(key=lambda r: (r["timestamp"], r["partition"], r["offset"]))
    out = out[-limit:] if timestamp is None and not earliest else out[:limit]
    return {
        "topic": topic, "partition": None, "all": True, "timestamp": timestamp,
        "partitions": [{"partition": p, "start": starts[p],
                        "log_start_offset": marks[(topic, p)].log_start_offset,
                        "high_watermark": ends[p]} for p in partitions],
        "messages": out,
    }


async def _read_many(cluster: ClusterClient, topic: str, starts: dict[int, int],
                     ends: dict[int, int], want: dict[int, int]) -> list[dict[str, Any]]:
    consumer = await cluster.start_consumer(None, "yak-console",
                                            max_partition_fetch_bytes=1024 * 1024)
    got: dict[int, list[dict[str, Any]]] = {p: [] for p in want}
    try:
        tps = {p: TopicPartition(topic, p) for p in want}
        consumer.assign(list(tps.values()))
        for p, tp in tps.items():
            consumer.seek(tp, starts[p])
        deadline = time.monotonic() + BROWSE_WAIT_S
        while time.monotonic() < deadline:
            open_ = [tp for p, tp in tps.items()
                     if len(got[p]) < want[p] and (not got[p] or got[p][-1]["offset"] < ends[p] - 1)]
            if not open_:
                break
            batch = await consumer.getmany(*open_, timeout_ms=500, max_records=MAX_BROWSE)
            for tp, records in batch.items():
                for r in records:
                    if len(got[tp.partition]) >= want[tp.partition]:
                        break
                    got[tp.partition].append({
                        "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
                        "timestamp_type": r.timestamp_type,
                        "key": _b64(r.key), "value": _b64(r.value),
                        "headers": [[k, _b64(v)] for k, v in (r.headers or ())],
                    })
    finally:
        await consumer.stop()
    return [r for rows in got.values() for r in rows]


async def _read(cluster: ClusterClient, topic: str, partition: int, start: int, end: int,
                limit: int) -> list[dict[str, Any]]:
    if start >= end:
        return []
    consumer = await cluster.start_consumer(None, "yak-console",
                                            max_partition_fetch_bytes=1024 * 1024)
    out: list[dict[str, Any]] = []
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + BROWSE_WAIT_S
        while len(out) < limit and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=500, max_records=limit - len(out))
            for r in batch.get(tp, []):
                out.append({
                    "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
                    "timestamp_type": r.timestamp_type,
                    "key": _b64(r.key), "value": _b64(r.value),
                    "headers": [[k, _b64(v)] for k, v in (r.headers or ())],
                })
            if out and out[-1]["offset"] >= end - 1:
                break
    finally:
        await consumer.stop()
    return out[:limit]


@router.post("/topics/{topic}/messages", status_code=201, responses=ERRORS)
async def produce(request: Request, topic: str, body: ProduceBody) -> Any:
    core = core_of(request)
    tm = await core.topic(topic)
    if body.partition is not None and body.partition not in tm.partitions:
        raise RestError(404, E.PARTITION_NOT_FOUND, "Partition not found.")

    def enc(s: str | None) -> bytes | None:
        if s is None or body.encoding != "base64":
            return None if s is None else s.encode()
        return from_b64(s)

    (res,) = await core.produce(topic, [OutRecord(
        enc(body.key), enc(body.value), body.partition,
        [(k, v.encode()) for k, v in body.headers.items()],
    )])
    if res.error is not None:
        raise res.error
    return {"topic": topic, "partition": res.partition, "offset": res.offset,
            "timestamp": res.timestamp_ms}
