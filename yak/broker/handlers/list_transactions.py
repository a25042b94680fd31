"""ListTransactions: the transactional ids this coordinator owns, filtered by state
(v0), producer id (v0), minimum age (v1, KIP-994) and an id regular expression (v2);
only ids the caller may DESCRIBE are listed (Kafka's rule)."""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response, response_module
from yak.broker.handlers._txn import coordinator_or_error
from yak.protocol.kio_compat import ErrorCode, build
from yak.security.acl import AclOperation, ResourceType

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ctx, "list_transactions")
    coord = await coordinator_or_error(ctx)
    if isinstance(coord, ErrorCode):
        return response(ctx, error_code=coord, unknown_state_filters=(), transaction_states=())
    result = coord.list_transactions(
        tuple(request.state_filters),
        tuple(int(p) for p in request.producer_id_filters),
        int(getattr(request, "duration_filter", -1)),
        getattr(request, "transactional_id_pattern", None),
    )
    listed = tuple(
        build(mod.TransactionState, transactional_id=t.transactional_id,
              producer_id=t.producer_id, transaction_state=t.state)
        for t in result.transactions
        if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                          t.transactional_id)
    )
    return response(ctx, error_code=result.error,
                    unknown_state_filters=tuple(result.unknown_state_filters),
                    transaction_states=listed)
