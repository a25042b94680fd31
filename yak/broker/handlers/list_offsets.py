"""ListOffsets: offsets by timestamp, plus Kafka's special timestamps.

-2 earliest (log start offset), -1 latest (high watermark, or the last stable offset
for read_committed; the log end offset for a follower, replica id >= 0), -3 the offset
of the record with the largest timestamp (v7+),
-4 earliest local (= earliest: Yak has no tiered storage), -5 latest tiered (= -1 offset,
nothing is tiered). Any other value is the first offset whose timestamp is at or after
it, found through the time index; none -> offset -1 with timestamp -1, as Kafka does.
The answer and its leader epoch come from the partition layer, which also checks the
client's current leader epoch.
"""

from __future__ import annotations

import datetime
from typing import Any

from yak.broker.context import RequestContext
from yak.errors import KafkaError
from yak.partition import FetchIsolation
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.security.acl import AclOperation, ResourceType
from yak.security.authorizer import authorization_error

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 10  # v11 adds LATEST_TIERED semantics only; kio max is 11
READ_COMMITTED = 1
EARLIEST_TIMESTAMP = -2
LATEST_TIERED_TIMESTAMP = -5

_ZERO = datetime.timedelta(0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = kio_compat.schema_module("list_offsets", ctx.api_version, "response")
    if getattr(request, "replica_id", -1) >= 0:
        isolation = FetchIsolation.LOG_END  # a follower asks for the leader's log end
    elif getattr(request, "isolation_level", 0) == READ_COMMITTED:
        isolation = FetchIsolation.TXN_COMMITTED
    else:
        isolation = FetchIsolation.HIGH_WATERMARK
    replicas = ctx.broker.replica_manager
    topics = []
    for t in request.topics:
        parts = []
        allowed = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
        for p in t.partitions:
            try:
                if not allowed:
                    raise authorization_error(ResourceType.TOPIC)
                if replicas.remote_log is not None and (
                        p.timestamp >= 0
                        or p.timestamp in (EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP)):
                    # Earliest, latest tiered and by time may be answered remotely: from
                    # the metadata this leadership read, so checked (and waited) first.
                    await replicas.wait_remote_log_ready(t.name, p.partition_index)
                offset, ts, epoch = replicas.fetch_offset_for_timestamp(
                    t.name, p.partition_index, p.timestamp, isolation,
                    getattr(p, "current_leader_epoch", -1),
                )
                if p.timestamp >= 0 and replicas.remote_log is not None:
                    # Tiered storage: the record may be older than the local log.
                    offset, ts, epoch = await replicas.remote_offset_for_timestamp(
                        t.name, p.partition_index, p.timestamp, (offset, ts, epoch))
                code = ErrorCode.none
            except KafkaError as e:
                code, offset, ts, epoch = e.code, -1, -1, -1
            parts.append(kio_compat.build(
                mod.ListOffsetsPartitionResponse,
                partition_index=p.partition_index,
                error_code=code,
                timestamp=ts,
                offset=offset,
                leader_epoch=epoch,
                old_style_offsets=(offset,) if offset >= 0 else (),
            ))
        topics.append(kio_compat.build(mod.ListOffsetsTopicResponse, name=t.name,
                                       partitions=tuple(parts)))
    return kio_compat.build(mod.ListOffsetsResponse, throttle_time=_ZERO, topics=tuple(topics))
