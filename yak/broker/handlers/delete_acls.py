"""DeleteAcls: remove the bindings each filter matches (needs ALTER on the cluster); all
removals are one durable write, and each filter's answer lists what it removed."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._acl import authorizer, binding_fields, binding_filter
from yak.broker.handlers._admin import NO_THROTTLE, outcome
from yak.errors import ErrorCode, KafkaError
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 31
MIN_VERSION = 1
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("delete_acls", ctx.api_version, "response")
    a = authorizer(ctx, AclOperation.ALTER)
    if isinstance(a, KafkaError):
        results: list[Any] = [a] * len(request.filters)
    else:
        results = list(await a.delete_acls([binding_filter(f) for f in request.filters],
                                           ctx.api_version))
    out = []
    for r in results:
        if isinstance(r, list):
            matching = tuple(
                build(m.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                      **binding_fields(b))
                for b in r
            )
            out.append(build(m.DeleteAclsFilterResult, error_code=ErrorCode.none,
                             error_message=None, matching_acls=matching))
        else:
            code, message = outcome(r)
            out.append(build(m.DeleteAclsFilterResult, error_code=code, error_message=message,
                             matching_acls=()))
    return build(m.DeleteAclsResponse, throttle_time=NO_THROTTLE, filter_results=tuple(out))
