"""ShareGroupDescribe (KIP-932): the share groups' members and assignments, from the
in-memory groups of yak/share/group.py. A group this broker does not know is answered
GROUP_ID_NOT_FOUND, as Kafka does."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import (
    GROUP_OPERATIONS,
    OPERATIONS_NOT_REQUESTED,
    response,
    response_module,
)
from yak.broker.handlers._share import manager, topic_name
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType

API_KEY = 77
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ctx, "share_group_describe")
    share = manager(ctx)
    ops = GROUP_OPERATIONS if request.include_authorized_operations \
        else OPERATIONS_NOT_REQUESTED
    out = []
    for gid in request.group_ids:
        def failed(code: ErrorCode, gid: str = gid) -> Any:
            return build(mod.DescribedGroup, error_code=code, error_message=code.name,
                         group_id=gid, group_state="Dead", group_epoch=-1,
                         assignment_epoch=-1, assignor_name="", members=(),
                         authorized_operations=OPERATIONS_NOT_REQUESTED)
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, gid):
            out.append(failed(ErrorCode.group_authorization_failed))
            continue
        g = share.groups.get(gid) if share is not None else None
        if g is None:
            out.append(failed(ErrorCode.group_id_not_found))
            continue
        members = []
        for m in g.members.values():
            tps = tuple(build(mod.TopicPartitions, topic_id=t, topic_name=topic_name(ctx, t) or "",
                              partitions=ps) for t, ps in m.assignment.items())
            members.append(build(
                mod.Member, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.epoch,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=m.subscribed,
                assignment=build(mod.Assignment, topic_partitions=tps)))
        out.append(build(
            mod.DescribedGroup, error_code=ErrorCode.none, group_id=gid,
            group_state="Stable" if g.members else "Empty", group_epoch=g.epoch,
            assignment_epoch=g.epoch, assignor_name="simple", members=tuple(members),
            authorized_operations=ops))
    return response(ctx, groups=tuple(out))
