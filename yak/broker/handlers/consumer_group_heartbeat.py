"""ConsumerGroupHeartbeat (KIP-848): join, stay, reconcile and leave in one API.

The assignment is sent only when it changed (null otherwise), as Kafka does, and is
keyed by topic id. v1's regex subscriptions are matched (Python `re`, full match, close
to Kafka's RE2/J for the patterns clients use) against the topics at every heartbeat.
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
    topic_allowed,
)
from yak.protocol.kio_compat import ErrorCode, ms_to_timedelta, timedelta_to_ms
from yak.security.acl import AclOperation

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    require_group(ctx, AclOperation.READ, request.group_id)
    # Kafka: DESCRIBE on every subscribed topic named (else TOPIC_AUTHORIZATION_FAILED).
    if any(not topic_allowed(ctx, AclOperation.DESCRIBE, t)
           for t in request.subscribed_topic_names or ()):
        return _answer(ctx, ErrorCode.topic_authorization_failed, request.member_id, -1)
    coord = coordinator(ctx)
    if coord is None:
        return _answer(ctx, ErrorCode.coordinator_not_available, request.member_id, -1)
    owned = None
    if request.topic_partitions is not None:
        owned = {tp.topic_id: set(tp.partitions) for tp in request.topic_partitions}
    res = coord.consumer_group_heartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=timedelta_to_ms(request.rebalance_timeout),
        subscribed=None
        if request.subscribed_topic_names is None
        else list(request.subscribed_topic_names),
        owned=owned,
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        regex=getattr(request, "subscribed_topic_regex", None),
    )
    assignment = None
    if res.assignment is not None:
        mod = response_module(ctx, "consumer_group_heartbeat")
        assignment = mod.Assignment(
            topic_partitions=tuple(
                mod.TopicPartitions(topic_id=t, partitions=tuple(sorted(ps)))
                for t, ps in sorted(res.assignment.items(), key=lambda kv: str(kv[0]))
            )
        )
    return _answer(
        ctx,
        res.error,
        res.member_id,
        res.member_epoch,
        res.heartbeat_interval_ms,
        assignment,
        res.error_message,
    )


def _answer(
    ctx: RequestContext,
    code: ErrorCode,
    member_id: str | None,
    epoch: int,
    interval_ms: int = 0,
    assignment: Any = None,
    message: str | None = None,
) -> Any:
    return response(
        ctx,
        error_code=code,
        error_message=message,
        member_id=member_id,
        member_epoch=epoch,
        heartbeat_interval=ms_to_timedelta(interval_ms),
        assignment=assignment,
    )
