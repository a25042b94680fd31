"""LeaveGroup: one member (v0-2) or a batch identified by member or instance id (v3+).

A clean leave triggers the rebalance at once instead of after a session timeout,
which is what makes a consumer's `close()` fast for the rest of its group.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import coordinator, require_group, response, response_module
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    require_group(ctx, AclOperation.READ, request.group_id)
    coord = coordinator(ctx)
    v = ctx.api_version
    if v < 3:
        members = [(request.member_id, None)]
    else:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    if coord is None:
        return response(ctx, error_code=ErrorCode.coordinator_not_available, members=())
    top, results = coord.leave_group(request.group_id, members)
    if v < 3:
        code = top if top is not ErrorCode.none or not results else results[0].error
        return response(ctx, error_code=code)
    mod = response_module(ctx, "leave_group")
    return response(
        ctx,
        error_code=top,
        members=tuple(
            build(
                mod.MemberResponse,
                member_id=r.member_id,
                group_instance_id=r.group_instance_id,
                error_code=r.error,
            )
            for r in results
        ),
    )
