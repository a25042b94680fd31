"""DeleteShareGroupOffsets (KIP-932, API 92): a share group's state on whole topics
deleted (DeleteShareGroupState to the share coordinator), so its consumers start those
topics afresh by `share.auto.offset.reset`. Kafka's errors: NON_EMPTY_GROUP while the
group has members, GROUP_ID_NOT_FOUND for a group unknown here, UNKNOWN_TOPIC_OR_PARTITION
per topic. Policy in yak/share/deletion.py."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response, response_module
from yak.broker.handlers._share import manager
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType
from yak.share.deletion import delete_share_offsets

API_KEY = 92
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ctx, "delete_share_group_offsets")
    gid = request.group_id
    share = manager(ctx)
    code = ErrorCode.none
    if not ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, gid):
        code = ErrorCode.group_authorization_failed
    elif share is None:
        code = ErrorCode.coordinator_not_available
    if code is not ErrorCode.none:
        return response(ctx, error_code=code, responses=())
    assert share is not None
    names = list(dict.fromkeys(t.topic_name for t in request.topics))
    found, codes = [], {}
    for name in names:
        info = ctx.broker.topics.get(name)
        if info is None:
            codes[name] = ErrorCode.unknown_topic_or_partition
        elif not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, name):
            codes[name] = ErrorCode.topic_authorization_failed
        else:
            found.append((name, info.topic_id, info.partitions))
    code, deleted = await delete_share_offsets(share, gid, found)
    if code is not ErrorCode.none:
        return response(ctx, error_code=code, responses=())
    codes.update((name, c) for (name, _, _), c in zip(found, deleted, strict=True))
    ids = {name: tid for name, tid, _ in found}
    return response(ctx, error_code=ErrorCode.none, responses=tuple(
        build(mod.DeleteShareGroupOffsetsResponseTopic, topic_name=name,
              topic_id=ids.get(name), error_code=codes[name]) for name in names))
