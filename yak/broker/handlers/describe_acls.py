"""DescribeAcls: the stored ACL bindings a filter matches (needs DESCRIBE on the cluster),
grouped by resource pattern as Kafka answers."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._acl import authorizer, binding_filter
from yak.broker.handlers._admin import NO_THROTTLE
from yak.errors import ErrorCode, KafkaError
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 29
MIN_VERSION = 1
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("describe_acls", ctx.api_version, "response")
    a = authorizer(ctx, AclOperation.DESCRIBE)
    if isinstance(a, KafkaError):
        return build(m.DescribeAclsResponse, throttle_time=NO_THROTTLE, error_code=a.code,
                     error_message=a.message or a.code.name, resources=())
    bindings = a.describe_acls(binding_filter(request), ctx.api_version)
    grouped: dict[Any, list[Any]] = {}
    for b in bindings:
        e = b.entry
        grouped.setdefault(b.pattern, []).append(build(
            m.AclDescription, principal=e.principal, host=e.host, operation=int(e.operation),
            permission_type=int(e.permission_type)))
    resources = tuple(
        build(m.DescribeAclsResource, resource_type=int(p.resource_type), resource_name=p.name,
              pattern_type=int(p.pattern_type), acls=tuple(acls))
        for p, acls in grouped.items()
    )
    return build(m.DescribeAclsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 error_message=None, resources=resources)
