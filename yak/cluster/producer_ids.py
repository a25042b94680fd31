"""Producer ids for InitProducerId, in cluster-unique blocks (Kafka's ProducerIdManager).

A broker reserves a block of ids in the metadata store (KRaft's ProducerIdsRecord: the
next id not yet reserved) and hands them out from memory; only reserving a block writes
the store, so a restart skips the unused rest of its block rather than ever reusing an id.
With an etcd store the reservation is a compare-and-set, so brokers never share a block.

For idempotent producers it also keeps the current epoch of every id it handed out since
start, for KIP-360: a producer that comes back with its id and epoch (after
UNKNOWN_PRODUCER_ID or a sequence error) keeps its id with epoch + 1, which resets its
sequence numbers without losing its identity; at the epoch ceiling it gets a fresh id.
Transactional ids belong to the transaction coordinator (issue 12), not here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from yak.errors import InvalidProducerEpochError

if TYPE_CHECKING:
    from yak.cluster.metadata import MetadataView

__all__ = ["BLOCK_SIZE", "MAX_EPOCH", "ProducerIdManager"]

BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_EPOCH = 32767


class ProducerIdManager:
    """`allocate`: a coroutine reserving a block in the metadata store (a compare-and-set,
    in etcd or in a single broker's local KV store)."""

    def __init__(self, store: MetadataView, block_size: int = BLOCK_SIZE, *,
                 allocate: Callable[[int], Awaitable[int]]) -> None:
        self._store = store
        self._block_size = block_size
        self._allocate = allocate
        self._async_lock: asyncio.Lock | None = None
        self._next = 0
        self._block_end = 0  # nothing reserved yet: the first id reserves a block
        # Current epoch per idempotent producer id handed out since start (KIP-360 bumps).
        self._epochs: dict[int, int] = {}

    async def new_producer_id(self) -> int:
        """A producer id never handed out before, reserving a block when needed."""
        if self._async_lock is None:
            self._async_lock = asyncio.Lock()
        async with self._async_lock:
            if self._next >= self._block_end:
                first = await self._allocate(self._block_size)
                self._next, self._block_end = first, first + self._block_size
            pid = self._next
            self._next += 1
            return pid

    def was_allocated(self, producer_id: int) -> bool:
        """Ids below the store's next id were handed out by this cluster at some point."""
        return 0 <= producer_id < self._store.next_producer_id()

    async def init_producer_id(self, producer_id: int = -1,
                               producer_epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch) for an idempotent producer's InitProducerId.

        -1/-1 asks for a new id. A known id with its current epoch gets epoch + 1; a stale
        epoch, or an id this cluster never handed out, is INVALID_PRODUCER_EPOCH.
        """
        if producer_id >= 0 and producer_epoch >= 0:
            current = self._epochs.get(producer_id)
            if current is not None and producer_epoch != current:
                raise InvalidProducerEpochError(
                    f"producer {producer_id} is at epoch {current}, not {producer_epoch}"
                )
            if current is None and not self.was_allocated(producer_id):
                raise InvalidProducerEpochError(f"producer id {producer_id} was never issued")
            if producer_epoch < MAX_EPOCH:
                self._epochs[producer_id] = producer_epoch + 1
                return producer_id, producer_epoch + 1
            # Epoch exhausted: a fresh id.
        pid = await self.new_producer_id()
        self._epochs[pid] = 0
        return pid, 0
