"""ShareGroupHeartbeat (KIP-932): join, stay in and leave a share group.

Membership and the assignment are decided in yak/share/group.py, and answered once
written to `__consumer_offsets` (`durable_heartbeat`); the assignment is keyed
by topic id and sent only when it changed (null otherwise), as Kafka answers.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import (
    client_host,
    require_group,
    response,
    response_module,
    topic_allowed,
)
from yak.broker.handlers._share import manager
from yak.protocol.kio_compat import ErrorCode, build, ms_to_timedelta
from yak.security.acl import AclOperation
from yak.share.initialization import initialize_assignment

API_KEY = 76
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    require_group(ctx, AclOperation.READ, request.group_id)
    subscribed = request.subscribed_topic_names
    if subscribed is not None and any(
            not topic_allowed(ctx, AclOperation.DESCRIBE, t) for t in subscribed):
        return _answer(ctx, ErrorCode.topic_authorization_failed, request.member_id, -1)
    share = manager(ctx)
    if share is None:
        return _answer(ctx, ErrorCode.coordinator_not_available, request.member_id, -1)
    if request.member_epoch == 0:
        share.prepare_state()  # a join: the share-state topic, before the first fetch
    res = await share.groups.durable_heartbeat(
        request.group_id, request.member_id, request.member_epoch,
        None if subscribed is None else list(subscribed), request.rack_id,
        ctx.client_id or "", client_host(ctx))
    assignment = None
    if res.assignment is not None:
        # Kafka 4.1+: the share partitions' states exist before the member fetches them
        await initialize_assignment(share.persister, request.group_id, res.assignment)
        mod = response_module(ctx, "share_group_heartbeat")
        assignment = build(mod.Assignment, topic_partitions=tuple(
            build(mod.TopicPartitions, topic_id=t, partitions=ps)
            for t, ps in sorted(res.assignment.items(), key=lambda kv: str(kv[0]))))
    return _answer(ctx, res.error, res.member_id, res.member_epoch,
                   res.heartbeat_interval_ms, assignment, res.error_message)


def _answer(ctx: RequestContext, code: ErrorCode, member_id: str | None, epoch: int,
            interval_ms: int = 0, assignment: Any = None, message: str | None = None) -> Any:
    return response(ctx, error_code=code, error_message=message, member_id=member_id,
                    member_epoch=epoch, heartbeat_interval=ms_to_timedelta(interval_ms),
                    assignment=assignment)
