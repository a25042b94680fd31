"""CreateTopics: create topics with partitions and configs, or only validate them.

Each topic is answered separately (INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS,
INVALID_CONFIG, INVALID_REPLICATION_FACTOR, ...), with the effective configs of the new
topic from v5 on, which is how `kafka-topics --create` and AdminClient report results.
"""

from __future__ import annotations

from typing import Any

from yak.broker.config_view import topic_entries
from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE, duplicates, outcome, require_topic
from yak.errors import (
    InvalidConfigurationError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
)
from yak.protocol.kio_compat import ErrorCode, build, schema_module
from yak.security.acl import AclOperation, ResourceType

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7


def _assignments(topic: Any) -> list[list[int]] | None:
    """Explicit replica assignments, ordered by partition; the topic manager checks the
    brokers they name (registered brokers in a cluster, this broker alone otherwise)."""
    if not topic.assignments:
        return None
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        raise InvalidRequestError(
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time."
        )
    by_index = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
    if sorted(by_index) != list(range(len(topic.assignments))):
        raise InvalidReplicaAssignmentError(
            "Partitions should be a consecutive 0-based integer sequence"
        )
    return [by_index[p] for p in range(len(by_index))]


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("create_topics", ctx.api_version, "response")
    topics_mgr = ctx.broker.topics
    dup = duplicates([t.name for t in request.topics])
    # Kafka: CREATE on the cluster allows every topic, else CREATE on each topic.
    cluster_create = ctx.cluster_authorized(AclOperation.CREATE)
    results = []
    for topic in request.topics:
        info = None
        try:
            if topic.name in dup:
                raise InvalidRequestError("Duplicate topic name in the request.")
            if not cluster_create:
                require_topic(ctx, AclOperation.CREATE, topic.name)
            configs: dict[str, str] = {}
            for c in topic.configs:
                if c.value is None:
                    raise InvalidConfigurationError(
                        f"Null value not supported for topic config: {c.name}"
                    )
                configs[c.name] = c.value
            info = await topics_mgr.create(
                topic.name,
                topic.num_partitions,
                configs,
                validate_only=request.validate_only,
                replication_factor=topic.replication_factor,
                assignment=_assignments(topic),
            )
            err = None
        except Exception as exc:  # per-topic: one bad topic never fails the others
            err = exc
        code, message = outcome(err)
        if info is not None:
            # The configs are shown only to a caller that may DESCRIBE_CONFIGS the topic.
            shown = ctx.authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic.name)
            entries = topic_entries(info.configs, ctx.broker.config) if shown else []
            config_cls = getattr(m, "CreatableTopicConfigs", None)  # v5+ only
            result_configs: tuple[Any, ...] | None = tuple(
                build(
                    config_cls,
                    name=e.name,
                    value=e.value,
                    read_only=e.read_only,
                    config_source=e.source,
                    is_sensitive=e.is_sensitive,
                )
                for e in entries
                if config_cls is not None
            )
            results.append(
                build(
                    m.CreatableTopicResult,
                    name=topic.name,
                    topic_id=None if request.validate_only else info.topic_id,
                    error_code=code,
                    error_message=message,
                    num_partitions=info.partitions,
                    replication_factor=_replication_factor(ctx, info, topic),
                    configs=result_configs,
                    topic_config_error_code=(ErrorCode.none if shown
                                             else ErrorCode.topic_authorization_failed),
                )
            )
        else:
            results.append(
                build(
                    m.CreatableTopicResult,
                    name=topic.name,
                    topic_id=None,
                    error_code=code,
                    error_message=message,
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=None,
                )
            )
    return build(m.CreateTopicsResponse, throttle_time=NO_THROTTLE, topics=tuple(results))


def _replication_factor(ctx: RequestContext, info: Any, topic: Any) -> int:
    """The new topic's replicas per partition (what was asked for when only validating)."""
    if topic.assignments:
        return len(topic.assignments[0].broker_ids)
    try:
        states = ctx.broker.topics.partition_states(info.name)
    except Exception:
        states = []
    if states:
        return len(states[0].replicas)
    rf = int(topic.replication_factor)
    return ctx.broker.config.default_replication_factor if rf == -1 else rf
