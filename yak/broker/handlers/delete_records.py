"""DeleteRecords: move a partition's log start offset forward (`kafka-delete-records`).

Offset -1 means "up to the high watermark" (Kafka's DeleteRecordsRequest.HIGH_WATERMARK);
beyond the high watermark is OFFSET_OUT_OF_RANGE, since deleting records that are not
yet committed would hide them from consumers that have not read them (the partition
layer's rule). The answer carries the new low watermark (log start offset), given once
it is durable: on a tiered partition, once committed to the remote log metadata (a
retriable KAFKA_STORAGE_ERROR or REQUEST_TIMED_OUT if that cannot be done in the request's
timeout).
"""

from __future__ import annotations

import asyncio
from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE, outcome, require_topic
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("delete_records", ctx.api_version, "response")
    replicas = ctx.broker.replica_manager
    timeout_ms = int(request.timeout.total_seconds() * 1000)

    async def one(topic: str, p: Any) -> Any:
        low = -1
        try:
            require_topic(ctx, AclOperation.DELETE, topic)
            low = await replicas.delete_records_acked(topic, p.partition_index, p.offset,
                                                      timeout_ms)
            err = None
        except Exception as exc:
            err = exc
        code, _ = outcome(err)
        return build(
            m.DeleteRecordsPartitionResult,
            partition_index=p.partition_index,
            low_watermark=low,
            error_code=code,
        )

    # Together, each within the request's timeout: a tiered partition answers only once its
    # new start is committed to the remote log metadata.
    results = await asyncio.gather(*(one(topic.name, p) for topic in request.topics
                                     for p in topic.partitions))
    topics = []
    i = 0
    for topic in request.topics:
        n = len(topic.partitions)
        topics.append(
            build(m.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(results[i:i + n]))
        )
        i += n
    return build(m.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))
