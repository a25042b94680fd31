"""FindCoordinator: the coordinator of a group (key type 0) or a transactional id (1).

v0-3 ask for one key, v4+ for a list (KIP-699); both are answered from the same
lookup. Groups: this broker coordinates every group while its group coordinator runs.
Transactional ids: the first lookup creates `__transaction_state` (as Kafka does) and
loads its partitions; the answer is this broker when it leads the id's partition and
has loaded it (COORDINATOR_LOAD_IN_PROGRESS while loading, NOT_COORDINATOR otherwise:
the client asks again).
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response, response_module
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

_GROUP, _TRANSACTION = 0, 1


async def _lookup(ctx: RequestContext, key_type: int, key: str) -> ErrorCode:
    broker = ctx.broker
    # Kafka: DESCRIBE on the group / transactional id the coordinator is asked for.
    if key_type == _GROUP and not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed
    if key_type == _TRANSACTION and not ctx.authorized(
            AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed
    if key_type == _GROUP:
        coord = broker.group_coordinator
        if coord is None:
            return ErrorCode.coordinator_not_available
        return ErrorCode.none if coord.loaded else ErrorCode.coordinator_load_in_progress
    if key_type == _TRANSACTION:
        if broker.txn_state is None or broker.txn_coordinator is None:
            return ErrorCode.coordinator_not_available
        code = await broker.txn_state.ensure_ready()
        if code is not ErrorCode.none:
            return code
        return broker.txn_coordinator.coordinator_error(key)
    return ErrorCode.invalid_request


async def _answer(
    ctx: RequestContext, key_type: int, key: str
) -> tuple[ErrorCode, tuple[int, str, int]]:
    broker = ctx.broker
    code = await _lookup(ctx, key_type, key)
    endpoint = broker.endpoint(ctx.listener_name)  # of the listener asked on
    if endpoint is None and code is ErrorCode.none:
        code = ErrorCode.coordinator_not_available
    if code is ErrorCode.none and endpoint is not None:
        return code, (broker.node_id, endpoint[0], endpoint[1])
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
