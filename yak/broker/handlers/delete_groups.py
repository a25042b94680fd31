"""DeleteGroups: only Empty groups; their offsets and metadata get tombstones. A name the
classic coordinator does not know is tried as a share group (yak/share/deletion.py: its
state deleted through the share coordinator, its group configs emptied)."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import coordinator, response, response_module
from yak.broker.handlers._share import manager, share_topics
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType
from yak.share.deletion import delete_share_group

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    coord = coordinator(ctx)
    names = list(request.groups_names)
    allowed = [g for g in names if ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, g)]
    if coord is None:
        codes = [ErrorCode.coordinator_not_available] * len(names)
    else:
        done = dict(zip(allowed, await coord.delete_groups(allowed), strict=True))
        share = manager(ctx)
        for g, code in done.items():  # share groups: their own branch
            if code is ErrorCode.group_id_not_found and share is not None:
                done[g] = await delete_share_group(share, g, share_topics(ctx))
        codes = [done.get(g, ErrorCode.group_authorization_failed) for g in names]
    mod = response_module(ctx, "delete_groups")
    return response(
        ctx,
        results=tuple(
            build(mod.DeletableGroupResult, group_id=g, error_code=c)
            for g, c in zip(names, codes, strict=True)
        ),
    )
