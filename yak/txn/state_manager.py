"""`TransactionStateManager`: the transactional-id -> metadata cache and its log.

Its one job is the cache of `TransactionMetadata` per `__transaction_state` partition this
coordinator leads, and everything that reads or writes that topic: the id's partition
(Java's string hash), loading a partition on election (later records win, tombstones
delete), unloading it on resignation, the write-then-apply of a prepared transition at
the partition's coordinator epoch, the scan for transactions open past their timeout and
the expiration of idle ids (a tombstone each). This is Kafka's `TransactionStateManager`.

The partitions are shards of the coordinator runtime (`yak.coordinator`): a `TxnPartition`
is the shard the runtime's loader replays a partition into and the runtime keeps while
this broker leads it at its epoch (the coordinator epoch); every write is a write
operation of its shard, so one partition's transitions take effect in the order they
were submitted, and the runtime's writer refuses one at an epoch this broker no longer
leads.

It is separate from the coordinator (`coordinator.py`, the request state machine) and
from the marker channel (`marker_channel.py`) because both of those ask it the same
questions: is this partition still led at the same epoch, is this still the id's
metadata, write this target. It knows nothing of requests or markers, and never imports
the other two parts.

Runs on the broker's single event loop: everything between awaits is atomic, and after
each await `still_current` tells whether a result may still be applied.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from yak.coordinator import CoordinatorResult, CoordinatorRuntime, ShardState
from yak.coordinator.timer import Clock
from yak.errors import ErrorCode, KafkaError, error_for_code
from yak.txn import records as rec
from yak.txn.config import TxnConfig, TxnStats
from yak.txn.state import TransactionMetadata, TransactionState, TxnTransitMetadata

__all__ = [
    "TransactionStateManager",
    "TxnPartition",
    "Spawn",
    "TransactionListing",
    "ListTransactionsResult",
]

log = logging.getLogger(__name__)

_S = TransactionState

# (coroutine, task name): runs it in the background, owned by the coordinator
Spawn = Callable[[Coroutine[Any, Any, Any], str], None]

# Append failures as the client should see them (TransactionStateManager.appendTransactionToLog).
_APPEND_ERRORS: dict[ErrorCode, ErrorCode] = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.not_coordinator: ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress: ErrorCode.coordinator_load_in_progress,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
}


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error: ErrorCode
    unknown_state_filters: list[str] = field(default_factory=list)
    transactions: list[TransactionListing] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class TxnPartition:
    """One `__transaction_state` partition this coordinator leads (Kafka's
    TxnMetadataCacheEntry): the runtime's shard for it. The loader replays the
    partition into `txns` (later records win; a tombstone, or a Dead value, deletes)."""

    coordinator_epoch: int
    txns: dict[str, TransactionMetadata] = field(default_factory=dict)
    partition: int = -1

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes,
               value: bytes | None) -> None:
        _replay(self.txns, key, value, self.partition)

    def replay_end_transaction(self, producer_id: int, producer_epoch: int,
                               commit: bool) -> None:
        return None  # `__transaction_state` holds no transactions of its own


class TransactionStateManager:
    def __init__(
        self,
        runtime: CoordinatorRuntime[TxnPartition],
        config: TxnConfig,
        clock: Clock,
        stats: TxnStats,
        spawn: Spawn,
    ) -> None:
        self.runtime = runtime
        self.config = config
        self.clock = clock
        self.stats = stats
        self._spawn = spawn
        self._partition_cache: dict[tuple[str, int], int] = {}

    # ================================================================ partitions

    def partition_for(self, transactional_id: str) -> int:
        """The id's `__transaction_state` partition (Java's string hash: cached, every
        request of a transaction asks again)."""
        n = self.runtime.writer.num_partitions
        key = (transactional_id, n)
        p = self._partition_cache.get(key)
        if p is None:
            if len(self._partition_cache) > 100_000:
                self._partition_cache.clear()
            p = self._partition_cache[key] = rec.partition_for(transactional_id, n)
        return p

    def owns(self, partition: int) -> bool:
        return self.runtime.active(partition) is not None

    def entry(self, partition: int) -> TxnPartition | None:
        """The loaded partition, if this coordinator leads it."""
        ctx = self.runtime.active(partition)
        return None if ctx is None else ctx.shard

    def _entries(self) -> list[TxnPartition]:
        return [c.shard for c in self.runtime.contexts() if c.state is ShardState.ACTIVE]

    @property
    def loading(self) -> bool:
        """Some partition is being loaded."""
        return any(c.state is ShardState.LOADING for c in self.runtime.contexts())

    def held_epoch(self, partition: int) -> int | None:
        """The coordinator epoch this coordinator leads (or is loading) `partition` at."""
        return self.runtime.held_epoch(partition)

    def lookup(
        self, transactional_id: str
    ) -> tuple[TxnPartition, TransactionMetadata | None] | ErrorCode:
        """The id's partition and metadata (None: unknown id), or why this coordinator
        cannot answer for it (Kafka's getTransactionState)."""
        partition = self.partition_for(transactional_id)
        if self.runtime.is_loading(partition):
            return ErrorCode.coordinator_load_in_progress
        entry = self.entry(partition)
        if entry is None:
            return ErrorCode.not_coordinator
        return entry, entry.txns.get(transactional_id)

    def still_current(self, txn_id: str, entry: TxnPartition, meta: TransactionMetadata) -> bool:
        """After an await: same partition leadership, same metadata object."""
        now = self.entry(self.partition_for(txn_id))
        return now is entry and entry.txns.get(txn_id) is meta

    # ================================================================ load / unload

    def load_partition(self, partition: int, coordinator_epoch: int) -> TxnPartition | None:
        """Read `partition` to its log end and cache its ids at `coordinator_epoch` (the
        runtime's load; an older copy is unloaded first); None if the load failed or an
        epoch at least as new is already held."""
        ctx = self.runtime.context(partition)
        if ctx is not None and ctx.epoch >= coordinator_epoch:
            return None
        try:
            ctx = self.runtime.schedule_load(partition, coordinator_epoch)
        except Exception:  # logged by the runtime; the partition is not served here
            return None
        return None if ctx is None else ctx.shard

    def remove_partition(self, partition: int, epoch: int | None = None) -> TxnPartition | None:
        """Forget `partition` (loaded or loading); returns what was cached."""
        entry = self.entry(partition)
        return entry if self.runtime.schedule_unload(partition, epoch) else None

    async def wait_loaded_committed(self, partition: int, coordinator_epoch: int) -> bool:
        """Until the partition's high watermark covers the log end its load read (every
        loaded record is committed): True then; False as soon as this broker no longer
        leads the partition at `coordinator_epoch`."""
        ctx = self.runtime.context(partition)
        if ctx is None or ctx.epoch != coordinator_epoch:
            return False
        return await self.runtime.writer.wait_high_watermark(
            partition, coordinator_epoch, ctx.loaded_end)

    # ================================================================ log writes

    async def append(
        self,
        txn_id: str,
        entry: TxnPartition,
        meta: TransactionMetadata,
        target: TxnTransitMetadata,
        keep_pending_on_error: bool = False,
    ) -> ErrorCode:
        """Write `target` (prepared on `meta`) and apply it once it is in the log: a write
        operation of the id's shard, refused unless `entry` is still the shard."""
        key = rec.encode_key(txn_id)
        value = (
            None
            if target.state is _S.DEAD
            else rec.encode_value(target, self.config.log_value_version)
        )
        partition = self.partition_for(txn_id)

        def op(shard: TxnPartition) -> CoordinatorResult[ErrorCode]:
            if shard is not entry:  # prepared on a shard this one replaced
                raise error_for_code(ErrorCode.not_coordinator,
                                     f"{txn_id!r}: its partition was reloaded")
            return CoordinatorResult([(key, value)], apply=apply)

        def apply() -> ErrorCode:
            if not self.still_current(txn_id, entry, meta):
                return ErrorCode.not_coordinator
            if target.state is _S.DEAD:
                del entry.txns[txn_id]
            else:
                meta.complete_transition(target)
            return ErrorCode.none

        error = ErrorCode.none
        try:
            return await self.runtime.schedule_write_operation(
                f"txn-{target.state.label}", partition, op)
        except KafkaError as e:
            error = _APPEND_ERRORS.get(e.code, e.code)
            log.info("writing %r for %r failed: %s", target.state.label, txn_id, e)
        except Exception:
            log.exception("writing %r for %r failed", target.state.label, txn_id)
            error = ErrorCode.unknown_server_error
        if not self.still_current(txn_id, entry, meta):
            return error
        if not keep_pending_on_error:
            meta.abort_transition()
        return error

    # ================================================================ scans

    def timed_out_transactions(
        self, now: int
    ) -> list[tuple[str, TxnPartition, TransactionMetadata]]:
        """Ongoing transactions, with no transition pending, open longer than their
        timeout (the coordinator aborts them)."""
        return [
            (txn_id, entry, meta)
            for entry in self._entries()
            for txn_id, meta in list(entry.txns.items())
            if meta.state is _S.ONGOING
            and not meta.pending
            and meta.txn_start_timestamp + meta.txn_timeout_ms < now
        ]

    def expire_transactional_ids(self) -> int:
        """Tombstone ids idle for `transactional.id.expiration.ms` with nothing in flight."""
        now = self.clock.now_ms()
        horizon = now - self.config.transactional_id_expiration_ms
        started = 0
        for entry in self._entries():
            for txn_id, meta in list(entry.txns.items()):
                if (
                    not meta.pending
                    and meta.state.expiration_allowed
                    and meta.txn_last_update_timestamp <= horizon
                ):
                    target = meta.prepare_dead()
                    started += 1
                    self._spawn(self._expire(txn_id, entry, meta, target), f"txn-expire-{txn_id}")
        return started

    async def _expire(
        self,
        txn_id: str,
        entry: TxnPartition,
        meta: TransactionMetadata,
        target: TxnTransitMetadata,
    ) -> None:
        error = await self.append(txn_id, entry, meta, target)
        if error is ErrorCode.none:
            self.stats.expired_ids += 1
            log.info("expired transactional id %r", txn_id)

    # ================================================================ listing

    def list_transactions(
        self,
        state_filters: Iterable[str] = (),
        producer_id_filters: Iterable[int] = (),
        duration_filter_ms: int = -1,
        transactional_id_pattern: str | None = None,
    ) -> ListTransactionsResult:
        """ListTransactions v0-2 over the cache (Kafka's listTransactionStates): filters by
        state name, producer id, minimum age (v1, KIP-994) and a transactional-id regular
        expression (v2, matched in full)."""
        if self.loading:
            return ListTransactionsResult(ErrorCode.coordinator_load_in_progress)
        pattern = None
        if transactional_id_pattern:
            try:
                pattern = re.compile(transactional_id_pattern)
            except re.error:
                return ListTransactionsResult(ErrorCode.invalid_regular_expression)
        states: set[TransactionState] = set()
        unknown: list[str] = []
        names = list(state_filters)
        for name in names:
            s = TransactionState.from_label(name)
            if s is None:
                unknown.append(name)
            else:
                states.add(s)
        pids = set(producer_id_filters)
        now = self.clock.now_ms()
        listed = []
        for txn_id, meta in self.items():
            if meta.state is _S.DEAD:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if names and meta.state not in states:
                continue
            if duration_filter_ms >= 0 and now - meta.txn_start_timestamp <= duration_filter_ms:
                continue
            if pattern is not None and pattern.fullmatch(txn_id) is None:
                continue
            listed.append(TransactionListing(txn_id, meta.producer_id, meta.state.label))
        listed.sort(key=lambda t: t.transactional_id)
        return ListTransactionsResult(ErrorCode.none, unknown, listed)

    # ================================================================ introspection

    def items(self) -> Iterator[tuple[str, TransactionMetadata]]:
        """(id, metadata) of every id this coordinator owns."""
        for entry in self._entries():
            yield from entry.txns.items()

    def transactions(self) -> list[TransactionMetadata]:
        return [m for e in self._entries() for m in e.txns.values()]


def _replay(txns: dict[str, TransactionMetadata], key: bytes, value: bytes | None,
            partition: int) -> None:
    """One record of a partition being loaded: later records win; a tombstone (or a Dead
    value, never written by Kafka) deletes. A record Yak cannot read is logged and
    skipped rather than failing the whole load."""
    try:
        txn_id = rec.decode_key(key)
        if txn_id is None:
            log.warning("unknown key version in %s-%d", rec.TRANSACTION_STATE_TOPIC, partition)
            return
        if value is None:
            txns.pop(txn_id, None)
            return
        t = rec.decode_value(value)
    except (ValueError, UnicodeDecodeError) as e:
        log.error(
            "unreadable record in %s-%d skipped: %s", rec.TRANSACTION_STATE_TOPIC, partition, e
        )
        return
    if t.state is _S.DEAD:
        txns.pop(txn_id, None)
    elif t.state is _S.PREPARE_EPOCH_FENCE:
        log.error("%r: PrepareEpochFence is never written; record skipped", txn_id)
    else:
        txns[txn_id] = TransactionMetadata.from_transit(txn_id, t)
