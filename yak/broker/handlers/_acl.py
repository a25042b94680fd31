"""Shared by the ACL handlers: the authorizer (or the error to answer), wire <-> model."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.errors import KafkaError, SecurityDisabledError
from yak.security.acl import AclBinding, AclBindingFilter, AclOperation, ResourceType
from yak.security.authorizer import StandardAuthorizer, authorization_error


def authorizer(ctx: RequestContext, operation: AclOperation) -> StandardAuthorizer | KafkaError:
    """The authorizer once the caller may do `operation` on the cluster; otherwise the
    error to answer: SECURITY_DISABLED without an authorizer (Kafka: "No Authorizer is
    configured"), CLUSTER_AUTHORIZATION_FAILED for a caller without the right."""
    a = ctx.broker.authorizer
    if a is None:
        return SecurityDisabledError("No Authorizer is configured.")
    if not ctx.cluster_authorized(operation):
        return authorization_error(ResourceType.CLUSTER)
    return a


def binding_filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter.from_wire(
        f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
        f.principal_filter, f.host_filter, f.operation, f.permission_type,
    )


def binding_fields(b: AclBinding) -> dict[str, Any]:
    p, e = b.pattern, b.entry
    return {
        "resource_type": int(p.resource_type), "resource_name": p.name,
        "pattern_type": int(p.pattern_type), "principal": e.principal, "host": e.host,
        "operation": int(e.operation), "permission_type": int(e.permission_type),
    }
