"""JoinGroup: may wait for the join barrier; the coordinator hands back a future.

The wait blocks only this connection (requests on a connection are answered in
order, as in Kafka); other clients keep being served. v4+ clients get the KIP-394
MEMBER_ID_REQUIRED round trip, older ones join at once.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import (
    client_host,
    coordinator,
    require_group,
    response,
    response_module,
)
from yak.protocol.kio_compat import ErrorCode, build, timedelta_to_ms
from yak.security.acl import AclOperation

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9


async def handle(ctx: RequestContext, request: Any) -> Any:
    require_group(ctx, AclOperation.READ, request.group_id)
    coord = coordinator(ctx)
    v = ctx.api_version
    if coord is None:
        return _answer(ctx, ErrorCode.coordinator_not_available, request.member_id)
    res = await coord.join_group(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        session_timeout_ms=timedelta_to_ms(request.session_timeout),
        rebalance_timeout_ms=timedelta_to_ms(getattr(request, "rebalance_timeout", -1)),
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        require_known_member_id=v >= 4,
    )
    mod = response_module(ctx, "join_group")
    members = tuple(
        build(mod.JoinGroupResponseMember, member_id=m, group_instance_id=i, metadata=meta)
        for m, i, meta in res.members
    )
    return _answer(
        ctx,
        res.error,
        res.member_id,
        generation_id=res.generation_id,
        protocol_type=res.protocol_type,
        protocol_name=res.protocol_name,
        leader=res.leader_id,
        skip_assignment=res.skip_assignment,
        members=members,
    )


def _answer(
    ctx: RequestContext,
    code: ErrorCode,
    member_id: str,
    generation_id: int = -1,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str = "",
    skip_assignment: bool = False,
    members: tuple[Any, ...] = (),
) -> Any:
    if protocol_name is None and ctx.api_version < 7:
        protocol_name = ""  # not nullable before v7
    return response(
        ctx,
        error_code=code,
        generation_id=generation_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        leader=leader,
        skip_assignment=skip_assignment,
        member_id=member_id,
        members=members,
    )
