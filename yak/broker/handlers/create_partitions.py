"""CreatePartitions: grow a topic's partition count (never shrink: INVALID_PARTITIONS).

Kafka cannot remove partitions without losing data and breaking key->partition mapping,
so a smaller or equal count is refused; validate_only checks without changing anything.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE, duplicates, outcome, require_topic
from yak.errors import InvalidReplicaAssignmentError, InvalidRequestError
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


def _check_assignments(ctx: RequestContext, topic: Any, current: int) -> None:
    if topic.assignments is None:
        return
    if len(topic.assignments) != topic.count - current:
        raise InvalidReplicaAssignmentError(
            f"Increasing the number of partitions by {topic.count - current} but"
            f" {len(topic.assignments)} assignments provided."
        )
    for a in topic.assignments:
        if list(a.broker_ids) != [ctx.broker.node_id]:
            raise InvalidReplicaAssignmentError(
                f"Replica assignment {list(a.broker_ids)} names brokers other than the only"
                f" broker {ctx.broker.node_id}"
            )


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("create_partitions", ctx.api_version, "response")
    topics = ctx.broker.topics
    dup = duplicates([t.name for t in request.topics])
    results = []
    for topic in request.topics:
        try:
            if topic.name in dup:
                raise InvalidRequestError("Duplicate topic name in the request.")
            require_topic(ctx, AclOperation.ALTER, topic.name)
            info = topics.check_add_partitions(topic.name, topic.count)
            _check_assignments(ctx, topic, info.partitions)
            topics.add_partitions(topic.name, topic.count, validate_only=request.validate_only)
            err = None
        except Exception as exc:
            err = exc
        code, message = outcome(err)
        results.append(
            build(
                m.CreatePartitionsTopicResult,
                name=topic.name,
                error_code=code,
                error_message=message,
            )
        )
    return build(m.CreatePartitionsResponse, throttle_time=NO_THROTTLE, results=tuple(results))
