"""DescribeTopicPartitions (API 75, KIP-966): topics and their partitions, paged.

What Metadata says about partitions (leader and epoch, replicas, ISR, offline replicas),
for the named topics or every topic (sorted by name), at most
`response_partition_limit` partitions per response; the rest is asked for again from
`next_cursor`. Yak keeps no eligible leader replicas (ELR), so those lists are empty.
Topics the caller may not DESCRIBE are TOPIC_AUTHORIZATION_FAILED when named and left out
when all topics are listed, as Metadata does.
"""

from __future__ import annotations

import uuid
from typing import Any

from yak.broker.context import (
    OPERATIONS_NOT_REQUESTED,
    TOPIC_OPERATIONS,
    RequestContext,
    authorized_operations,
)
from yak.broker.handlers._admin import NO_THROTTLE
from yak.errors import ErrorCode
from yak.partition import INTERNAL_TOPICS, NO_LEADER
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation, ResourceType

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

_NO_ID = uuid.UUID(int=0)
DEFAULT_LIMIT = 2000


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("describe_topic_partitions", ctx.api_version, "response")
    broker = ctx.broker
    topics = broker.topics
    limit = int(request.response_partition_limit or DEFAULT_LIMIT)
    if limit <= 0:
        limit = DEFAULT_LIMIT
    named = bool(request.topics)
    names = (sorted({t.name for t in request.topics}) if named
             else sorted(t.name for t in topics.topics()
                         if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)))
    cursor = request.cursor
    start_topic = cursor.topic_name if cursor is not None else None
    start_partition = int(cursor.partition_index) if cursor is not None else 0
    live = {n.node_id for n in broker.cluster.nodes() if not n.fenced}
    out: list[Any] = []
    next_cursor = None
    budget = limit
    for name in names:
        if start_topic is not None and name < start_topic:
            continue
        first = start_partition if name == start_topic else 0
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            out.append(_error(m, name, ErrorCode.topic_authorization_failed))
            continue
        info = topics.get(name)
        if info is None:
            out.append(_error(m, name, ErrorCode.unknown_topic_or_partition))
            continue
        if budget <= 0:
            next_cursor = build(m.Cursor, topic_name=name, partition_index=first)
            break
        states = topics.partition_states(name)
        parts = []
        for p in range(first, len(states)):
            if budget <= 0:
                next_cursor = build(m.Cursor, topic_name=name, partition_index=p)
                break
            s = states[p]
            parts.append(build(
                m.DescribeTopicPartitionsResponsePartition,
                error_code=(ErrorCode.none if s.leader != NO_LEADER
                            else ErrorCode.leader_not_available),
                partition_index=p, leader_id=s.leader, leader_epoch=s.leader_epoch,
                replica_nodes=s.replicas, isr_nodes=s.isr, eligible_leader_replicas=(),
                last_known_elr=(), offline_replicas=tuple(r for r in s.replicas
                                                          if r not in live)))
            budget -= 1
        out.append(build(
            m.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.none, name=name,
            topic_id=info.topic_id, is_internal=name in INTERNAL_TOPICS,
            partitions=tuple(parts),
            topic_authorized_operations=authorized_operations(
                ctx, ResourceType.TOPIC, name, TOPIC_OPERATIONS)))
        if next_cursor is not None:
            break
    return build(m.DescribeTopicPartitionsResponse, throttle_time=NO_THROTTLE,
                 topics=tuple(out), next_cursor=next_cursor)


def _error(m: Any, name: str, code: ErrorCode) -> Any:
    return build(m.DescribeTopicPartitionsResponseTopic, error_code=code, name=name,
                 topic_id=_NO_ID, is_internal=False, partitions=(),
                 topic_authorized_operations=OPERATIONS_NOT_REQUESTED)
