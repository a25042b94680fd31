"""AlterConfigs (legacy): REPLACE a topic's whole set of overrides.

Configs left out of the request go back to their defaults — that is the legacy API's
contract and why Kafka added IncrementalAlterConfigs. Changes apply to the live logs
at once (`ClusterTopicManager.alter_configs`). Broker configs are static in Yak: altering them
is refused with a message saying where to set them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from yak.broker.config_view import ResourceType
from yak.broker.context import RequestContext
from yak.broker.handlers._admin import (
    NO_THROTTLE,
    duplicates,
    outcome,
    require_cluster,
    require_topic,
)
from yak.broker.handlers.describe_configs import check_broker_resource
from yak.errors import InvalidRequestError
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


def refuse_broker_change(ctx: RequestContext, resource: Any) -> None:
    require_cluster(ctx, AclOperation.ALTER_CONFIGS)
    check_broker_resource(ctx, resource.resource_name)
    names = ", ".join(c.name for c in resource.configs)
    raise InvalidRequestError(
        f"Cannot update these configs dynamically: {names}; Yak broker settings are static"
        " (set them in the config file or with --set and restart)"
    )


def check_topic_resource(ctx: RequestContext, resource: Any) -> None:
    """What both AlterConfigs APIs refuse before looking at values: broker and unknown
    resource types, and a config named twice."""
    if resource.resource_type == ResourceType.BROKER:
        refuse_broker_change(ctx, resource)
    if resource.resource_type != ResourceType.TOPIC:
        raise InvalidRequestError(f"Unsupported resource type {resource.resource_type}")
    require_topic(ctx, AclOperation.ALTER_CONFIGS, resource.resource_name)
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
    check_topic_resource(ctx, resource)
    configs: dict[str, str] = {}
    for c in resource.configs:
        if c.value is None:
            raise InvalidRequestError(f"Null value not supported for topic config: {c.name}")
        configs[c.name] = c.value
    await ctx.broker.topics.alter_configs(resource.resource_name, configs,
                                          validate_only=validate_only)


async def handle(ctx: RequestContext, request: Any) -> Any:
    return await answer(ctx, request, "alter_configs", "AlterConfigsResponse", _alter)
