"""OffsetForLeaderEpoch (API 23): where a leader epoch ends in this leader's log.

Clients use it after a leader change (KIP-320): a consumer that read up to some offset
under epoch E asks where E ends on the new leader; if that is below its position the log
was truncated under it (a record it read is gone) and it resets or reports it. Followers
of old brokers used it for truncation (KIP-101/279); Yak's followers learn the same from
Fetch's `diverging_epoch` and need not ask.

Per partition: the client's `current_leader_epoch` is checked (older: FENCED_LEADER_EPOCH,
newer: UNKNOWN_LEADER_EPOCH), only the leader answers (NOT_LEADER_OR_FOLLOWER), and the
answer is (largest epoch <= the one asked, the offset where it ends) — the log end offset
for the current epoch — or (-1, -1) when the log has no such epoch. Authorization as
Kafka's: a replica (replica id >= 0) needs CLUSTER_ACTION, a client DESCRIBE on the topic.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE
from yak.errors import KafkaError
from yak.protocol.kio_compat import ErrorCode, build, schema_module
from yak.security.acl import AclOperation, ResourceType

API_KEY = 23
MIN_VERSION = 2
MAX_VERSION = 4

_DENIED = ErrorCode.topic_authorization_failed
_CLUSTER_DENIED = ErrorCode.cluster_authorization_failed


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("offset_for_leader_epoch", ctx.api_version, "response")
    replicas = ctx.broker.replica_manager
    replica_id = int(getattr(request, "replica_id", -1))
    cluster_ok = True
    if replica_id >= 0 and ctx.broker.authorizer is not None:
        cluster_ok = ctx.cluster_authorized(AclOperation.CLUSTER_ACTION)
    topics = []
    for t in request.topics:
        if not cluster_ok:
            denied: ErrorCode | None = _CLUSTER_DENIED
        elif replica_id < 0 and not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                                  t.topic):
            denied = _DENIED
        else:
            denied = None
        parts = []
        for p in t.partitions:
            epoch, end = -1, -1
            if denied is not None:
                code = denied
            else:
                try:
                    epoch, end = replicas.last_offset_for_leader_epoch(
                        t.topic, p.partition, p.leader_epoch, p.current_leader_epoch)
                    code = ErrorCode.none
                except KafkaError as e:
                    code = e.code
            parts.append(build(m.EpochEndOffset, error_code=code, partition=p.partition,
                               leader_epoch=epoch, end_offset=end))
        topics.append(build(m.OffsetForLeaderTopicResult, topic=t.topic,
                            partitions=tuple(parts)))
    return build(m.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE,
                 topics=tuple(topics))
