"""DescribeConfigs: topic and broker configs with source, synonyms and types.

BROKER resources: this broker (its id) with every setting, dynamic ones not read-only, or
the cluster-wide default (the empty name) with the dynamic defaults set (issue 23);
BROKER_LOGGER: the broker's log levels (`_loggers.py`); GROUP (32): a group's configs
over the broker's defaults (`_share.group_config_entries`, issue 24).

The source/synonym chain is built by `yak.broker.config_view`, shared with CreateTopics
so both APIs agree on what a topic runs with.
"""

from __future__ import annotations

from typing import Any

from yak.broker.config_view import ConfigEntry, ResourceType, broker_entries, topic_entries
from yak.broker.context import RequestContext
from yak.broker.handlers._admin import NO_THROTTLE, outcome, require_cluster, require_topic
from yak.broker.handlers._loggers import logger_entries
from yak.broker.handlers._share import GROUP_CONFIG_RESOURCE, group_config_entries
from yak.errors import InvalidRequestError, UnknownTopicOrPartitionError
from yak.protocol.kio_compat import build, schema_module
from yak.security.acl import AclOperation

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4


def check_broker_resource(ctx: RequestContext, name: str, default_allowed: bool = True) -> None:
    """ "" is the cluster-wide default resource; otherwise it must be this broker's id
    (the admin clients send a broker's resource to that broker, as Kafka requires)."""
    if name == str(ctx.broker.node_id) or (default_allowed and name == ""):
        return
    expected = f"{ctx.broker.node_id} or empty string" if default_allowed else ctx.broker.node_id
    raise InvalidRequestError(f"Unexpected broker id, expected {expected}, but received {name}")


def _entries(ctx: RequestContext, resource: Any) -> list[ConfigEntry]:
    keys = resource.configuration_keys or None
    if resource.resource_type == ResourceType.TOPIC:
        require_topic(ctx, AclOperation.DESCRIBE_CONFIGS, resource.resource_name)
        info = ctx.broker.topics.get(resource.resource_name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"Topic '{resource.resource_name}' does not exist.")
        return topic_entries(info.configs, ctx.broker.config, keys)
    if resource.resource_type == ResourceType.BROKER:
        require_cluster(ctx, AclOperation.DESCRIBE_CONFIGS)
        check_broker_resource(ctx, resource.resource_name)
        return broker_entries(ctx.broker.config, keys,
                              default_resource=resource.resource_name == "")
    if resource.resource_type == ResourceType.BROKER_LOGGER:
        require_cluster(ctx, AclOperation.DESCRIBE_CONFIGS)
        check_broker_resource(ctx, resource.resource_name, default_allowed=False)
        return logger_entries(keys)
    if resource.resource_type == GROUP_CONFIG_RESOURCE:
        return group_config_entries(ctx, resource.resource_name, keys)
    raise InvalidRequestError(f"Unsupported resource type {resource.resource_type}")


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = schema_module("describe_configs", ctx.api_version, "response")
    with_synonyms = bool(getattr(request, "include_synonyms", False))
    with_docs = bool(getattr(request, "include_documentation", False))
    results = []
    for resource in request.resources:
        entries: list[ConfigEntry] = []
        try:
            entries = _entries(ctx, resource)
            err = None
        except Exception as exc:
            err = exc
        code, message = outcome(err)
        configs = tuple(
            build(
                m.DescribeConfigsResourceResult,
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=e.source,
                is_sensitive=e.is_sensitive,
                synonyms=tuple(
                    build(m.DescribeConfigsSynonym, name=s.name, value=s.value, source=s.source)
                    for s in e.synonyms
                )
                if with_synonyms
                else (),
                config_type=e.type,
                documentation=e.documentation if with_docs else None,
            )
            for e in entries
        )
        results.append(
            build(
                m.DescribeConfigsResult,
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return build(m.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))
