"""WriteTxnMarkers: append COMMIT/ABORT markers to partitions this broker leads.

The broker-to-broker path of the transaction coordinator (a coordinator on another
broker sends the markers of the partitions led here), also used by admin tools to abort
a hanging transaction (`yak txn abort`, `kafka-transactions.sh abort`). It is the same
local path the coordinator on this broker uses (`PartitionMarkerWriter.write_local`), so a
marker for `__consumer_offsets` completes the transaction's pending offset commits here
too. Needs CLUSTER_ACTION, as in Kafka. v1-2 (the versions Kafka 4 keeps).
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response, response_module
from yak.partition import TxnMarker
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation

API_KEY = 27
MIN_VERSION = 1
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ctx, "write_txn_markers")
    allowed = ctx.cluster_authorized(AclOperation.CLUSTER_ACTION)
    writer = ctx.broker.txn_markers
    results = []
    for m in request.markers:
        markers = [TxnMarker(t.name, int(p), int(m.producer_id), int(m.producer_epoch),
                             int(m.coordinator_epoch), bool(m.transaction_result))
                   for t in m.topics for p in t.partition_indexes]
        if not allowed:
            codes = {(x.topic, x.partition): ErrorCode.cluster_authorization_failed
                     for x in markers}
        elif writer is None:
            codes = {(x.topic, x.partition): ErrorCode.coordinator_not_available
                     for x in markers}
        else:
            codes = await writer.write_local(markers)
        by_topic: dict[str, list[Any]] = {}
        for (topic, p), code in codes.items():
            by_topic.setdefault(topic, []).append(
                build(mod.WritableTxnMarkerPartitionResult, partition_index=p, error_code=code))
        results.append(build(
            mod.WritableTxnMarkerResult, producer_id=m.producer_id,
            topics=tuple(build(mod.WritableTxnMarkerTopicResult, name=t, partitions=tuple(ps))
                         for t, ps in by_topic.items())))
    return response(ctx, markers=tuple(results))
