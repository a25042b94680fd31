"""Shared pieces of the admin API handlers (topics, configs, records, log dirs).

Admin requests carry many resources and Kafka answers each one separately: one bad
topic name must not fail its neighbours. `outcome()` turns whatever a per-resource
operation raised into the (error code, message) pair those per-resource results carry.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING

from yak.broker.context import RequestContext
from yak.errors import ErrorCode, InvalidRequestError, KafkaError
from yak.security.acl import AclOperation, ResourceType
from yak.security.authorizer import authorization_error

if TYPE_CHECKING:
    from yak.cluster.dynamic_config import DynamicBrokerConfigs

log = logging.getLogger("yak.broker.admin")

NO_THROTTLE = datetime.timedelta(0)


def outcome(exc: BaseException | None) -> tuple[ErrorCode, str | None]:
    """(code, message) for a per-resource result; unexpected errors are logged once here."""
    if exc is None:
        return ErrorCode.none, None
    if isinstance(exc, KafkaError):
        return exc.code, exc.message
    log.error("admin operation failed", exc_info=exc)
    return ErrorCode.unknown_server_error, f"{type(exc).__name__}: {exc}"


def require_topic(ctx: RequestContext, operation: AclOperation, topic: str) -> None:
    """TOPIC_AUTHORIZATION_FAILED for this resource unless the caller may do `operation` on
    the topic. Checked before existence, so a denied caller cannot probe for names."""
    if not ctx.authorized(operation, ResourceType.TOPIC, topic):
        raise authorization_error(ResourceType.TOPIC)


def require_cluster(ctx: RequestContext, operation: AclOperation) -> None:
    if not ctx.cluster_authorized(operation):
        raise authorization_error(ResourceType.CLUSTER)


def duplicates(names: list[str]) -> set[str]:
    """Names given more than once in one request: Kafka rejects all their entries."""
    seen: set[str] = set()
    dup: set[str] = set()
    for n in names:
        if n in seen:
            dup.add(n)
        seen.add(n)
    return dup


def dynamic_configs(ctx: RequestContext) -> DynamicBrokerConfigs:
    """The broker's dynamic configs (issue 23); a broker composed without them refuses."""
    dynamic = ctx.broker.dynamic_configs
    if dynamic is None:
        raise InvalidRequestError("This broker has no dynamic broker configs")
    return dynamic
