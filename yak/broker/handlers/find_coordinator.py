"""FindCoordinator: this broker coordinates every group (and transaction) it knows of.

v0-3 ask for one key, v4+ for a list (KIP-699); both are answered from the same
lookup. Yak is a single coordinator node, so the answer is this broker's advertised
address whenever the matching coordinator is running.
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


def _lookup(ctx: RequestContext, key_type: int, key: str) -> ErrorCode:
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
        ok = broker.txn_coordinator is not None
        return ErrorCode.none if ok else ErrorCode.coordinator_not_available
    return ErrorCode.invalid_request


def _answer(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, tuple[int, str, int]]:
    broker = ctx.broker
    code = _lookup(ctx, key_type, key)
    endpoint = broker.endpoint(ctx.listener_name)  # of the listener asked on
    if endpoint is None and code is ErrorCode.none:
        code = ErrorCode.coordinator_not_available
    if code is ErrorCode.none and endpoint is not None:
        return code, (broker.node_id, endpoint[0], endpoint[1])
    return code, (-1, "", -1)


async def handle(ctx: RequestContext, request: Any) -> Any:
    key_type = int(getattr(request, "key_type", 0))
    if ctx.api_version < 4:
        code, node = _answer(ctx, key_type, request.key)
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
        code, node = _answer(ctx, key_type, key)
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
