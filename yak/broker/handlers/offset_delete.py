"""OffsetDelete: drop a group's committed offsets for some partitions.

Refused (GROUP_SUBSCRIBED_TO_TOPIC) for topics an active member subscribes to: the
next commit would bring them back and the consumer would be confused meanwhile.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import (
    coordinator,
    require_group,
    response,
    response_module,
    topic_allowed,
    topic_partition_error,
)
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    require_group(ctx, AclOperation.DELETE, request.group_id)
    coord = coordinator(ctx)
    if coord is None:
        return response(ctx, error_code=ErrorCode.coordinator_not_available, topics=())
    slots: list[tuple[str, int, ErrorCode | None]] = []
    wanted: list[tuple[str, int]] = []
    for t in request.topics:
        for p in t.partitions:
            err = (topic_partition_error(ctx, t.name, p.partition_index)
                   if topic_allowed(ctx, AclOperation.READ, t.name)
                   else ErrorCode.topic_authorization_failed)
            slots.append((t.name, p.partition_index, err))
            if err is None:
                wanted.append((t.name, p.partition_index))
    top, codes = await coord.delete_offsets(request.group_id, wanted)
    if top is not ErrorCode.none:
        return response(ctx, error_code=top, topics=())
    it = iter(codes)
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
    for topic, partition, err in slots:
        by_topic.setdefault(topic, []).append((partition, err if err is not None else next(it)))
    mod = response_module(ctx, "offset_delete")
    return response(
        ctx,
        error_code=ErrorCode.none,
        topics=tuple(
            build(
                mod.OffsetDeleteResponseTopic,
                name=topic,
                partitions=tuple(
                    build(mod.OffsetDeleteResponsePartition, partition_index=p, error_code=c)
                    for p, c in parts
                ),
            )
            for topic, parts in by_topic.items()
        ),
    )
