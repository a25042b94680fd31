"""Produce: check each partition's batch, append it through the partition layer, answer.

Partitions are independent: a bad CRC or an oversized batch fails that partition only
(Kafka's per-partition error codes) while the others in the same request are appended.
The request body is decoded by `yak.protocol.produce_codec` so the records reach
storage as views of the received frame, never copied in Python.

What is checked here is what the request itself must satisfy: v3+ requests carry
exactly one batch per partition, clients may not write control batches, and a batch
over the topic's `max.message.bytes` is refused before storage sees it. Everything else
is the ReplicaManager's (internal topics, leadership, `min.insync.replicas`, acks=all
waiting for the high watermark and, on `write.caching=false` topics, the fsync) and
storage's (CRC, producer state, timestamps, and on compacted topics records without a
key, refused with KIP-467 record errors). A compressed batch is decompressed on this path
only for that key check on compacted topics, bounded by storage like the cleaner's.

Transactions (KIP-890 part 1): the first transactional batch of a producer's transaction
in a partition is checked with the transaction coordinator before it is appended (is the
partition in the ongoing transaction?), so a batch that arrives after its transaction
ended, or from a fenced producer, cannot start a transaction nobody will ever close; a
failure answers `produce_verification_error` (INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH or
a retriable NOT_ENOUGH_REPLICAS). Later batches of the same transaction are not checked
(the partition already has it open), and the check and the append run without an await
in between, so no marker can slip between them. Non-transactional batches pay nothing.
In a cluster whose coordinator for the transactional id is another broker, the check is
AddPartitionsToTxn v4 (verify_only) sent to it, an await before the append; Kafka's
VerificationGuard, which also closes that window, is not implemented.

acks=0 gets no response (its appends are still counted in the metrics).
"""

from __future__ import annotations

import logging
from typing import Any

from yak.broker.context import RawResponse, RequestContext
from yak.partition import AppendOrigin
from yak.protocol import records
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.produce_codec import (
    ProducePartitionResult,
    ProduceRequestData,
    decode_produce_request,
    encode_produce_response,
)
from yak.security.acl import AclOperation, ResourceType
from yak.txn.coordinator import produce_verification_error

API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 13

log = logging.getLogger(__name__)


def decode_request(ctx: RequestContext, body: memoryview) -> ProduceRequestData:
    return decode_produce_request(ctx.api_version, body)


def _check_batch(data: memoryview, max_bytes: int) -> records.BatchHeader | None:
    """The checks storage cannot make: one batch, not a control batch, size limit.

    Returns the header it parsed, which storage's validation then uses: one parse per
    batch on the produce path. None if the framing is bad (storage refuses the batch
    with CORRUPT_MESSAGE).
    """
    if len(data) > max_bytes:
        raise _Fail(ErrorCode.message_too_large,
                    f"batch of {len(data)} bytes exceeds max.message.bytes {max_bytes}")
    if len(data) < records.HEADER_SIZE:
        raise _Fail(ErrorCode.corrupt_message, "truncated record batch")
    h = records.read_header(data, 0)
    if not h.framing_ok:
        return None
    size = h.batch_length + records.LOG_OVERHEAD
    if size != len(data):
        if size > len(data):
            raise _Fail(ErrorCode.corrupt_message, "record batch truncated")
        raise _Fail(ErrorCode.invalid_record,
                    "Produce v3+ requests must carry exactly one record batch per partition")
    if h.attributes & records.CONTROL_BIT:
        raise _Fail(ErrorCode.invalid_record, "clients may not write control batches")
    return h


def _verify(broker: Any, txn_id: str, h: records.BatchHeader, topic: str,
            index: int) -> ErrorCode:
    """KIP-890 part 1: is this partition in the producer's ongoing transaction?"""
    coordinator = broker.txn_coordinator
    if coordinator is None:
        return ErrorCode.invalid_txn_state
    tp = (topic, index)
    code = coordinator.verify_partitions(txn_id, h.producer_id, h.producer_epoch, [tp])[tp]
    return produce_verification_error(code)


class _Fail(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def handle(ctx: RequestContext, request: ProduceRequestData) -> Any:
    broker = ctx.broker
    replicas = broker.replica_manager
    acks = request.acks
    # Authorization (Kafka's): WRITE on the transactional id, else every partition fails;
    # WRITE on each topic, else its partitions fail. Checked per topic, never per record.
    authorizer = broker.authorizer
    denied_all = None
    if authorizer is not None and request.transactional_id is not None and not ctx.authorized(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        denied_all = ErrorCode.transactional_id_authorization_failed
    txn_id = request.transactional_id
    results: list[tuple[Any, Any, list[ProducePartitionResult]]] = []
    # Partitions to append, and the response slot each one's result fills.
    entries: list[tuple[str, int, memoryview, records.BatchHeader | None]] = []
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
            partition = replicas.get_partition(name, index)
            header = None
            if partition is not None:
                try:
                    header = _check_batch(data, partition.config.max_message_bytes)
                except _Fail as e:
                    res.error_code, res.error_message = e.code, e.message
                    continue
                if header is not None and header.attributes & records.TRANSACTIONAL_BIT:
                    if txn_id is None:  # Kafka refuses these: they could never be ended
                        res.error_code = ErrorCode.transactional_id_authorization_failed
                        res.error_message = "transactional records without a transactional id"
                        continue
                    if not partition.has_ongoing_txn(header.producer_id, header.producer_epoch):
                        locator = broker.coordinators
                        remote = (locator.remote_transaction_coordinator(txn_id)
                                  if locator is not None else None)
                        if remote is None:
                            code = _verify(broker, txn_id, header, name, index)
                        else:  # the coordinator is another broker of the cluster
                            code = produce_verification_error(await locator.verify_remote(
                                remote, txn_id, header.producer_id, header.producer_epoch,
                                name, index))
                        if code is not ErrorCode.none:
                            res.error_code = code
                            res.error_message = f"transactional batch refused: {code.name}"
                            continue
            entries.append((name, index, data, header))
            slots.append(res)

    appended = await replicas.append_records(
        entries, acks, AppendOrigin.CLIENT, request.timeout_ms
    )
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


def _response(
    ctx: RequestContext, results: list[tuple[Any, Any, list[ProducePartitionResult]]]
) -> RawResponse:
    for _, _, parts in results:
        for p in parts:
            if p.error_code == 0:
                p.error_message = None
    body = encode_produce_response(ctx.api_version, results, ctx.throttle_time_ms)
    return RawResponse([body], len(body), flexible_header=ctx.api_version >= 9)
