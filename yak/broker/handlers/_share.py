"""Shared plumbing of the share-group handlers (not a handler: the registry skips `_`
modules): the share manager, topic ids to names, the leader endpoints ShareFetch and
ShareAcknowledge v1 carry, the GROUP config resource (DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs), the results of the share-state RPCs (83-87), share groups in
ListGroups / DescribeGroups and FindCoordinator's share key type. Policy is in yak/share/."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from yak.broker.config_view import ConfigEntry, ConfigSource, ConfigType, Synonym, broker_entries
from yak.broker.context import RequestContext
from yak.broker.handlers._group import response, response_module
from yak.errors import InvalidConfigurationError, InvalidRequestError
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType
from yak.security.authorizer import authorization_error
from yak.share.group_configs import (
    DYNAMIC_GROUP_CONFIG,
    GROUP_KEYS,
    InvalidGroupConfig,
    validate_group_configs,
)
from yak.share.records import SHARE_STATE_TOPIC, ShareKey

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
_TYPES = {"int": ConfigType.INT, "string": ConfigType.STRING}


def _group_resource(ctx: RequestContext, group_id: str, op: AclOperation) -> None:
    if not group_id:
        raise InvalidRequestError("Group name must not be empty")
    if not ctx.authorized(op, ResourceType.GROUP, group_id):
        raise authorization_error(ResourceType.GROUP)


def _broker_settings(ctx: RequestContext) -> dict[str, ConfigEntry]:
    """The broker settings group configs default to and are bounded by, each with its
    value and synonym chain as DescribeConfigs on this broker shows it."""
    names = [n for k in GROUP_KEYS.values() for n in (k.broker_key, k.lo, k.hi)
             if isinstance(n, str)]
    return {e.name: e for e in broker_entries(ctx.broker.config, names)}


def _stored(ctx: RequestContext, group_id: str) -> dict[str, str]:
    share = manager(ctx)
    return share.group_config(group_id) if share is not None else {}


def group_config_entries(ctx: RequestContext, group_id: str,
                         keys: Iterable[str] | None) -> list[ConfigEntry]:
    """DescribeConfigs on a GROUP resource, Kafka's ConfigHelper: every group config
    (those named in `keys`, if any), for any group id (a group that does not exist runs
    with the defaults too); the group's own value is DYNAMIC_GROUP_CONFIG, above the
    broker setting it defaults to (`group.<key>`, with that setting's own chain:
    dynamic, STATIC_BROKER_CONFIG, DEFAULT_CONFIG), or Kafka's default of the group
    config when no broker setting names it."""
    _group_resource(ctx, group_id, AclOperation.DESCRIBE_CONFIGS)
    stored = _stored(ctx, group_id)
    broker = _broker_settings(ctx)
    wanted = set(keys) if keys else None
    out = []
    for spec in sorted(GROUP_KEYS.values(), key=attrgetter("name")):
        if wanted is not None and spec.name not in wanted:
            continue
        synonyms: list[Synonym] = []
        if spec.name in stored:
            synonyms.append(Synonym(spec.name, stored[spec.name], DYNAMIC_GROUP_CONFIG))
        if spec.broker_key is not None:
            synonyms += broker[spec.broker_key].synonyms
        elif spec.default is not None:
            synonyms.append(Synonym(spec.name, spec.default, ConfigSource.DEFAULT_CONFIG))
        value, source = ((synonyms[0].value, synonyms[0].source) if synonyms
                         else (None, ConfigSource.DEFAULT_CONFIG))
        out.append(ConfigEntry(spec.name, value, source, read_only=False,
                               type=_TYPES[spec.type], synonyms=tuple(synonyms),
                               documentation=spec.doc))
    return out


async def _apply_group_configs(ctx: RequestContext, group_id: str, new: dict[str, str],
                               changes: list[tuple[str, str | None]],
                               validate_only: bool) -> None:
    """Check the group's whole new set (`new`) against the broker's bounds
    (INVALID_CONFIG naming the key), then store `changes` (None: a delete) in one write,
    durable and cluster-wide (the metadata store's `group_configs/<group>` document,
    `yak/share/group_configs.py`), unless `validate_only`."""
    share = manager(ctx)
    if share is None:
        raise InvalidRequestError("group configs are not available on this broker")
    broker = _broker_settings(ctx)
    try:
        validate_group_configs(lambda n: broker[n].value, share.topics, new)
        for key, value in changes:
            share.check_group_config(key, value)
        if not validate_only:
            await share.alter_group_configs(group_id, changes)
    except InvalidGroupConfig as e:
        raise InvalidConfigurationError(str(e)) from None


async def alter_group_configs(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    """IncrementalAlterConfigs on a GROUP resource: SET and DELETE; keys not named keep
    their values."""
    group_id = resource.resource_name
    _group_resource(ctx, group_id, AclOperation.ALTER_CONFIGS)
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    new = dict(_stored(ctx, group_id))
    changes: list[tuple[str, str | None]] = []
    for c in resource.configs:
        op = int(c.config_operation)
        if op not in (_SET, _DELETE):
            raise InvalidRequestError(f"{c.name}: only SET and DELETE apply to group configs")
        if op == _SET and c.value is None:
            raise InvalidRequestError(f"Null value not supported for SET of config: {c.name}")
        value = c.value if op == _SET else None
        changes.append((c.name, value))
        if value is None:
            new.pop(c.name, None)
        else:
            new[c.name] = value
    await _apply_group_configs(ctx, group_id, new, changes, validate_only)


async def replace_group_configs(ctx: RequestContext, resource: Any,
                                validate_only: bool) -> None:
    """AlterConfigs (legacy) on a GROUP resource: the group's whole set becomes the
    request's configs; every other group config goes back to its default (one write)."""
    group_id = resource.resource_name
    _group_resource(ctx, group_id, AclOperation.ALTER_CONFIGS)
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    new: dict[str, str] = {}
    for c in resource.configs:
        if c.value is None:
            raise InvalidRequestError(f"Null value not supported for group config: {c.name}")
        new[c.name] = c.value
    gone = sorted((set(GROUP_KEYS) | set(_stored(ctx, group_id))) - set(new))
    changes = [*new.items(), *((k, None) for k in gone)]
    await _apply_group_configs(ctx, group_id, new, changes, validate_only)


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


