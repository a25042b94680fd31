"""CreatePartitions: grow a topic's partition count (never shrink: INVALID_PARTITIONS).

Kafka cannot remove partitions without losing data and breaking key->partition mapping,
so a smaller or equal count is refused; validate_only checks without changing anything.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE, duplicates, outcome, require_topic
from yak.errors import InvalidRequestError
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


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
            assignment = (None if topic.assignments is None
                          else [list(a.broker_ids) for a in topic.assignments])
            await topics.add_partitions(topic.name, topic.count,
                                        validate_only=request.validate_only,
                                        assignment=assignment)
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
