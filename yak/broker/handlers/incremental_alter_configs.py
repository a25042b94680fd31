"""IncrementalAlterConfigs: SET / DELETE / APPEND / SUBTRACT single topic or broker configs.

Resources: TOPIC; BROKER (one broker by id or the cluster-wide default, the empty name:
dynamic broker configs stored in the metadata, `yak.cluster.dynamic_config`, issue 23);
BROKER_LOGGER (log levels, `_loggers.py`); GROUP (share and KIP-848 consumer group configs,
`_share.alter_group_configs`, issue 24).

Unlike the legacy AlterConfigs, configs not named keep their values, so two tools
changing different configs of one topic do not undo each other. APPEND and SUBTRACT
only make sense for list-valued configs (`cleanup.policy`) and start from the effective
value, default included, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from yak.broker.config_view import (
    LIST_TOPIC_CONFIGS,
    ResourceType,
    broker_entries,
    topic_entries,
)
from yak.broker.context import RequestContext
from yak.broker.handlers._admin import dynamic_configs, require_cluster
from yak.broker.handlers._loggers import alter_loggers
from yak.broker.handlers._share import GROUP_CONFIG_RESOURCE, alter_group_configs
from yak.broker.handlers.alter_configs import answer, check_resource
from yak.broker.handlers.describe_configs import check_broker_resource
from yak.errors import InvalidRequestError, UnknownTopicOrPartitionError
from yak.security.acl import AclOperation
from yak.settings import BROKER_SETTINGS

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

# Broker settings whose values are lists (APPEND/SUBTRACT on a BROKER resource).
LIST_BROKER_CONFIGS = frozenset(k for k, spec in BROKER_SETTINGS.items() if spec.type == "list")


def _items(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def apply_ops(
    current: dict[str, str],
    effective: dict[str, str | None],
    ops: list[tuple[str, int, str | None]],
    list_configs: frozenset[str] = LIST_TOPIC_CONFIGS,
) -> dict[str, str]:
    """The resource's new configs after `ops` (name, operation, value), Kafka's semantics;
    `list_configs` are the names APPEND/SUBTRACT may change."""
    new = dict(current)
    for name, op, value in ops:
        if op == SET:
            if value is None:
                raise InvalidRequestError(f"Null value not supported for SET of config: {name}")
            new[name] = value
        elif op == DELETE:
            new.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            if name not in list_configs:
                verb = "append" if op == APPEND else "subtract"
                raise InvalidRequestError(
                    f"Config value {verb} is not allowed for config key: {name}"
                )
            base = _items(new[name] if name in new else effective.get(name))
            if op == APPEND:
                base += [v for v in _items(value) if v not in base]
            else:
                drop = set(_items(value))
                base = [v for v in base if v not in drop]
            new[name] = ",".join(base)
        else:
            raise InvalidRequestError(f"Unknown config operation {op} for config key: {name}")
    return new


async def _alter(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    if resource.resource_type == GROUP_CONFIG_RESOURCE:  # share group configs (issue 24)
        await alter_group_configs(ctx, resource, validate_only)
        return
    if resource.resource_type == ResourceType.BROKER_LOGGER:  # log levels (KIP-412)
        require_cluster(ctx, AclOperation.ALTER_CONFIGS)
        check_broker_resource(ctx, resource.resource_name, default_allowed=False)
        alter_loggers([(c.name, int(c.config_operation), c.value) for c in resource.configs],
                      validate_only)
        return
    check_resource(ctx, resource)
    ops = [(c.name, int(c.config_operation), c.value) for c in resource.configs]
    if resource.resource_type == ResourceType.BROKER:  # dynamic broker configs (issue 23)
        config = ctx.broker.config
        per_broker = resource.resource_name != ""
        effective = {e.name: e.value for e in broker_entries(
            config, [n for n, _, _ in ops], default_resource=not per_broker)}
        await dynamic_configs(ctx).replace(
            resource.resource_name,
            lambda current: apply_ops(current, effective, ops, LIST_BROKER_CONFIGS),
            validate_only=validate_only)
        return
    info = ctx.broker.topics.get(resource.resource_name)
    if info is None:
        raise UnknownTopicOrPartitionError(f"Topic '{resource.resource_name}' does not exist.")
    effective = {e.name: e.value for e in topic_entries(info.configs, ctx.broker.config)}
    new = apply_ops(info.configs, effective, ops)
    await ctx.broker.topics.alter_configs(info.name, new, validate_only=validate_only)


async def handle(ctx: RequestContext, request: Any) -> Any:
    return await answer(
        ctx, request, "incremental_alter_configs", "IncrementalAlterConfigsResponse", _alter
    )
