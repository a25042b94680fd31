"""DeleteTopics: by name (all versions) or by topic id (v6+).

Topic ids let a client delete exactly the topic it saw, not a re-created namesake;
an id Yak does not know is UNKNOWN_TOPIC_ID, a name UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import uuid
from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE, duplicates, outcome, require_topic
from yak.errors import (
    InvalidRequestError,
    TopicDeletionDisabledError,
    UnknownTopicIdError,
)
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6

_ZERO = uuid.UUID(int=0)


def _targets(request: Any, version: int) -> list[tuple[str | None, uuid.UUID | None]]:
    if version >= 6:
        return [
            (t.name, t.topic_id if t.topic_id not in (None, _ZERO) else None)
            for t in request.topics
        ]
    return [(name, None) for name in request.topic_names]


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("delete_topics", ctx.api_version, "response")
    broker = ctx.broker
    targets = _targets(request, ctx.api_version)
    dup = duplicates([n for n, _ in targets if n is not None])
    deletion_enabled = broker.config.delete_topic_enable
    results = []
    for name, topic_id in targets:
        resolved_name, resolved_id = name, topic_id
        try:
            if name is not None and topic_id is not None:
                raise InvalidRequestError("Topic name and topic id cannot both be set.")
            if name is None and topic_id is None:
                raise InvalidRequestError("Either a topic name or a topic id must be set.")
            if name is not None and name in dup:
                raise InvalidRequestError("Duplicate topic name in the request.")
            if topic_id is not None:
                info = broker.topics.by_id(topic_id)
                if info is None:
                    raise UnknownTopicIdError(f"Topic id {topic_id} does not exist.")
                resolved_name = info.name
                require_topic(ctx, AclOperation.DESCRIBE, resolved_name)
            require_topic(ctx, AclOperation.DELETE, resolved_name)
            if not deletion_enabled:
                raise TopicDeletionDisabledError(
                    "Topic deletion is disabled (delete.topic.enable=false)."
                )
            info = await broker.topics.delete(resolved_name)
            broker.metrics.forget_topic(resolved_name)  # its series go with it
            resolved_id = info.topic_id
            err = None
        except Exception as exc:
            err = exc
        code, message = outcome(err)
        results.append(
            build(
                m.DeletableTopicResult,
                name=resolved_name,
                topic_id=resolved_id,
                error_code=code,
                error_message=message,
            )
        )
    return build(m.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))
