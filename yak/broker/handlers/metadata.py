"""Metadata: brokers, topics, partitions and their leaders.

Brokers are every registered broker at its endpoint on the listener the request came in
on, with the controller's id (`broker.cluster`: this broker alone, unless it belongs to a
cluster). Each partition's leader, leader epoch, replicas and ISR are its record in the
metadata, and offline replicas those not registered. Unknown topics are auto-created when
both the broker (`auto.create.topics.enable`)
and the request (`allow_auto_topic_creation`, v4+) allow it; creation is synchronous here,
so the same response already describes the new topic instead of answering
LEADER_NOT_AVAILABLE and making the client ask again.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from typing import Any

from yak.broker.context import (
    CLUSTER_NAME,
    CLUSTER_OPERATIONS,
    OPERATIONS_NOT_REQUESTED,
    TOPIC_OPERATIONS,
    RequestContext,
    authorized_operations,
)
from yak.errors import KafkaError
from yak.partition import INTERNAL_TOPICS, NO_LEADER
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.security.acl import AclOperation, ResourceType

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 13

log = logging.getLogger(__name__)

_ZERO = datetime.timedelta(0)
_NO_ID = uuid.UUID(int=0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    mod = kio_compat.schema_module("metadata", v, "response")
    broker = ctx.broker
    topics_mgr = broker.topics
    allow_create = bool(broker.config.auto_create_topics_enable) and bool(
        getattr(request, "allow_auto_topic_creation", True)
    )

    # Authorization (Kafka's): DESCRIBE on a topic to see it. All-topics requests leave
    # out what the caller may not describe (internal topics included); a topic asked for
    # by name or id is TOPIC_AUTHORIZATION_FAILED, whether it exists or not. Creating a
    # missing topic also needs CREATE on the cluster or the topic.
    authorizer = broker.authorizer
    wanted: list[tuple[str | None, uuid.UUID | None]]
    if request.topics is None or (v == 0 and not request.topics):
        wanted = [(t.name, None) for t in topics_mgr.topics()
                  if authorizer is None or _may_describe(ctx, t.name)]
        allow_create = False
    else:
        wanted = [(t.name, getattr(t, "topic_id", None)) for t in request.topics]
    if authorizer is not None and allow_create:
        allow_create = ctx.cluster_authorized(AclOperation.CREATE) or None  # None: per topic

    out = []
    for name, topic_id in wanted:
        info = None
        if name is None:
            if topic_id is not None and topic_id != _NO_ID:
                info = topics_mgr.by_id(topic_id)
            if info is None:
                # The response's name is nullable only from v12.
                out.append(_topic_error(mod, None if v >= 12 else "", topic_id,
                                        ErrorCode.unknown_topic_id))
                continue
            if authorizer is not None and not _may_describe(ctx, info.name):
                out.append(_topic_error(mod, None if v >= 12 else "", topic_id,
                                        ErrorCode.topic_authorization_failed))
                continue
        else:
            if authorizer is not None and not _may_describe(ctx, name):
                out.append(_topic_error(mod, name, None, ErrorCode.topic_authorization_failed))
                continue
            info = topics_mgr.get(name)
            if info is None and allow_create is None and not ctx.authorized(
                    AclOperation.CREATE, ResourceType.TOPIC, name):
                out.append(_topic_error(mod, name, None, ErrorCode.topic_authorization_failed))
                continue
            if info is None and allow_create is not False:
                try:
                    info = await topics_mgr.create(name)
                    log.info("auto-created topic %s", name)
                except KafkaError as e:
                    code = e.code
                    if code == ErrorCode.topic_already_exists:
                        info = topics_mgr.get(name)
                    else:
                        out.append(_topic_error(mod, name, None, code))
                        continue
            if info is None:
                out.append(_topic_error(mod, name, None, ErrorCode.unknown_topic_or_partition))
                continue
        out.append(_topic(mod, broker, info, _topic_operations(ctx, request, info.name)))

    # Every registered broker at its endpoint on the listener this request came in on
    # (a broker not advertising that listener is left out, as Kafka does).
    brokers = []
    for node in broker.cluster.nodes():
        endpoint = node.endpoint(ctx.listener_name)
        if endpoint is not None:
            brokers.append(kio_compat.build(
                mod.MetadataResponseBroker, node_id=node.node_id, host=endpoint[0],
                port=endpoint[1], rack=node.rack,
            ))
    return kio_compat.build(
        mod.MetadataResponse,
        throttle_time=_ZERO,
        brokers=tuple(brokers),
        cluster_id=broker.cluster_id,
        controller_id=broker.cluster.controller_id(),
        topics=tuple(out),
        error_code=ErrorCode.none,
        cluster_authorized_operations=(
            authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS)
            if getattr(request, "include_cluster_authorized_operations", False)
            else OPERATIONS_NOT_REQUESTED
        ),
    )


def _may_describe(ctx: RequestContext, topic: str) -> bool:
    return ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, topic)


def _topic_operations(ctx: RequestContext, request: Any, topic: str) -> int:
    if not getattr(request, "include_topic_authorized_operations", False):
        return OPERATIONS_NOT_REQUESTED
    return authorized_operations(ctx, ResourceType.TOPIC, topic, TOPIC_OPERATIONS)


def _topic_error(mod: Any, name: str | None, topic_id: uuid.UUID | None, code: ErrorCode) -> Any:
    return kio_compat.build(
        mod.MetadataResponseTopic,
        error_code=code,
        name=name,
        topic_id=topic_id or _NO_ID,
        is_internal=False,
        partitions=(),
    )


def _topic(mod: Any, broker: Any, info: Any, operations: int = OPERATIONS_NOT_REQUESTED) -> Any:
    cluster = broker.cluster
    live = {n.node_id for n in cluster.nodes() if not n.fenced}
    parts = []
    # The controller's decisions as the metadata records them (on every broker of a
    # cluster the same, a few milliseconds apart).
    for p, state in enumerate(broker.topics.partition_states(info.name)):
        parts.append(kio_compat.build(
            mod.MetadataResponsePartition,
            error_code=(ErrorCode.none if state.leader != NO_LEADER
                        else ErrorCode.leader_not_available),
            partition_index=p,
            leader_id=state.leader,
            leader_epoch=state.leader_epoch,
            replica_nodes=state.replicas,
            isr_nodes=state.isr,
            offline_replicas=tuple(r for r in state.replicas if r not in live),
        ))
    return kio_compat.build(
        mod.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.name in INTERNAL_TOPICS,
        partitions=tuple(parts),
        topic_authorized_operations=operations,
    )
