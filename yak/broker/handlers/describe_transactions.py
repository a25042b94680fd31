"""DescribeTransactions: state, producer, timeout, start time and partitions of
transactional ids (`kafka-transactions.sh describe`, `yak txn describe`). An id the
caller may not DESCRIBE is TRANSACTIONAL_ID_AUTHORIZATION_FAILED; an unknown one
TRANSACTIONAL_ID_NOT_FOUND."""

from __future__ import annotations

import datetime
from typing import Any

from yak.broker.context import RequestContext
from yak.broker.handlers._group import response, response_module
from yak.broker.handlers._txn import coordinator_or_error
from yak.protocol.kio_compat import ErrorCode, build, ms_to_timedelta
from yak.security.acl import AclOperation, ResourceType
from yak.txn.coordinator import TransactionDescription

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0


def _time(ms: int) -> datetime.datetime:
    """The field is not nullable in kio: -1 (no transaction) is 1 ms before the epoch."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


async def handle(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ctx, "describe_transactions")
    ids = list(request.transactional_ids)
    allowed = [i for i in ids
               if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, i)]
    found: dict[str, TransactionDescription] = {}
    coord = await coordinator_or_error(ctx)
    if allowed:
        if isinstance(coord, ErrorCode):
            found = {i: TransactionDescription(i, coord) for i in allowed}
        else:
            found = {d.transactional_id: d for d in coord.describe_transactions(allowed)}
    states = []
    for i in ids:
        d = found.get(i) or TransactionDescription(i, ErrorCode.transactional_id_authorization_failed)
        states.append(build(
            mod.TransactionState,
            error_code=d.error,
            transactional_id=i,
            transaction_state=d.state,
            transaction_timeout=ms_to_timedelta(d.transaction_timeout_ms),
            transaction_start_time=_time(d.transaction_start_time_ms),
            producer_id=d.producer_id,
            producer_epoch=d.producer_epoch,
            topics=tuple(build(mod.TopicData, topic=t, partitions=tuple(ps))
                         for t, ps in d.topics.items()),
        ))
    return response(ctx, transaction_states=tuple(states))
