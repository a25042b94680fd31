"""AlterClientQuotas: set or remove user / client-id quotas (`producer_byte_rate`,
`consumer_byte_rate`, `request_percentage`, `controller_mutation_rate`). Needs
ALTER_CONFIGS on the cluster. Accepted changes are one durable write and apply to the
next request."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE
from yak.protocol.kio_compat import ErrorCode, build, error_code, schema_module
from yak.security.acl import AclOperation
from yak.security.quota import AlterEntry

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("alter_client_quotas", ctx.api_version, "response")
    entries = [
        AlterEntry([(e.entity_type, e.entity_name) for e in entry.entity],
                   [(o.key, float(o.value), bool(o.remove)) for o in entry.ops])
        for entry in request.entries
    ]
    if not ctx.cluster_authorized(AclOperation.ALTER_CONFIGS):
        results = [(e.entity, ErrorCode.cluster_authorization_failed, None) for e in entries]
    else:
        done = await ctx.broker.quotas.alter(entries, bool(request.validate_only))
        results = [(r.entity, error_code(r.error_code), r.error_message) for r in done]
    return build(
        m.AlterClientQuotasResponse,
        throttle_time=NO_THROTTLE,
        entries=tuple(
            build(m.EntryData, error_code=code, error_message=message,
                  entity=tuple(build(m.EntityData, entity_type=t, entity_name=n)
                               for t, n in entity))
            for entity, code, message in results
        ),
    )
