"""ListOffsets: offsets by timestamp, plus Kafka's special timestamps.

-2 earliest (log start offset), -1 latest (high watermark, or the last stable offset
for read_committed), -3 the offset of the record with the largest timestamp (v7+),
-4 earliest local (= earliest: Yak has no tiered storage), -5 latest tiered (= -1 offset,
nothing is tiered). Any other value is the first offset whose timestamp is at or after
it, found through the time index; none -> offset -1 with timestamp -1, as Kafka does.
"""

from __future__ import annotations

import datetime
from typing import Any

from yak.broker.context import RequestContext
from yak.errors import KafkaError
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 10  # v11 adds LATEST_TIERED semantics only; kio max is 11

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
LEADER_EPOCH = 0
READ_COMMITTED = 1

_ZERO = datetime.timedelta(0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = kio_compat.schema_module("list_offsets", ctx.api_version, "response")
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            code, ts, offset = _lookup(ctx, t.name, p, committed)
            parts.append(kio_compat.build(
                mod.ListOffsetsPartitionResponse,
                partition_index=p.partition_index,
                error_code=code,
                timestamp=ts,
                offset=offset,
                leader_epoch=LEADER_EPOCH if code == ErrorCode.none else -1,
                old_style_offsets=(offset,) if offset >= 0 else (),
            ))
        topics.append(kio_compat.build(mod.ListOffsetsTopicResponse, name=t.name,
                                       partitions=tuple(parts)))
    return kio_compat.build(mod.ListOffsetsResponse, throttle_time=_ZERO, topics=tuple(topics))


def _lookup(ctx: RequestContext, topic: str, p: Any, committed: bool) -> tuple[ErrorCode, int, int]:
    plog = ctx.broker.topics.partition_log(topic, p.partition_index)
    if plog is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    epoch = getattr(p, "current_leader_epoch", -1)
    if epoch >= 0 and epoch != LEADER_EPOCH:
        code = ErrorCode.fenced_leader_epoch if epoch < LEADER_EPOCH else ErrorCode.unknown_leader_epoch
        return code, -1, -1
    ts = p.timestamp
    hw = plog.high_watermark
    try:
        if ts == LATEST:
            if committed:
                lso = getattr(plog, "last_stable_offset", None)
                if lso is not None:
                    hw = min(hw, lso() if callable(lso) else lso)
            return ErrorCode.none, -1, hw
        if ts in (EARLIEST, EARLIEST_LOCAL):
            return ErrorCode.none, -1, plog.log_start_offset
        if ts == LATEST_TIERED:
            return ErrorCode.none, -1, -1
        if ts == MAX_TIMESTAMP:
            found = plog.offset_for_timestamp(MAX_TIMESTAMP)
        elif ts < 0:
            return ErrorCode.invalid_request, -1, -1
        else:
            found = plog.offset_for_timestamp(ts)
    except KafkaError as e:
        return e.code, -1, -1
    if found is None:
        return ErrorCode.none, -1, -1
    offset, found_ts = _offset_and_timestamp(found)
    if offset >= hw:
        return ErrorCode.none, -1, -1
    return ErrorCode.none, found_ts, offset


def _offset_and_timestamp(found: Any) -> tuple[int, int]:
    if isinstance(found, tuple):
        return int(found[0]), int(found[1])
    return int(found.offset), int(found.timestamp)
