"""ConsumerGroupDescribe (KIP-848): members with their epochs, current and target
assignments. Classic groups answer GROUP_ID_NOT_FOUND ("not a consumer group"), which
is what makes admin clients fall back to DescribeGroups for them, as with Kafka."""

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
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 1


def _assignment(ctx: RequestContext, mod: Any, assignment: dict[Any, set[int]]) -> Any:
    parts = []
    for topic_id, ps in sorted(assignment.items(), key=lambda kv: str(kv[0])):
        info = ctx.broker.topics.by_id(topic_id)
        name = info.name if info is not None else ""
        parts.append(
            build(
                mod.TopicPartitions,
                topic_id=topic_id,
                topic_name=name,
                partitions=tuple(sorted(ps)),
            )
        )
    return build(mod.Assignment, topic_partitions=tuple(parts))


async def handle(ctx: RequestContext, request: Any) -> Any:
    coord = coordinator(ctx)
    mod = response_module(ctx, "consumer_group_describe")
    ops = GROUP_OPERATIONS if request.include_authorized_operations else OPERATIONS_NOT_REQUESTED
    out = []
    for gid in request.group_ids:
        if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, gid):
            out.append(build(mod.DescribedGroup, error_code=ErrorCode.group_authorization_failed,
                             error_message=None, group_id=gid, group_state="",
                             group_epoch=-1, assignment_epoch=-1, assignor_name="",
                             members=(), authorized_operations=ops))
            continue
        cg = None if coord is None else coord.consumer.groups.get(gid)
        if cg is None or (
            coord is not None and coord.describe_group(gid).protocol_name != "uniform"
        ):
            code = (
                ErrorCode.coordinator_not_available
                if coord is None
                else ErrorCode.group_id_not_found
            )
            out.append(
                build(
                    mod.DescribedGroup,
                    error_code=code,
                    error_message=None
                    if coord is None
                    else f"Group {gid} is not a consumer group.",
                    group_id=gid,
                    group_state="Dead",
                    group_epoch=-1,
                    assignment_epoch=-1,
                    assignor_name="",
                    members=(),
                    authorized_operations=ops,
                )
            )
            continue
        members = tuple(
            build(
                mod.Member,
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=tuple(m.subscribed),
                subscribed_topic_regex=None,
                assignment=_assignment(ctx, mod, m.assigned),
                target_assignment=_assignment(ctx, mod, cg.target.get(m.member_id, {})),
                member_type=-1,
            )
            for m in cg.members.values()
        )
        out.append(
            build(
                mod.DescribedGroup,
                error_code=ErrorCode.none,
                error_message=None,
                group_id=gid,
                group_state=cg.state(),
                group_epoch=cg.epoch,
                assignment_epoch=cg.target_epoch,
                assignor_name="uniform",
                members=members,
                authorized_operations=ops,
            )
        )
    return response(ctx, groups=tuple(out))
