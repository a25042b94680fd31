"""Shared plumbing of the group handlers (not a handler: the registry skips `_` modules).

Every group API answers COORDINATOR_NOT_AVAILABLE until the group coordinator is
attached, and builds its response through `kio_compat.build` so one handler serves
every version without per-version branches.
"""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any

from yak.broker.context import RequestContext
from yak.protocol import kio_compat
from yak.security.acl import AclOperation, ResourceType
from yak.security.authorizer import authorization_error

if TYPE_CHECKING:
    from yak.group.coordinator import GroupCoordinator

ZERO = datetime.timedelta(0)
# DescribeGroups' authorized_operations when the client did not ask for them.
OPERATIONS_NOT_REQUESTED = -(2**31)
# READ (3), DELETE (6), DESCRIBE (8): the operations Kafka defines on a group resource.
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)


def coordinator(ctx: RequestContext) -> GroupCoordinator | None:
    return ctx.broker.group_coordinator


def client_host(ctx: RequestContext) -> str:
    """Kafka shows the client's address as `InetAddress.toString()`: "/127.0.0.1"."""
    return f"/{ctx.connection[0]}" if ctx.connection else ""


def require_group(ctx: RequestContext, operation: AclOperation, group_id: str) -> None:
    """GROUP_AUTHORIZATION_FAILED (the response's top-level error) unless the caller may do
    `operation` on the group (Kafka: READ to join, commit, heartbeat, leave; DESCRIBE to
    describe and fetch offsets; DELETE to delete)."""
    if not ctx.authorized(operation, ResourceType.GROUP, group_id):
        raise authorization_error(ResourceType.GROUP)


def topic_allowed(ctx: RequestContext, operation: AclOperation, topic: str) -> bool:
    return ctx.authorized(operation, ResourceType.TOPIC, topic)


def response_module(ctx: RequestContext, api_name: str) -> ModuleType:
    return kio_compat.schema_module(api_name, ctx.api_version, "response")


def response(ctx: RequestContext, **fields: Any) -> Any:
    cls = kio_compat.response_class(ctx.api_key, ctx.api_version)
    return kio_compat.build(cls, throttle_time=ZERO, **fields)


def topic_partition_error(
    ctx: RequestContext, topic: str, partition: int
) -> kio_compat.ErrorCode | None:
    """UNKNOWN_TOPIC_OR_PARTITION for offsets of partitions that do not exist (Kafka
    refuses to store those, so a typo cannot create phantom lag)."""
    info = ctx.broker.topics.get(topic)
    if info is None or not 0 <= partition < info.partitions:
        return kio_compat.ErrorCode.unknown_topic_or_partition
    return None
