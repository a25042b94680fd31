"""Shared plumbing of the share-group handlers (not a handler: the registry skips `_`
modules): the share manager, topic ids to names, the leader endpoints ShareFetch and
ShareAcknowledge v1 carry, the GROUP config resource of IncrementalAlterConfigs, the
results of the share-state RPCs (83-87). Policy is in yak/share/."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response, response_module
from yak.errors import InvalidConfigurationError, InvalidRequestError
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType
from yak.security.authorizer import authorization_error
from yak.share.manager import InvalidGroupConfig
from yak.share.records import ShareKey

if TYPE_CHECKING:
    from yak.share.coordinator import ShareCoordinator
    from yak.share.manager import ShareManager


def manager(ctx: RequestContext) -> ShareManager | None:
    return ctx.broker.share


def topic_name(ctx: RequestContext, topic_id: uuid.UUID | None) -> str | None:
    if topic_id is None:
        return None
    info = ctx.broker.topics.by_id(topic_id)
    return info.name if info is not None else None


def node_endpoints(ctx: RequestContext, api_name: str, node_ids: set[int]) -> tuple[Any, ...]:
    """The endpoints of the leaders named in the response (KIP-951 style), on the
    listener the request came in on."""
    mod = response_module(ctx, api_name)
    out = []
    for node_id in sorted(n for n in node_ids if n >= 0):
        node = ctx.broker.cluster.node(node_id)
        endpoint = node.endpoint(ctx.listener_name) if node is not None else None
        if endpoint is not None:
            out.append(build(mod.NodeEndpoint, node_id=node_id, host=endpoint[0],
                             port=endpoint[1], rack=node.rack))
    return tuple(out)


# ConfigResource type GROUP (KIP-848/932), not the ACL resource type.
GROUP_CONFIG_RESOURCE = 32
_SET, _DELETE = 0, 1


def alter_group_configs(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    """IncrementalAlterConfigs on a GROUP resource: the share group's `share.*` configs,
    SET and DELETE, every value checked against the broker's `group.share.*` bounds
    (INVALID_CONFIG) before any is applied. Kept in memory (docs/share-groups.md)."""
    group_id = resource.resource_name
    if not ctx.authorized(AclOperation.ALTER_CONFIGS, ResourceType.GROUP, group_id):
        raise authorization_error(ResourceType.GROUP)
    share = manager(ctx)
    if share is None:
        raise InvalidRequestError("share groups are not available on this broker")
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    ops = [(c.name, int(c.config_operation), c.value) for c in resource.configs]
    try:
        for name, op, value in ops:
            if op not in (_SET, _DELETE):
                raise InvalidRequestError(f"{name}: only SET and DELETE apply to group configs")
            if op == _SET:
                share.check_group_config(name, value)
            else:
                share.check_group_config(name, None)
    except InvalidGroupConfig as e:
        raise InvalidConfigurationError(str(e)) from None
    if not validate_only:
        for name, op, value in ops:
            share.set_group_config(group_id, name, value if op == _SET else None)


# ---------------------------------------------------------------- the state RPCs (83-87)

def state_coordinator(ctx: RequestContext) -> ShareCoordinator | None:
    """The share coordinator of this broker (behind the manager's persister), or None."""
    share = manager(ctx)
    persister = share.persister if share is not None else None
    return persister.coordinator if persister is not None else None


def state_requests(ctx: RequestContext, request: Any
                   ) -> list[tuple[Any, list[tuple[Any, ShareKey | None, ErrorCode]]]]:
    """A share-state RPC's partitions: (topic id, [(partition data, key, error)]); the key
    is None, and the error says why, without CLUSTER_ACTION (an inter-broker API, as in
    Kafka), for a missing topic id or with no share coordinator here."""
    allowed = ctx.cluster_authorized(AclOperation.CLUSTER_ACTION)
    coordinator = state_coordinator(ctx)
    out = []
    for t in request.topics:
        parts: list[tuple[Any, ShareKey | None, ErrorCode]] = []
        for p in t.partitions:
            if not allowed:
                parts.append((p, None, ErrorCode.cluster_authorization_failed))
            elif coordinator is None:
                parts.append((p, None, ErrorCode.coordinator_not_available))
            elif t.topic_id is None:
                parts.append((p, None, ErrorCode.unknown_topic_id))
            else:
                parts.append((p, ShareKey(request.group_id, t.topic_id, p.partition),
                              ErrorCode.none))
        out.append((t.topic_id, parts))
    return out


def state_response(ctx: RequestContext, api_name: str, result_cls: str,
                   results: list[tuple[Any, list[dict[str, Any]]]]) -> Any:
    """The response: per topic, one PartitionResult per dict of its fields."""
    mod = response_module(ctx, api_name)
    return response(ctx, results=tuple(
        build(getattr(mod, result_cls), topic_id=tid, partitions=tuple(
            build(mod.PartitionResult, **_with_message(f)) for f in parts))
        for tid, parts in results))


def _with_message(fields: dict[str, Any]) -> dict[str, Any]:
    code = fields["error_code"]
    return dict(fields, error_message=None if code is ErrorCode.none else code.name)
