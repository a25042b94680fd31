"""FindCoordinator: the coordinator of a group (key type 0), a transactional id (1) or a
share partition's state (2, KIP-932: `_share.share_coordinator_node`).

v0-3 ask for one key, v4+ for a list (KIP-699); both are answered from the same
lookup, `broker.coordinators` (yak/cluster/coordinators.py): the coordinator is the leader
of the key's `__consumer_offsets` / `__transaction_state` partition (the topic is created
by the first lookup in a cluster), answered at its endpoint on the listener asked on.
COORDINATOR_LOAD_IN_PROGRESS while this broker loads the partition,
COORDINATOR_NOT_AVAILABLE while it has no leader: the client asks again.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response, response_module
from yak.broker.handlers._share import SHARE_KEY_TYPE, share_coordinator_node
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

_GROUP, _TRANSACTION = 0, 1


async def _lookup(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, int]:
    broker = ctx.broker
    # Kafka: DESCRIBE on the group / transactional id the coordinator is asked for.
    if key_type == _GROUP and not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed, -1
    if key_type == _TRANSACTION and not ctx.authorized(
            AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed, -1
    locator = broker.coordinators
    if locator is None:
        return ErrorCode.coordinator_not_available, -1
    if key_type == _GROUP:
        return await locator.group(key)
    if key_type == _TRANSACTION:
        return await locator.transaction(key)
    if key_type == SHARE_KEY_TYPE:
        return await share_coordinator_node(ctx, key)
    return ErrorCode.invalid_request, -1


async def _answer(
    ctx: RequestContext, key_type: int, key: str
) -> tuple[ErrorCode, tuple[int, str, int]]:
    code, node_id = await _lookup(ctx, key_type, key)
    node = ctx.broker.cluster.node(node_id) if code is ErrorCode.none else None
    endpoint = node.endpoint(ctx.listener_name) if node is not None else None  # asked on
    if endpoint is None and code is ErrorCode.none:
        code = ErrorCode.coordinator_not_available
    if code is ErrorCode.none and endpoint is not None:
        return code, (node_id, endpoint[0], endpoint[1])
    return code, (-1, "", -1)


async def handle(ctx: RequestContext, request: Any) -> Any:
    key_type = int(getattr(request, "key_type", 0))
    if ctx.api_version < 4:
        code, node = await _answer(ctx, key_type, request.key)
        ok = code is ErrorCode.none
        return response(
            ctx,
            error_code=code,
            error_message=None if ok else code.name,
            node_id=node[0],
            host=node[1],
            port=node[2],
        )
    mod = response_module(ctx, "find_coordinator")
    coordinators = []
    for key in request.coordinator_keys:
        code, node = await _answer(ctx, key_type, key)
        ok = code is ErrorCode.none
        coordinators.append(build(
            mod.Coordinator,
            key=key,
            node_id=node[0],
            host=node[1],
            port=node[2],
            error_code=code,
            error_message=None if ok else code.name,
        ))
    return response(ctx, coordinators=tuple(coordinators))
