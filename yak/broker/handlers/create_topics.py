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


def _partitions_from_assignments(ctx: RequestContext, topic: Any) -> int | None:
    """Explicit replica assignments are accepted only when they name this broker."""
    if not topic.assignments:
        return None
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        raise InvalidRequestError(
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time."
        )
    indexes = sorted(a.partition_index for a in topic.assignments)
    if indexes != list(range(len(indexes))):
        raise InvalidReplicaAssignmentError(
            "Partitions should be a consecutive 0-based integer sequence"
        )
    for a in topic.assignments:
        if list(a.broker_ids) != [ctx.broker.node_id]:
            raise InvalidReplicaAssignmentError(
                f"Replica assignment {list(a.broker_ids)} for partition {a.partition_index}"
                f" names brokers other than the only broker {ctx.broker.node_id}"
            )
    return len(indexes)


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
            n = _partitions_from_assignments(ctx, topic)
            info = topics_mgr.create(
                topic.name,
                n if n is not None else topic.num_partitions,
                configs,
                validate_only=request.validate_only,
                replication_factor=topic.replication_factor,
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
                    replication_factor=1,
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
