"""Heartbeat: keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import coordinator, require_group, response
from yak.protocol.kio_compat import ErrorCode
from yak.security.acl import AclOperation

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    require_group(ctx, AclOperation.READ, request.group_id)
    coord = coordinator(ctx)
    if coord is None:
        return response(ctx, error_code=ErrorCode.coordinator_not_available)
    code = coord.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
    )
    return response(ctx, error_code=code)
