"""AlterConfigs (legacy): REPLACE a topic's or a broker's whole set of dynamic configs.

Configs left out of the request go back to their defaults — that is the legacy API's
contract and why Kafka added IncrementalAlterConfigs. Topic changes apply to the live logs
at once (`ClusterTopicManager.alter_configs`); BROKER resources (one broker by id, or the
cluster-wide default, the empty name) are stored in the metadata and applied live by every
broker (`yak.cluster.dynamic_config`, issue 23). A read-only broker setting is refused
with INVALID_REQUEST naming it. GROUP resources (issue 24): the group's whole set of
group configs (`_share.replace_group_configs`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from yak.broker.config_view import ResourceType
from yak.broker.context import RequestContext
from yak.broker.handlers._admin import (
    NO_THROTTLE,
    duplicates,
    dynamic_configs,
    outcome,
    require_cluster,
    require_topic,
)
from yak.broker.handlers._share import GROUP_CONFIG_RESOURCE, replace_group_configs
from yak.broker.handlers.describe_configs import check_broker_resource
from yak.errors import InvalidRequestError
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


def check_resource(ctx: RequestContext, resource: Any) -> None:
    """What both AlterConfigs APIs refuse before looking at values: a caller without the
    right, a BROKER resource of another broker, an unknown resource type, a config named
    twice. TOPIC and BROKER resources pass; the callers dispatch on the type."""
    if resource.resource_type == ResourceType.BROKER:
        require_cluster(ctx, AclOperation.ALTER_CONFIGS)
        check_broker_resource(ctx, resource.resource_name)
    elif resource.resource_type == ResourceType.TOPIC:
        require_topic(ctx, AclOperation.ALTER_CONFIGS, resource.resource_name)
    else:
        raise InvalidRequestError(f"Unsupported resource type {resource.resource_type}")
    dup = duplicates([c.name for c in resource.configs])
    if dup:
        raise InvalidRequestError(f"Error due to duplicate config keys: {', '.join(sorted(dup))}")


async def answer(
    ctx: RequestContext,
    request: Any,
    api_name: str,
    response_name: str,
    alter: Callable[[RequestContext, Any, bool], Awaitable[None]],
) -> Any:
    """Apply `alter` to each resource and answer each with its own error code."""
    m = schema_module(api_name, ctx.api_version, "response")
    results = []
    for resource in request.resources:
        try:
            await alter(ctx, resource, request.validate_only)
            err = None
        except Exception as exc:
            err = exc
        code, message = outcome(err)
        results.append(
            build(
                m.AlterConfigsResourceResponse,
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return build(getattr(m, response_name), throttle_time=NO_THROTTLE, responses=tuple(results))


async def _alter(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    if resource.resource_type == GROUP_CONFIG_RESOURCE:
        await replace_group_configs(ctx, resource, validate_only)
        return
    check_resource(ctx, resource)
    kind = "topic" if resource.resource_type == ResourceType.TOPIC else "broker"
    configs: dict[str, str] = {}
    for c in resource.configs:
        if c.value is None:
            raise InvalidRequestError(f"Null value not supported for {kind} config: {c.name}")
        configs[c.name] = c.value
    if resource.resource_type == ResourceType.BROKER:
        await dynamic_configs(ctx).replace(
            resource.resource_name, lambda _current: configs, validate_only=validate_only)
        return
    await ctx.broker.topics.alter_configs(resource.resource_name, configs,
                                          validate_only=validate_only)


async def handle(ctx: RequestContext, request: Any) -> Any:
    return await answer(ctx, request, "alter_configs", "AlterConfigsResponse", _alter)
