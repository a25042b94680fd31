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
import logging
import struct
from typing import Any

from yak.broker.context import RawResponse, RequestContext
from yak.broker.handlers.metadata import INTERNAL_TOPICS
from yak.errors import DuplicateSequenceError, KafkaError
from yak.protocol import records
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.produce_codec import (
    ProducePartitionResult,
    ProduceRequestData,
    decode_produce_request,
    encode_produce_response,
)

API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 13

log = logging.getLogger(__name__)

LEADER_EPOCH = 0


def decode_request(ctx: RequestContext, body: memoryview) -> ProduceRequestData:
    return decode_produce_request(ctx.api_version, body)


# batchLength, magic and attributes: all the header `_check_batch` needs to read.
_FRAMING = struct.Struct(">8xi4xb4xh")


def _check_batch(data: memoryview, max_bytes: int) -> None:
    """The checks storage cannot make: one batch, not a control batch, size limit.

    Reads three header fields with one unpack; magic, framing and CRC are left to
    storage's validation, which runs next, so the header is not parsed twice per batch.
    """
    if len(data) > max_bytes:
        raise _Fail(ErrorCode.message_too_large,
                    f"batch of {len(data)} bytes exceeds max.message.bytes {max_bytes}")
    if len(data) < records.HEADER_SIZE:
        raise _Fail(ErrorCode.corrupt_message, "truncated record batch")
    batch_length, magic, attributes = _FRAMING.unpack_from(data, 0)
    if magic != records.MAGIC or batch_length < records.HEADER_SIZE - records.LOG_OVERHEAD:
        return  # storage refuses it with CORRUPT_MESSAGE
    size = batch_length + records.LOG_OVERHEAD
    if size != len(data):
        if size > len(data):
            raise _Fail(ErrorCode.corrupt_message, "record batch truncated")
        raise _Fail(ErrorCode.invalid_record,
                    "Produce v3+ requests must carry exactly one record batch per partition")
    if attributes & records.CONTROL_BIT:
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
    results: list[tuple[Any, Any, list[ProducePartitionResult]]] = []
    syncs: list[tuple[Any, int, ProducePartitionResult]] = []

    if acks not in (0, 1, -1):
        code = ErrorCode.invalid_required_acks
        for t in request.topics:
            results.append((t.name, t.topic_id,
                            [ProducePartitionResult(i, code) for i, _ in t.partitions]))
        return _response(ctx, results)

    for t in request.topics:
        name = t.name
        if name is None and t.topic_id is not None:
            info = broker.metadata.by_id(t.topic_id)
            name = info.name if info is not None else None
        parts: list[ProducePartitionResult] = []
        if name is None:
            parts = [ProducePartitionResult(i, ErrorCode.unknown_topic_id) for i, _ in t.partitions]
            results.append((t.name, t.topic_id, parts))
            continue
        if name in INTERNAL_TOPICS:
            # Coordinators write these through their own log interface; a client never may.
            parts = [ProducePartitionResult(i, ErrorCode.invalid_topic_exception,
                                            error_message=f"Cannot append to internal topic {name}")
                     for i, _ in t.partitions]
            results.append((t.name, t.topic_id, parts))
            continue
        for index, data in t.partitions:
            plog = topics_mgr.partition_log(name, index)
            if plog is None:
                parts.append(ProducePartitionResult(index, ErrorCode.unknown_topic_or_partition))
                continue
            if data is None:
                parts.append(ProducePartitionResult(index, ErrorCode.invalid_record,
                                                    error_message="null records"))
                continue
            try:
                _check_batch(data, plog.config.max_message_bytes)
                result = plog.append_as_leader(data, LEADER_EPOCH)
            except _Fail as e:
                parts.append(ProducePartitionResult(index, e.code, error_message=e.message))
                continue
            except DuplicateSequenceError as e:
                # A retry of a batch already in the log: success, with the original offset
                # (and, like the original, only once it is durable if the topic asks for it).
                res = ProducePartitionResult(index, ErrorCode.none, e.base_offset,
                                             e.log_append_time, plog.log_start_offset)
                parts.append(res)
                if acks == -1 and not plog.config.write_caching:
                    syncs.append((plog, e.last_offset + 1, res))
                continue
            except KafkaError as e:
                parts.append(ProducePartitionResult(index, e.code, error_message=e.message))
                continue
            except Exception:
                log.exception("append to %s-%d failed", name, index)
                parts.append(ProducePartitionResult(index, ErrorCode.kafka_storage_error))
                continue
            # One broker: the ISR is the leader alone, so the high watermark follows the
            # log end offset as soon as the append returns.
            plog.update_high_watermark(result.last_offset + 1)
            purgatory.notify(name, index)
            res = ProducePartitionResult(index, ErrorCode.none, result.base_offset,
                                         result.log_append_time, result.log_start_offset)
            parts.append(res)
            if acks == -1 and not plog.config.write_caching:
                syncs.append((plog, result.last_offset + 1, res))
        results.append((t.name, t.topic_id, parts))

    if syncs:
        outcomes = await asyncio.gather(
            *(broker.sync(plog, offset) for plog, offset, _ in syncs), return_exceptions=True
        )
        for (plog, _, res), outcome in zip(syncs, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                # Written but not durable: the client must not take it as acknowledged.
                log.error("fsync of %s-%d failed: %r", plog.topic, plog.partition, outcome)
                res.error_code = ErrorCode.kafka_storage_error
    if acks == 0:
        return None
    return _response(ctx, results)


def _response(
    ctx: RequestContext, results: list[tuple[Any, Any, list[ProducePartitionResult]]]
) -> RawResponse:
    for _, _, parts in results:
        for p in parts:
            if p.error_code == 0:
                p.error_message = None
    body = encode_produce_response(ctx.api_version, results)
    return RawResponse([body], len(body), flexible_header=ctx.api_version >= 9)
