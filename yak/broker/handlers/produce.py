"""Produce: translate the request into the partition layer's produce append, and answer.

Partitions are independent: a bad CRC or an oversized batch fails that partition only
(Kafka's per-partition error codes) while the others in the same request are appended.
The request body is decoded by `yak.protocol.produce_codec` so the records reach
storage as views of the received frame, never copied in Python.

This handler resolves topic names (or ids), applies authorization and answers; the
policy is the ReplicaManager's (`handle_produce_append`: one batch per partition, no
client control batches, KIP-890 verification of transactional batches under a
VerificationGuard, the connection's order of effects, internal topics, leadership,
`min.insync.replicas`, acks=all) and storage's (size, CRC, producer state, timestamps,
keys on compacted topics). The request's place in its connection's order (`ctx.turn`) is
handed down, so a batch that waits on a remote transaction coordinator is never
overtaken by a later one of the same producer (see yak/partition/ordering.py).

acks=0 gets no response (its appends are still counted in the metrics).
"""

from __future__ import annotations

import logging
from typing import Any

from yak.broker.context import RawResponse, RequestContext
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.produce_codec import (
    ProducePartitionResult,
    ProduceRequestData,
    decode_produce_request,
    encode_produce_response,
)
from yak.security.acl import AclOperation, ResourceType

API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 13

log = logging.getLogger(__name__)


def decode_request(ctx: RequestContext, body: memoryview) -> ProduceRequestData:
    return decode_produce_request(ctx.api_version, body)


async def handle(ctx: RequestContext, request: ProduceRequestData) -> Any:
    broker = ctx.broker
    replicas = broker.replica_manager
    acks = request.acks
    results, entries, slots = _plan(ctx, request)
    # The records are views of the connection's receive buffer: from here only `entries`
    # holds them, and the partition layer empties it once they are in the log, so an
    # acks=all request waiting for its replicas keeps no buffer from being reused (issue 28).
    request.topics = []
    appended = await replicas.handle_produce_append(
        entries, acks, request.timeout_ms, request.transactional_id, ctx.turn)
    for res, r in zip(slots, appended, strict=True):
        if r.info is None:
            res.error_code, res.error_message = r.error, r.error_message
            res.record_errors = r.record_errors
        else:
            info = r.info
            res.base_offset = info.base_offset
            res.log_append_time = info.log_append_time
            res.log_start_offset = info.log_start_offset
    broker.metrics.record_appended(appended)
    quota = broker.quotas.produce
    if quota.enabled:  # producer_byte_rate: the request's size counts (Kafka's)
        ctx.throttle_time_ms = quota.record_and_get_throttle_time_ms(
            ctx.principal, ctx.client_id or "", ctx.request_size)
    if acks == 0:
        return None
    return _response(ctx, results)


def _plan(ctx: RequestContext, request: ProduceRequestData) -> tuple[
        list[tuple[Any, Any, list[ProducePartitionResult]]],
        list[tuple[str, int, memoryview]], list[ProducePartitionResult]]:
    """The response's slots, and the partitions to append with the slot each one's
    result fills. Authorization (Kafka's): WRITE on the transactional id, else every
    partition fails; WRITE on each topic, else its partitions fail. Checked per topic,
    never per record. (A function of its own: its loop variables hold record views,
    which must not outlive it in the handler's frame.)"""
    broker = ctx.broker
    authorizer = broker.authorizer
    denied_all = None
    if authorizer is not None and request.transactional_id is not None and not ctx.authorized(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        denied_all = ErrorCode.transactional_id_authorization_failed
    results: list[tuple[Any, Any, list[ProducePartitionResult]]] = []
    entries: list[tuple[str, int, memoryview]] = []
    slots: list[ProducePartitionResult] = []
    for t in request.topics:
        name = t.name
        if name is None and t.topic_id is not None:
            info = broker.topics.by_id(t.topic_id)
            name = info.name if info is not None else None
        parts: list[ProducePartitionResult] = []
        results.append((t.name, t.topic_id, parts))
        if name is None:
            parts.extend(ProducePartitionResult(i, ErrorCode.unknown_topic_id)
                         for i, _ in t.partitions)
            continue
        if authorizer is not None and (denied_all is not None or not ctx.authorized(
                AclOperation.WRITE, ResourceType.TOPIC, name)):
            code = denied_all or ErrorCode.topic_authorization_failed
            parts.extend(ProducePartitionResult(i, code) for i, _ in t.partitions)
            continue
        for index, data in t.partitions:
            res = ProducePartitionResult(index)
            parts.append(res)
            if data is None:
                res.error_code, res.error_message = ErrorCode.invalid_record, "null records"
                continue
            entries.append((name, index, data))
            slots.append(res)
    return results, entries, slots


def _response(
    ctx: RequestContext, results: list[tuple[Any, Any, list[ProducePartitionResult]]]
) -> RawResponse:
    for _, _, parts in results:
        for p in parts:
            if p.error_code == 0:
                p.error_message = None
    v = ctx.api_version
    body = encode_produce_response(v, results, ctx.throttle_time_ms)
    # v1+ ends with throttle_time_ms (then, v9+, the empty tagged fields' byte)
    offset = None if v < 1 else -5 if v >= 9 else -4
    return RawResponse([body], len(body), flexible_header=v >= 9, throttle_offset=offset)
