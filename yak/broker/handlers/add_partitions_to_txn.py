"""AddPartitionsToTxn: partitions join a producer's ongoing transaction.

v0-3 come from producers: one transaction, one error for all its partitions (or, if some
do not exist or may not be written, UNKNOWN_TOPIC_OR_PARTITION / TOPIC_AUTHORIZATION_FAILED
for those and OPERATION_NOT_ATTEMPTED for the rest). v4 is the broker-to-broker batched
form (KIP-890 part 1): several transactions, each either added or, with `verify_only`,
only checked (is the partition in the ongoing transaction? TRANSACTION_ABORTABLE if not),
which is how a partition leader on another broker verifies a transactional batch before
appending it; it needs CLUSTER_ACTION, as in Kafka. v5 belongs to transaction version 2,
which Yak does not offer.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response, response_module
from yak.broker.handlers._txn import coordinator_or_error, may_write_txn_id, wire_error
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 4


def _topic_results(mod: Any, results: dict[tuple[str, int], ErrorCode]) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), code in results.items():
        by_topic.setdefault(topic, []).append(
            build(mod.AddPartitionsToTxnPartitionResult, partition_index=p,
                  partition_error_code=code))
    return tuple(build(mod.AddPartitionsToTxnTopicResult, name=t, results_by_partition=tuple(ps))
                 for t, ps in by_topic.items())


def _partitions(topics: Any) -> list[tuple[str, int]]:
    return [(t.name, int(p)) for t in topics for p in t.partitions]


async def _add(ctx: RequestContext, txn_id: str, pid: int, epoch: int,
               tps: list[tuple[str, int]], verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
    if not may_write_txn_id(ctx, txn_id):
        return {tp: ErrorCode.transactional_id_authorization_failed for tp in tps}
    denied = {tp for tp in tps
              if not ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, tp[0])}
    if denied:
        return {tp: ErrorCode.topic_authorization_failed if tp in denied
                else ErrorCode.operation_not_attempted for tp in tps}
    coord = await coordinator_or_error(ctx)
    if isinstance(coord, ErrorCode):
        return {tp: coord for tp in tps}
    if verify_only:
        results = coord.verify_partitions(txn_id, pid, epoch, tps)
    else:
        results = await coord.add_partitions_to_txn(txn_id, pid, epoch, tps)
    return {tp: wire_error(ctx, code) for tp, code in results.items()}


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ctx, "add_partitions_to_txn")
    if ctx.api_version < 4:
        tps = _partitions(request.v3_and_below_topics)
        results = await _add(ctx, request.v3_and_below_transactional_id,
                             int(request.v3_and_below_producer_id),
                             int(request.v3_and_below_producer_epoch), tps, False)
        return response(ctx, results_by_topic_v3_and_below=_topic_results(mod, results))
    if not ctx.cluster_authorized(AclOperation.CLUSTER_ACTION):
        return response(ctx, error_code=ErrorCode.cluster_authorization_failed,
                        results_by_transaction=())
    out = []
    for txn in request.transactions:
        tps = _partitions(txn.topics)
        results = await _add(ctx, txn.transactional_id, int(txn.producer_id),
                             int(txn.producer_epoch), tps, bool(txn.verify_only))
        out.append(build(mod.AddPartitionsToTxnResult, transactional_id=txn.transactional_id,
                         topic_results=_topic_results(mod, results)))
    return response(ctx, error_code=ErrorCode.none, results_by_transaction=tuple(out))
