"""OffsetCommit: a group's positions, written to `__consumer_offsets` as one batch.

Offsets for topics or partitions that do not exist are refused here (the coordinator
does not know topics); everything else is the coordinator's call (generation, member,
metadata size). v10 (topic ids) is not offered: clients fall back to v9.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RawResponse, RequestContext
from yak.broker.handlers._group import coordinator, topic_allowed, topic_partition_error
from yak.group.coordinator import OffsetToCommit
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.offset_commit_codec import FIRST_FLEXIBLE, encode_offset_commit_response
from yak.security.acl import AclOperation, ResourceType

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9


async def handle(ctx: RequestContext, request: Any) -> RawResponse:
    coord = coordinator(ctx)
    slots: list[tuple[str, int, ErrorCode | None]] = []
    to_commit: list[OffsetToCommit] = []
    # Kafka: READ on the group (else every partition fails), READ on each topic.
    group_ok = ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id)
    for t in request.topics:
        topic_ok = group_ok and topic_allowed(ctx, AclOperation.READ, t.name)
        for p in t.partitions:
            if not group_ok:
                slots.append((t.name, p.partition_index, ErrorCode.group_authorization_failed))
                continue
            if not topic_ok:
                slots.append((t.name, p.partition_index, ErrorCode.topic_authorization_failed))
                continue
            err = topic_partition_error(ctx, t.name, p.partition_index)
            if coord is None:
                err = ErrorCode.coordinator_not_available
            slots.append((t.name, p.partition_index, err))
            if err is None:
                to_commit.append(
                    OffsetToCommit(
                        t.name,
                        p.partition_index,
                        p.committed_offset,
                        getattr(p, "committed_leader_epoch", -1),
                        p.committed_metadata,
                    )
                )
    codes: list[ErrorCode] = []
    if coord is not None and group_ok and (to_commit or not slots):
        codes = await coord.commit_offsets(
            request.group_id,
            request.generation_id_or_member_epoch,
            request.member_id,
            getattr(request, "group_instance_id", None),
            to_commit,
        )
    it = iter(codes)
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
    for topic, partition, err in slots:
        by_topic.setdefault(topic, []).append((partition, err if err is not None else next(it)))
    body = encode_offset_commit_response(ctx.api_version, by_topic)
    return RawResponse([body], len(body), flexible_header=ctx.api_version >= FIRST_FLEXIBLE)

