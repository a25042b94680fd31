"""DescribeClientQuotas: the configured user / client-id quotas a filter matches. Needs
DESCRIBE_CONFIGS on the cluster."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE
from yak.errors import ErrorCode
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation, ResourceType
from yak.security.authorizer import authorization_error

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("describe_client_quotas", ctx.api_version, "response")
    if not ctx.cluster_authorized(AclOperation.DESCRIBE_CONFIGS):
        raise authorization_error(ResourceType.CLUSTER)
    found = ctx.broker.quotas.describe(
        [(c.entity_type, c.match_type, c.match) for c in request.components],
        bool(request.strict),
    )
    entries = tuple(
        build(
            m.EntryData,
            entity=tuple(build(m.EntityData, entity_type=t, entity_name=n)
                         for t, n in sorted(entity.items())),
            values=tuple(build(m.ValueData, key=k, value=float(v))
                         for k, v in sorted(values.items())),
        )
        for entity, values in found
    )
    return build(m.DescribeClientQuotasResponse, throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.none, error_message=None, entries=entries)
