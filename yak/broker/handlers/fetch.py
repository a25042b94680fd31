"""Fetch: read record batches up to the high watermark, long-polling for new data.

If the logs hold fewer than `min_bytes`, the request parks in the broker's purgatory
until an append to one of its partitions or `max_wait` (consumers would spin
otherwise), then reads again. Byte limits follow Kafka: each partition gets at most
`partition_max_bytes`, the response at most `max_bytes`, except that the first
partition with data always returns at least one whole batch, so a batch bigger than
the limits can still be consumed.

Batches read from storage go to the socket as the buffers storage returned (see
`yak.protocol.fetch_codec`); nothing is decoded or concatenated here.

Fetch sessions (KIP-227) are answered with session id 0, which clients accept as "no
session": they keep sending full requests. read_committed readers stop at the last
stable offset and get the aborted transactions in range, when storage tracks them.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from yak.broker import metrics as broker_metrics
from yak.broker.context import RawResponse, RequestContext
from yak.errors import KafkaError
from yak.protocol.fetch_codec import (
    FetchPartitionResult,
    FetchTopicResult,
    encode_fetch_response,
)
from yak.protocol.kio_compat import ErrorCode, timedelta_to_ms

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 16  # v17+ add KRaft replica directory ids; clients use <= 16
LEADER_EPOCH = 0
READ_COMMITTED = 1

_NO_ID = uuid.UUID(int=0)
E_NONE = int(ErrorCode.none)
E_UNKNOWN_TP = int(ErrorCode.unknown_topic_or_partition)
E_UNKNOWN_ID = int(ErrorCode.unknown_topic_id)
E_OUT_OF_RANGE = int(ErrorCode.offset_out_of_range)
E_FENCED = int(ErrorCode.fenced_leader_epoch)
E_UNKNOWN_EPOCH = int(ErrorCode.unknown_leader_epoch)


class _Target:
    """One requested partition, resolved once and re-read after each wake-up."""

    __slots__ = ("name", "partition", "plog", "error", "fetch_offset", "max_bytes",
                 "leader_epoch")

    def __init__(self, name: str, partition: int, plog: Any, error: int, fetch_offset: int,
                 max_bytes: int, leader_epoch: int) -> None:
        self.name = name
        self.partition = partition
        self.plog = plog
        self.error = error
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.leader_epoch = leader_epoch


async def handle(ctx: RequestContext, request: Any) -> RawResponse:
    v = ctx.api_version
    broker = ctx.broker
    topics_mgr = broker.topics
    by_id = v >= 13
    plan: list[tuple[FetchTopicResult, list[_Target]]] = []
    for t in request.topics:
        if by_id:
            info = broker.metadata.by_id(t.topic_id)
            name = info.name if info is not None else ""
            missing = E_UNKNOWN_ID
        else:
            name = t.topic
            missing = E_UNKNOWN_TP
        targets = []
        for p in t.partitions:
            plog = topics_mgr.partition_log(name, p.partition) if name else None
            targets.append(_Target(
                name, p.partition, plog, E_NONE if plog is not None else missing,
                p.fetch_offset, p.partition_max_bytes,
                getattr(p, "current_leader_epoch", -1),
            ))
        plan.append((FetchTopicResult(name, getattr(t, "topic_id", _NO_ID) or _NO_ID), targets))

    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    max_wait_s = timedelta_to_ms(request.max_wait) / 1000
    min_bytes = request.min_bytes
    max_bytes = request.max_bytes
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_s
    while True:
        results, total, errors = _read_all(plan, max_bytes, committed)
        remaining = deadline - loop.time()
        if total >= min_bytes or errors or remaining <= 0 or not plan:
            break
        keys = [(tg.name, tg.partition) for _, targets in plan for tg in targets]
        if not await broker.purgatory.wait(keys, remaining):
            results, total, errors = _read_all(plan, max_bytes, committed)
            break
    broker_metrics.record_fetch(results)
    buffers, size = encode_fetch_response(v, results, 0, 0, 0)
    return RawResponse(buffers, size, flexible_header=v >= 12)


def _read_all(
    plan: list[tuple[FetchTopicResult, list[_Target]]], max_bytes: int, committed: bool
) -> tuple[list[FetchTopicResult], int, bool]:
    total = 0
    errors = False
    out: list[FetchTopicResult] = []
    for topic, targets in plan:
        parts = []
        for tg in targets:
            res = _read_partition(tg, max_bytes - total, total == 0, committed)
            total += res.records_size
            if res.error_code:
                errors = True
            parts.append(res)
        out.append(FetchTopicResult(topic.name, topic.topic_id, parts))
    return out, total, errors


def _read_partition(tg: _Target, budget: int, first: bool, committed: bool) -> FetchPartitionResult:
    if tg.error:
        return FetchPartitionResult(tg.partition, tg.error)
    plog = tg.plog
    if tg.leader_epoch >= 0 and tg.leader_epoch != LEADER_EPOCH:
        code = E_FENCED if tg.leader_epoch < LEADER_EPOCH else E_UNKNOWN_EPOCH
        return FetchPartitionResult(tg.partition, code)
    hw = plog.high_watermark
    lso = _last_stable_offset(plog, hw)
    log_start = plog.log_start_offset
    offset = tg.fetch_offset
    if offset < log_start or offset > plog.log_end_offset:
        return FetchPartitionResult(tg.partition, E_OUT_OF_RANGE, hw, lso, log_start)
    upper = lso if committed else hw
    limit = min(tg.max_bytes, budget)
    aborted: list[tuple[int, int]] | None = None
    if offset >= upper or (limit <= 0 and not first):
        return FetchPartitionResult(tg.partition, E_NONE, hw, lso, log_start,
                                    [] if committed else None, -1, [], 0)
    try:
        rr = plog.read(offset, max(limit, 0), max_offset=upper, min_one_message=first)
    except KafkaError as e:
        return FetchPartitionResult(tg.partition, int(e.code), hw, lso, log_start)
    buffers, size = _buffers_of(rr)
    if committed:
        aborted = _aborted(plog, offset, upper)
    return FetchPartitionResult(tg.partition, E_NONE, hw, lso, log_start, aborted, -1,
                                buffers, size)


def _last_stable_offset(plog: Any, hw: int) -> int:
    lso = getattr(plog, "last_stable_offset", None)
    if lso is None:
        return hw
    return min(lso() if callable(lso) else lso, hw)


def _aborted(plog: Any, start: int, upper: int) -> list[tuple[int, int]]:
    collect = getattr(plog, "aborted_transactions", None)
    if collect is None:
        return []
    return [(a[0], a[1]) for a in collect(start, upper)]


def _buffers_of(rr: Any) -> tuple[list[Any], int]:
    """Storage's ReadResult: buffers go out as they are, never joined."""
    return rr.buffers, rr.size
