"""DeleteRecords: move a partition's log start offset forward (`kafka-delete-records`).

Offset -1 means "up to the high watermark" (Kafka's DeleteRecordsRequest.HIGH_WATERMARK);
beyond the high watermark is OFFSET_OUT_OF_RANGE, since deleting records that are not
yet committed would hide them from consumers that have not read them (the partition
layer's rule). The answer carries the new low watermark (log start offset).
"""

from __future__ import annotations

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
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            low = -1
            try:
                require_topic(ctx, AclOperation.DELETE, topic.name)
                low = replicas.delete_records(topic.name, p.partition_index, p.offset)
                err = None
            except Exception as exc:
                err = exc
            code, _ = outcome(err)
            partitions.append(
                build(
                    m.DeleteRecordsPartitionResult,
                    partition_index=p.partition_index,
                    low_watermark=low,
                    error_code=code,
                )
            )
        topics.append(
            build(m.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(partitions))
        )
    return build(m.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))
