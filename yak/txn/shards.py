"""The transaction coordinator's shards: `__transaction_state` partitions coming and going.

One job, the partitions rather than the requests (as `yak/group/shard.py` is for groups):
creating `__transaction_state` on first use, loading a partition when this broker becomes
its leader and dropping it when it stops (Kafka's `TransactionCoordinator.onElection` /
`onResignation` with the loading half of its `TransactionStateManager`), and what a load
hands on once its replay reached the log end (`_on_loaded`): transactions found in a
Prepare state go to the marker channel to be completed, and Ongoing ones open at a crash
of this very coordinator are aborted with a bumped epoch. The ids themselves live in the
runtime's shards (`state_manager.TxnPartition`); the requests are `coordinator.py`'s.

A load may go on in the background after `on_election` returns (the coordinator runtime
replays a big partition in chunks that yield to the event loop); requests for its ids are
answered COORDINATOR_LOAD_IN_PROGRESS meanwhile, and an explicit `abort_ongoing` waits
for the load's end in `_abort_hints`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from yak.coordinator import CoordinatorRuntime, ShardContext
from yak.coordinator.timer import Clock
from yak.errors import ErrorCode, KafkaError
from yak.txn.marker_channel import TransactionMarkerChannelManager
from yak.txn.state import TransactionMetadata, TransactionState
from yak.txn.state_manager import Spawn, TransactionStateManager, TxnPartition

__all__ = ["FIRST_LOAD_WAIT_MS", "TxnShards"]

log = logging.getLogger(__name__)

# How long the first request after creating `__transaction_state` waits for its partition
# to be loaded (otherwise the client is told to find the coordinator again).
FIRST_LOAD_WAIT_MS = 3000

_S = TransactionState

# (transactional id, its partition, its metadata, now): abort an Ongoing transaction with
# a bumped epoch (the coordinator's)
FencedAbort = Callable[[str, TxnPartition, TransactionMetadata, int], object]


class TxnShards:
    def __init__(
        self,
        runtime: CoordinatorRuntime[TxnPartition],
        state: TransactionStateManager,
        channel: TransactionMarkerChannelManager,
        clock: Clock,
        spawn: Spawn,
        fenced_abort: FencedAbort,
    ) -> None:
        self.runtime = runtime
        self.writer = runtime.writer
        self.state = state
        self.channel = channel
        self.clock = clock
        self._spawn = spawn
        self._fenced_abort = fenced_abort
        # partition -> abort_ongoing given by an explicit `on_election`
        self._abort_hints: dict[int, bool] = {}
        # False: every partition of the topic is this broker's (one broker); True: a
        # cluster, where another broker may have led a partition since this one crashed
        self.cluster = False
        runtime.on_loaded = self._on_loaded
        runtime.on_unloaded = self._on_unloaded

    async def ensure_ready(self, transactional_id: str | None = None) -> ErrorCode:
        """Create `__transaction_state` on first use (the first FindCoordinator or
        InitProducerId for a transactional id), as Kafka does, load the partitions this
        broker leads and wait a moment for `transactional_id`'s (the partition layer may
        be about to hand it to this broker); COORDINATOR_NOT_AVAILABLE (the client
        retries) if the topic could not be created. Concurrent callers share one attempt
        (the writer's)."""
        if not self.writer.exists():
            try:
                await self.writer.ensure_topic()
            except (KafkaError, OSError) as e:
                log.error("cannot create %s: %s", self.writer.topic, e)
                return ErrorCode.coordinator_not_available
            self.runtime.load_led_partitions()
            if transactional_id is not None:
                await self.runtime.wait_loaded(self.state.partition_for(transactional_id),
                                               FIRST_LOAD_WAIT_MS)
        return ErrorCode.none

    def on_election(
        self, partition: int, coordinator_epoch: int, abort_ongoing: bool | None = None
    ) -> None:
        """See `TransactionCoordinator.on_election`."""
        if abort_ongoing is not None:
            self._abort_hints[partition] = abort_ongoing
        else:  # none left from a load that never finished
            self._abort_hints.pop(partition, None)
        try:
            self.state.load_partition(partition, coordinator_epoch)
        finally:
            if not self.runtime.is_loading(partition):  # else `_on_loaded` takes it
                self._abort_hints.pop(partition, None)

    def manage_partitions(self) -> None:
        """Cluster mode: another broker may have led a partition since this one stopped
        uncleanly, so Ongoing transactions are aborted at load only if this broker
        crashed leading the partition at the very epoch it loads it at; on one broker
        (the default) whenever its log was recovered from an unclean shutdown."""
        self.cluster = True

    def on_partition_change(self, partition: int, coordinator_epoch: int | None,
                            leads: bool) -> None:
        """The partition layer's leadership change (the cluster's publisher hook)."""
        self.runtime.on_partition_change(partition, coordinator_epoch, leads)

    def on_resignation(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """Another broker leads `partition` now: forget its ids (it finishes their work).
        A resignation older than the election we hold (`coordinator_epoch` below ours)
        arrived out of order and is ignored."""
        self.state.remove_partition(partition, coordinator_epoch)

    def _on_loaded(self, ctx: ShardContext[TxnPartition]) -> None:
        entry, partition = ctx.shard, ctx.partition
        log.log(
            logging.INFO if entry.txns else logging.DEBUG,
            "loaded %d transactional ids from %s-%d at coordinator epoch %d",
            len(entry.txns), self.writer.topic, partition, ctx.epoch,
        )
        decided = [meta for meta in entry.txns.values()
                   if meta.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT)]
        if decided:
            self._spawn(self.channel.complete_loaded(partition, entry, decided),
                        f"txn-complete-loaded-{partition}")
        abort = self._abort_hints.pop(partition, None)
        if abort is None:  # Ongoing at a crash of this very coordinator?
            abort = (self.writer.crashed_leading(partition, ctx.epoch) if self.cluster
                     else self.writer.recovered_uncleanly(partition))
        if abort:
            for txn_id, meta in list(entry.txns.items()):
                if meta.state is _S.ONGOING:
                    log.info("aborting %r: open when this broker stopped uncleanly", txn_id)
                    self._fenced_abort(txn_id, entry, meta, self.clock.now_ms())

    def _on_unloaded(self, ctx: ShardContext[TxnPartition]) -> None:
        self.channel.remove_for(ctx.shard.txns)
