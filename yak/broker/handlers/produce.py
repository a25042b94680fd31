"""Produce: validate each partition's batch, append it as leader, answer per partition.

Partitions are independent: a bad CRC or an oversized batch fails that partition only
(Kafka's per-partition error codes) while the others in the same request are appended.
The request body is decoded by `yak.protocol.produce_codec` so the records reach
storage as views of the received frame, never copied in Python.

Validation here is what only the broker knows: v3+ requests carry exactly one batch per
partition, clients may not write control batches, and a batch over the topic's
`max.message.bytes` is refused before storage sees it. The CRC, producer-state
(idempotence) and timestamp checks belong to storage, which raises `yak.errors`
exceptions before writing a byte. A compressed batch is never decompressed on this
path, so a compression bomb costs what its compressed size costs.

acks=0 gets no response; acks=-1 on a `write.caching=false` topic waits for the fsync
(group-committed by storage, run in the broker's io pool) before answering. On one
broker the ISR is just the leader, so acks=-1 otherwise equals acks=1.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from yak.broker.context import RequestContext
from yak.errors import DuplicateSequenceError, KafkaError
from yak.protocol import kio_compat, records
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.produce_codec import ProduceRequestData, decode_produce_request

API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 13

log = logging.getLogger(__name__)

_ZERO = datetime.timedelta(0)
LEADER_EPOCH = 0


def decode_request(ctx: RequestContext, body: memoryview) -> ProduceRequestData:
    return decode_produce_request(ctx.api_version, body)


class _PartitionResult:
    __slots__ = ("index", "code", "base_offset", "log_append_time", "log_start_offset",
                 "message")

    def __init__(self, index: int, code: ErrorCode, base_offset: int = -1,
                 log_append_time: int = -1, log_start_offset: int = -1,
                 message: str | None = None) -> None:
        self.index = index
        self.code = code
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self.message = message


def _check_batch(data: memoryview, max_bytes: int) -> None:
    """The checks storage cannot make: one batch, not a control batch, size limit."""
    if len(data) > max_bytes:
        raise _Fail(ErrorCode.message_too_large,
                    f"batch of {len(data)} bytes exceeds max.message.bytes {max_bytes}")
    if len(data) < records.HEADER_SIZE:
        raise _Fail(ErrorCode.corrupt_message, "truncated record batch")
    try:
        header = records.parse_header(data, 0)
    except KafkaError as e:
        raise _Fail(e.code, e.message) from None
    if header.size != len(data):
        if header.size > len(data):
            raise _Fail(ErrorCode.corrupt_message, "record batch truncated")
        raise _Fail(ErrorCode.invalid_record,
                    "Produce v3+ requests must carry exactly one record batch per partition")
    if header.is_control:
        raise _Fail(ErrorCode.invalid_record, "clients may not write control batches")


class _Fail(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def handle(ctx: RequestContext, request: ProduceRequestData) -> Any:
    broker = ctx.broker
    topics_mgr = broker.topics
    purgatory = broker.purgatory
    acks = request.acks
    results: list[tuple[Any, Any, list[_PartitionResult]]] = []
    syncs: list[tuple[Any, int]] = []

    if acks not in (0, 1, -1):
        code = ErrorCode.invalid_required_acks
        for t in request.topics:
            results.append((t.name, t.topic_id,
                            [_PartitionResult(i, code) for i, _ in t.partitions]))
        return _response(ctx, results)

    for t in request.topics:
        name = t.name
        if name is None and t.topic_id is not None:
            info = broker.metadata.by_id(t.topic_id)
            name = info.name if info is not None else None
        parts: list[_PartitionResult] = []
        if name is None:
            parts = [_PartitionResult(i, ErrorCode.unknown_topic_id) for i, _ in t.partitions]
            results.append((t.name, t.topic_id, parts))
            continue
        for index, data in t.partitions:
            plog = topics_mgr.partition_log(name, index)
            if plog is None:
                parts.append(_PartitionResult(index, ErrorCode.unknown_topic_or_partition))
                continue
            if data is None:
                parts.append(_PartitionResult(index, ErrorCode.invalid_record,
                                              message="null records"))
                continue
            try:
                _check_batch(data, plog.config.max_message_bytes)
                result = plog.append_as_leader(data, LEADER_EPOCH)
            except _Fail as e:
                parts.append(_PartitionResult(index, e.code, message=e.message))
                continue
            except DuplicateSequenceError as e:
                # A retry of a batch already in the log: success, with the original offset.
                parts.append(_PartitionResult(index, ErrorCode.none, e.base_offset,
                                              e.log_append_time, plog.log_start_offset))
                continue
            except KafkaError as e:
                parts.append(_PartitionResult(index, e.code, message=e.message))
                continue
            except Exception:
                log.exception("append to %s-%d failed", name, index)
                parts.append(_PartitionResult(index, ErrorCode.kafka_storage_error))
                continue
            # One broker: the ISR is the leader alone, so the high watermark follows the
            # log end offset as soon as the append returns.
            plog.update_high_watermark(result.last_offset + 1)
            purgatory.notify(name, index)
            if acks == -1 and not plog.config.write_caching:
                syncs.append((plog, result.last_offset + 1))
            parts.append(_PartitionResult(index, ErrorCode.none, result.base_offset,
                                          result.log_append_time, result.log_start_offset))
        results.append((t.name, t.topic_id, parts))

    if syncs:
        outcomes = await asyncio.gather(
            *(broker.sync(plog, offset) for plog, offset in syncs), return_exceptions=True
        )
        failed = {id(plog) for (plog, _), o in zip(syncs, outcomes, strict=True)
                  if isinstance(o, BaseException)}
        if failed:
            # Data written but not durable: the client must not take it as acknowledged.
            log.error("fsync failed for %d partition(s)", len(failed))
            for _, _, parts in results:
                for p in parts:
                    if p.code == ErrorCode.none:
                        p.code = ErrorCode.kafka_storage_error
    if acks == 0:
        return None
    return _response(ctx, results)


def _response(ctx: RequestContext, results: list[tuple[Any, Any, list[_PartitionResult]]]) -> Any:
    mod = kio_compat.schema_module("produce", ctx.api_version, "response")
    part_cls = mod.PartitionProduceResponse
    topic_cls = mod.TopicProduceResponse
    topics = []
    for name, topic_id, parts in results:
        prs = tuple(
            kio_compat.build(
                part_cls,
                index=p.index,
                error_code=p.code,
                base_offset=p.base_offset,
                log_append_time=kio_compat.ms_to_datetime(p.log_append_time),
                log_start_offset=p.log_start_offset,
                record_errors=(),
                error_message=p.message if p.code != ErrorCode.none else None,
            )
            for p in parts
        )
        topics.append(kio_compat.build(topic_cls, name=name, topic_id=topic_id,
                                       partition_responses=prs))
    return kio_compat.build(mod.ProduceResponse, responses=tuple(topics), throttle_time=_ZERO)
