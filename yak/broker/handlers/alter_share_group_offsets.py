"""AlterShareGroupOffsets (KIP-932, API 91): set a share group's start offset per share
partition (`kafka-share-groups --reset-offsets`): a new state at that start with nothing
in flight, written to the share coordinator at the next state epoch, only while the
group has no members (NON_EMPTY_GROUP otherwise). READ on the group and on each topic,
as Kafka asks. Policy in yak/share/manager.py (`reset_offsets`)."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import require_group, response, response_module
from yak.broker.handlers._share import manager
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType

API_KEY = 91
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ctx, "alter_share_group_offsets")
    require_group(ctx, AclOperation.READ, request.group_id)
    share = manager(ctx)
    if share is None or share.persister is None:
        return response(ctx, error_code=ErrorCode.coordinator_not_available,
                        error_message="share groups are not available", responses=())
    out = []
    for t in request.topics:
        info = ctx.broker.topics.get(t.topic_name)
        code = (ErrorCode.unknown_topic_or_partition if info is None
                else ErrorCode.topic_authorization_failed
                if not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, t.topic_name)
                else ErrorCode.none)
        codes: list[ErrorCode] = []
        if code is ErrorCode.none and info is not None:
            bad = [p for p in t.partitions if not 0 <= p.partition_index < info.partitions
                   or p.start_offset < 0]
            good = [p for p in t.partitions if p not in bad]
            done = dict(zip([p.partition_index for p in good], await share.reset_offsets(
                request.group_id, [(t.topic_name, info.topic_id, p.partition_index,
                                    p.start_offset) for p in good]), strict=True))
            codes = [done.get(p.partition_index, ErrorCode.unknown_topic_or_partition
                              if not 0 <= p.partition_index < info.partitions
                              else ErrorCode.invalid_request) for p in t.partitions]
        else:
            codes = [code] * len(t.partitions)
        out.append(build(
            mod.AlterShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
            topic_id=info.topic_id if info is not None else None, partitions=tuple(
                build(mod.AlterShareGroupOffsetsResponsePartition,
                      partition_index=p.partition_index, error_code=c,
                      error_message=None if c is ErrorCode.none else c.name)
                for p, c in zip(t.partitions, codes, strict=True))))
    return response(ctx, error_code=ErrorCode.none, error_message=None, responses=tuple(out))
