"""CreateAcls: store ACL bindings (needs ALTER on the cluster).

The authorizer validates each binding (Kafka's rules and messages) and stores the valid
ones in one durable write; a binding is enforced from the next request once stored.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._acl import authorizer
from yak.broker.handlers._admin import NO_THROTTLE, outcome
from yak.errors import KafkaError
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AccessControlEntry, AclBinding, AclOperation, ResourcePattern

API_KEY = 30
MIN_VERSION = 1
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("create_acls", ctx.api_version, "response")
    a = authorizer(ctx, AclOperation.ALTER)
    if isinstance(a, KafkaError):
        results: list[BaseException | None] = [a] * len(request.creations)
    else:
        bindings = [
            AclBinding(
                ResourcePattern.from_wire(c.resource_type, c.resource_name,
                                          c.resource_pattern_type),
                AccessControlEntry.from_wire(c.principal, c.host, c.operation,
                                             c.permission_type),
            )
            for c in request.creations
        ]
        results = list(await a.create_acls(bindings, ctx.api_version))
    out = []
    for r in results:
        code, message = outcome(r)
        out.append(build(m.AclCreationResult, error_code=code, error_message=message))
    return build(m.CreateAclsResponse, throttle_time=NO_THROTTLE, results=tuple(out))
