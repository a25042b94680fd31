"""DescribeGroups: state, protocol and members (with their metadata and assignment).

An unknown group is "Dead" with no error before v6 and GROUP_ID_NOT_FOUND from v6,
as in Kafka; the admin clients of each era expect exactly that. A share group (KIP-932)
the group coordinator does not know is described from the share manager (protocol type
"share", its members without metadata or assignment).
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import (
    GROUP_OPERATIONS,
    OPERATIONS_NOT_REQUESTED,
    coordinator,
    response,
    response_module,
)
from yak.broker.handlers._share import describe_share_group
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 6


async def handle(ctx: RequestContext, request: Any) -> Any:
    coord = coordinator(ctx)
    mod = response_module(ctx, "describe_groups")
    ops = (
        GROUP_OPERATIONS
        if getattr(request, "include_authorized_operations", False)
        else OPERATIONS_NOT_REQUESTED
    )
    out = []
    for gid in request.groups:
        denied = not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, gid)
        if coord is None or denied:
            out.append(
                build(
                    mod.DescribedGroup,
                    error_code=(ErrorCode.group_authorization_failed if denied
                                else ErrorCode.coordinator_not_available),
                    error_message=None,
                    group_id=gid,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=ops,
                )
            )
            continue
        d = coord.describe_group(gid)
        err = d.error
        if err is ErrorCode.group_id_not_found or d.state == "Dead":
            shared = describe_share_group(ctx, mod, gid, ops)  # a share group (KIP-932)?
            if shared is not None:
                out.append(shared)
                continue
        if err is ErrorCode.group_id_not_found and ctx.api_version < 6:
            err = ErrorCode.none
        out.append(
            build(
                mod.DescribedGroup,
                error_code=err,
                error_message=None,
                group_id=gid,
                group_state=d.state,
                protocol_type=d.protocol_type,
                protocol_data=d.protocol_name,
                members=tuple(
                    build(
                        mod.DescribedGroupMember,
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in d.members
                ),
                authorized_operations=ops,
            )
        )
    return response(ctx, groups=tuple(out))
