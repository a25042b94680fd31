"""Shared plumbing of the transaction handlers (not a handler: the registry skips `_`
modules).

The handlers translate requests into `TransactionCoordinator` calls and answers back;
every policy (states, fencing, timeouts, markers) is the coordinator's. Each answers
COORDINATOR_NOT_AVAILABLE while the broker has no coordinator, and gives old clients the
error codes they know (`compat_error`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yak.broker.context import RequestContext
from yak.protocol.kio_compat import ErrorCode
from yak.security.acl import AclOperation, ResourceType
from yak.txn.coordinator import compat_error

if TYPE_CHECKING:
    from yak.txn.coordinator import TransactionCoordinator

__all__ = ["coordinator_or_error", "may_write_txn_id", "wire_error"]


async def coordinator_or_error(ctx: RequestContext) -> TransactionCoordinator | ErrorCode:
    """The coordinator, with `__transaction_state` created and loaded; else the error."""
    broker = ctx.broker
    coord = broker.txn_coordinator
    if coord is None or broker.txn_state is None:
        return ErrorCode.coordinator_not_available
    code = await broker.txn_state.ensure_ready()
    return coord if code is ErrorCode.none else code


def may_write_txn_id(ctx: RequestContext, transactional_id: str) -> bool:
    """Kafka: WRITE on the transactional id for every producer-side transaction request."""
    return ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def wire_error(ctx: RequestContext, code: ErrorCode) -> ErrorCode:
    """The code this request's version can carry."""
    return compat_error(ctx.api_key, ctx.api_version, code)
