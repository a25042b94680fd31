"""ListGroups, with the state filter of v4+ (KIP-518) and type filter of v5+ (KIP-848).

Classic and consumer (KIP-848) groups from the group coordinator, share groups (KIP-932,
type "share") from the share manager (`_share.share_listings`).
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import coordinator, response, response_module
from yak.broker.handlers._share import share_listings
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    coord = coordinator(ctx)
    if coord is None:
        return response(ctx, error_code=ErrorCode.coordinator_not_available, groups=())
    states = getattr(request, "states_filter", ()) or ()
    types = getattr(request, "types_filter", ()) or ()
    listing = coord.list_groups(states, types)
    if not types or "share" in {t.lower() for t in types}:
        listing = listing + share_listings(ctx, states)
    if not ctx.cluster_authorized(AclOperation.DESCRIBE):
        # Kafka: without DESCRIBE on the cluster, only the groups one may describe.
        listing = [g for g in listing
                   if ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id)]
    mod = response_module(ctx, "list_groups")
    return response(
        ctx,
        error_code=ErrorCode.none,
        groups=tuple(
            build(
                mod.ListedGroup,
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.state,
                group_type=g.group_type,
            )
            for g in listing
        ),
    )
