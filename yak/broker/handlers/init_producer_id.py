"""InitProducerId: producer ids for idempotent (and, via the coordinator, transactional)
producers.

Idempotent producers get their id and epoch from the broker's `ProducerIdManager`
(cluster-unique id blocks from the metadata store, KIP-360 epoch bumps, INVALID_PRODUCER_EPOCH
for a stale epoch). Transactional ids belong to the transaction coordinator
(`broker.txn_coordinator`): it fences older epochs, aborts a dangling transaction (the
client gets CONCURRENT_TRANSACTIONS and retries until the abort is done), rotates an
exhausted epoch to a new producer id and enforces `transaction.max.timeout.ms`; old
versions get INVALID_PRODUCER_EPOCH where newer ones get PRODUCER_FENCED.
"""

from __future__ import annotations

import datetime
from typing import Any

from yak.broker.context import RequestContext
from yak.errors import KafkaError
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.security.acl import AclOperation, ResourceType
from yak.txn.coordinator import compat_error

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5

_ZERO = datetime.timedelta(0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = kio_compat.response_class(API_KEY, ctx.api_version)
    broker = ctx.broker

    def reply(code: ErrorCode, pid: int = -1, epoch: int = -1) -> Any:
        return kio_compat.build(cls, throttle_time=_ZERO, error_code=code, producer_id=pid,
                                producer_epoch=epoch)

    producer_id = int(getattr(request, "producer_id", -1))
    producer_epoch = int(getattr(request, "producer_epoch", -1))
    if request.transactional_id is not None:
        if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                              request.transactional_id):
            return reply(ErrorCode.transactional_id_authorization_failed)
    elif not _may_write_idempotently(ctx):
        return reply(ErrorCode.cluster_authorization_failed)
    try:
        if request.transactional_id is not None:
            coordinator = broker.txn_coordinator
            if coordinator is None or broker.txn_state is None:
                return reply(ErrorCode.coordinator_not_available)
            ready = await broker.txn_state.ensure_ready()
            if ready is not ErrorCode.none:
                return reply(ready)
            result = await coordinator.init_producer_id(
                request.transactional_id,
                kio_compat.timedelta_to_ms(request.transaction_timeout),
                producer_id,
                producer_epoch,
            )
            code = compat_error(API_KEY, ctx.api_version, result.error)
            return reply(code, result.producer_id, result.producer_epoch)
        else:
            pid, epoch = await broker.producer_ids.init_producer_id(producer_id, producer_epoch)
    except KafkaError as e:
        return reply(e.code)
    return reply(ErrorCode.none, pid, epoch)


def _may_write_idempotently(ctx: RequestContext) -> bool:
    """Kafka: IDEMPOTENT_WRITE on the cluster, or WRITE on at least one topic."""
    if ctx.cluster_authorized(AclOperation.IDEMPOTENT_WRITE):
        return True
    authorizer = ctx.broker.authorizer
    return authorizer is None or authorizer.authorize_by_resource_type(
        ctx.principal, ctx.client_ip, AclOperation.WRITE, ResourceType.TOPIC)
