"""InitProducerId: producer ids for idempotent (and, via the coordinator, transactional)
producers.

Ids come from the metadata store's persisted block allocation, so an id is never handed
out twice, even across restarts. KIP-360: a producer that passes its current id and
epoch (after an UNKNOWN_PRODUCER_ID or a sequence error) keeps its id and gets epoch + 1,
which resets its sequence numbers without losing its identity; at the epoch ceiling it
gets a fresh id. A stale epoch for an id whose current epoch this broker knows is
fenced with INVALID_PRODUCER_EPOCH.

Transactional ids belong to the transaction coordinator (`broker.txn_coordinator`,
which exposes `init_producer_id(...)`); without one the request is refused with
COORDINATOR_NOT_AVAILABLE rather than pretending to support transactions.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from yak.broker.context import RequestContext
from yak.errors import KafkaError
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5

MAX_EPOCH = 32767
_ZERO = datetime.timedelta(0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = kio_compat.response_class(API_KEY, ctx.api_version)
    broker = ctx.broker
    loop = asyncio.get_running_loop()

    def reply(code: ErrorCode, pid: int = -1, epoch: int = -1) -> Any:
        return kio_compat.build(cls, throttle_time=_ZERO, error_code=code, producer_id=pid,
                                producer_epoch=epoch)

    if request.transactional_id is not None:
        coordinator = broker.txn_coordinator
        if coordinator is None:
            return reply(ErrorCode.coordinator_not_available)
        try:
            pid, epoch = await coordinator.init_producer_id(
                request.transactional_id,
                kio_compat.timedelta_to_ms(request.transaction_timeout),
                getattr(request, "producer_id", -1),
                getattr(request, "producer_epoch", -1),
            )
        except KafkaError as e:
            return reply(e.code)
        return reply(ErrorCode.none, pid, epoch)

    epochs = broker.producer_epochs
    pid = int(getattr(request, "producer_id", -1))
    epoch = int(getattr(request, "producer_epoch", -1))
    if pid >= 0 and epoch >= 0:
        current = epochs.get(pid)
        if current is not None and epoch != current:
            return reply(ErrorCode.invalid_producer_epoch)
        if current is not None or _was_allocated(broker, pid):
            if epoch < MAX_EPOCH:
                epochs[pid] = epoch + 1
                return reply(ErrorCode.none, pid, epoch + 1)
        else:
            return reply(ErrorCode.invalid_producer_epoch)
    # allocation may write the metadata file (fsync): keep it off the event loop
    new_pid = await loop.run_in_executor(broker.io_pool, broker.metadata.allocate_producer_id)
    epochs[new_pid] = 0
    return reply(ErrorCode.none, new_pid, 0)


def _was_allocated(broker: Any, pid: int) -> bool:
    """Ids below the persisted block end were handed out by this cluster at some point."""
    allocated = getattr(broker.metadata, "producer_id_allocated", None)
    if allocated is not None:
        return bool(allocated(pid))
    end = getattr(broker.metadata, "_producer_id_block_end", 0)
    return 0 <= pid < end