# ---------------------------------------------------------------- groups APIs

@dataclass(frozen=True)
class ShareListing:
    """A share group as ListGroups lists it (the group coordinator's GroupListing shape)."""

    group_id: str
    state: str
    protocol_type: str = "share"
    group_type: str = "share"


def share_listings(ctx: RequestContext, states: Any) -> list[Any]:
    share = manager(ctx)
    if share is None:
        return []
    return [ShareListing(gid, state) for gid, state in share.list_groups(states)]


def describe_share_group(ctx: RequestContext, mod: Any, group_id: str, ops: int) -> Any | None:
    """DescribeGroups' answer for a share group (protocol type "share", its members
    without metadata or assignment bytes: theirs is ShareGroupDescribe's), or None if
    `group_id` is not one."""
    share = manager(ctx)
    g = share.groups.get(group_id) if share is not None else None
    if g is None:
        return None
    return build(
        mod.DescribedGroup, error_code=ErrorCode.none, error_message=None, group_id=group_id,
        group_state="Stable" if g.members else "Empty", protocol_type="share",
        protocol_data="", authorized_operations=ops, members=tuple(
            build(mod.DescribedGroupMember, member_id=m.member_id, group_instance_id=None,
                  client_id=m.client_id, client_host=m.client_host, member_metadata=b"",
                  member_assignment=b"") for m in g.members.values()))


SHARE_KEY_TYPE = 2  # FindCoordinator's key type for a share partition (KIP-932)


async def share_coordinator_node(ctx: RequestContext, key: str) -> tuple[ErrorCode, int]:
    """FindCoordinator key type 2: "group:topicId:partition" (Kafka's
    SharePartitionKey, the topic id in Kafka's base64 form) -> the leader of its
    `__share_group_state` partition, the topic created on first use. CLUSTER_ACTION,
    as Kafka asks (brokers send it)."""
    if not ctx.cluster_authorized(AclOperation.CLUSTER_ACTION):
        return ErrorCode.cluster_authorization_failed, -1
    coordinator = state_coordinator(ctx)
    if coordinator is None or ctx.broker.coordinators is None:
        return ErrorCode.coordinator_not_available, -1
    parts = key.rsplit(":", 2)
    try:
        tid = uuid.UUID(bytes=base64.urlsafe_b64decode(parts[1] + "=="))
        share_key = ShareKey(parts[0], tid, int(parts[2]))
    except (IndexError, ValueError):
        return ErrorCode.invalid_request, -1
    if not coordinator.writer.exists():
        await coordinator.ensure_ready(share_key)
    leader = ctx.broker.coordinators.leader_of(SHARE_STATE_TOPIC,
                                                coordinator.partition_for(share_key))
    if leader < 0:
        return ErrorCode.coordinator_not_available, -1
    return ErrorCode.none, leader


def share_topics(ctx: RequestContext) -> list[tuple[str, uuid.UUID, int]]:
    """(name, id, partitions) of every topic a share group may have state on (internal
    topics have no share partitions): what a share-group delete looks through."""
    return [(t.name, t.topic_id, t.partitions) for t in ctx.broker.topics.topics()
            if not t.name.startswith("__")]
