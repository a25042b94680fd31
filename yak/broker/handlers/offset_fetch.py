"""OffsetFetch: committed offsets of one group (v1-7) or several (v8+, KIP-709).

A partition without a committed offset answers -1 with no error, which is how a
consumer learns to apply its `auto.offset.reset`. `topics=None` (v2+) means every
partition the group has committed. v7+ `require_stable` (KIP-447): a partition whose
offset a transaction committed but whose marker has not arrived yet answers
UNSTABLE_OFFSET_COMMIT, and the consumer asks again. v10 (topic ids) is not offered.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import coordinator, response, response_module, topic_allowed
from yak.group.coordinator import FetchedOffset
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 9


def _fetch(
    ctx: RequestContext, group_id: str, topics: Any, require_stable: bool = False
) -> tuple[ErrorCode, list[FetchedOffset]]:
    wanted = None if topics is None else [(t.name, t.partition_indexes) for t in topics]
    coord = coordinator(ctx)
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        err = ErrorCode.group_authorization_failed
    elif coord is None:
        err = ErrorCode.coordinator_not_available
    else:
        # Kafka: topics the caller may not DESCRIBE are TOPIC_AUTHORIZATION_FAILED when
        # asked for by name, and left out of an all-topics answer.
        denied = {name for name, _ in (wanted or []) if not topic_allowed(
            ctx, AclOperation.DESCRIBE, name)}
        asked = None if wanted is None else [w for w in wanted if w[0] not in denied]
        err, offsets = coord.fetch_offsets(group_id, asked, require_stable)
        if err is ErrorCode.none:
            if wanted is None:
                return err, [o for o in offsets
                             if topic_allowed(ctx, AclOperation.DESCRIBE, o.topic)]
            return err, offsets + [
                FetchedOffset(name, p, error=ErrorCode.topic_authorization_failed)
                for name, parts in wanted if name in denied for p in parts
            ]
    # Older versions have no group-level error: repeat it on every partition.
    return err, [FetchedOffset(name, p, error=err) for name, parts in (wanted or []) for p in parts]


def _topics(
    ctx: RequestContext, offsets: list[FetchedOffset], topic_cls: Any, part_cls: Any
) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for o in offsets:
        by_topic.setdefault(o.topic, []).append(
            build(
                part_cls,
                partition_index=o.partition,
                committed_offset=o.offset,
                committed_leader_epoch=o.leader_epoch,
                metadata=o.metadata,
                error_code=o.error,
            )
        )
    return tuple(build(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items())


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ctx, "offset_fetch")
    if ctx.api_version < 8:
        err, offsets = _fetch(ctx, request.group_id, request.topics,
                              bool(getattr(request, "require_stable", False)))
        topics = _topics(
            ctx, offsets, mod.OffsetFetchResponseTopic, mod.OffsetFetchResponsePartition
        )
        return response(ctx, topics=topics, error_code=err)
    groups = []
    for g in request.groups:
        err, offsets = _fetch(ctx, g.group_id, g.topics, bool(request.require_stable))
        topics = _topics(
            ctx, offsets, mod.OffsetFetchResponseTopics, mod.OffsetFetchResponsePartitions
        )
        groups.append(
            build(mod.OffsetFetchResponseGroup, group_id=g.group_id, topics=topics, error_code=err)
        )
    return response(ctx, groups=tuple(groups))
