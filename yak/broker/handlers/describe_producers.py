"""DescribeProducers: the producers a partition leader knows (id, epoch, last sequence
and timestamp, coordinator epoch, the first offset of the transaction each has open here),
as `kafka-transactions.sh describe-producers` and `find-hanging` use it. Needs READ on the
topic, as in Kafka; a partition not led here is NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response, response_module
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ctx, "describe_producers")
    replicas = ctx.broker.replica_manager
    topics = []
    for t in request.topics:
        allowed = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, t.name)
        parts = []
        for index in t.partition_indexes:
            p = replicas.get_partition(t.name, int(index))
            producers: tuple[Any, ...] = ()
            if not allowed:
                code = ErrorCode.topic_authorization_failed
            elif p is None:
                code = ErrorCode.unknown_topic_or_partition
            elif not p.is_leader:
                code = ErrorCode.not_leader_or_follower
            else:
                code = ErrorCode.none
                producers = tuple(
                    build(mod.ProducerState, producer_id=pid, producer_epoch=epoch,
                          last_sequence=seq, last_timestamp=ts, coordinator_epoch=coord,
                          current_txn_start_offset=first)
                    for pid, epoch, seq, ts, coord, first in p.active_producers())
            parts.append(build(mod.PartitionResponse, partition_index=index, error_code=code,
                               error_message=None, active_producers=producers))
        topics.append(build(mod.TopicResponse, name=t.name, partitions=tuple(parts)))
    return response(ctx, topics=tuple(topics))
