"""EndTxn: commit or abort the producer's ongoing transaction.

Answered as soon as the decision (PrepareCommit/PrepareAbort) is in `__transaction_state`;
the coordinator then writes the markers and completes the transaction. No transaction →
INVALID_TXN_STATE; a stale epoch → PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2).
v5 belongs to transaction version 2 (an epoch bump per transaction), not offered.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response
from yak.broker.handlers._txn import coordinator_or_error, may_write_txn_id, wire_error
from yak.protocol.kio_compat import ErrorCode

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not may_write_txn_id(ctx, request.transactional_id):
        return response(ctx, error_code=ErrorCode.transactional_id_authorization_failed)
    coord = await coordinator_or_error(ctx)
    if isinstance(coord, ErrorCode):
        return response(ctx, error_code=coord)
    code = await coord.end_txn(request.transactional_id, int(request.producer_id),
                               int(request.producer_epoch), bool(request.committed))
    return response(ctx, error_code=wire_error(ctx, code))
