"""AddOffsetsToTxn: a consumer group's offsets join a producer's transaction.

The coordinator adds the group's `__consumer_offsets` partition to the transaction, so
the transaction's marker also lands where the following TxnOffsetCommit writes (which is
what makes consume-transform-produce exactly once). Kafka's checks: WRITE on the
transactional id, READ on the group.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response
from yak.broker.handlers._txn import coordinator_or_error, may_write_txn_id, wire_error
from yak.protocol.kio_compat import ErrorCode
from yak.security.acl import AclOperation, ResourceType

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not may_write_txn_id(ctx, request.transactional_id):
        return response(ctx, error_code=ErrorCode.transactional_id_authorization_failed)
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return response(ctx, error_code=ErrorCode.group_authorization_failed)
    coord = await coordinator_or_error(ctx)
    if isinstance(coord, ErrorCode):
        return response(ctx, error_code=coord)
    code = await coord.add_offsets_to_txn(request.transactional_id, int(request.producer_id),
                                          int(request.producer_epoch), request.group_id)
    return response(ctx, error_code=wire_error(ctx, code))
