"""`TransactionStateManager`: the transactional-id -> metadata cache and its log.

Its one job is the cache of `TransactionMetadata` per `__transaction_state` partition this
coordinator leads, and everything that reads or writes that topic: the id's partition
(Java's string hash), loading a partition on election (later records win, tombstones
delete), unloading it on resignation, the write-then-apply of a prepared transition at
the partition's coordinator epoch, the scan for transactions open past their timeout and
the expiration of idle ids (a tombstone each). This is Kafka's `TransactionStateManager`.

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

from yak.coordinator.timer import Clock
from yak.errors import ErrorCode, KafkaError
from yak.txn import records as rec
from yak.txn.config import TxnConfig, TxnStats
from yak.txn.log import TransactionLog
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
    TxnMetadataCacheEntry)."""

    coordinator_epoch: int
    txns: dict[str, TransactionMetadata] = field(default_factory=dict)


class TransactionStateManager:
    def __init__(
        self,
        txn_log: TransactionLog,
        config: TxnConfig,
        clock: Clock,
        stats: TxnStats,
        spawn: Spawn,
    ) -> None:
        self.log = txn_log
        self.config = config
        self.clock = clock
        self.stats = stats
        self._spawn = spawn
        self._owned: dict[int, TxnPartition] = {}
        self._loading: dict[int, int] = {}  # partition -> coordinator epoch being loaded
        self._partition_cache: dict[tuple[str, int], int] = {}

    # ================================================================ partitions

    def partition_for(self, transactional_id: str) -> int:
        """The id's `__transaction_state` partition (Java's string hash: cached, every
        request of a transaction asks again)."""
        n = self.log.num_partitions
        key = (transactional_id, n)
        p = self._partition_cache.get(key)
        if p is None:
            if len(self._partition_cache) > 100_000:
                self._partition_cache.clear()
            p = self._partition_cache[key] = rec.partition_for(transactional_id, n)
        return p

    def owns(self, partition: int) -> bool:
        return partition in self._owned

    def entry(self, partition: int) -> TxnPartition | None:
        """The loaded partition, if this coordinator leads it."""
        return self._owned.get(partition)

    @property
    def loading(self) -> bool:
        """Some partition is being loaded."""
        return bool(self._loading)

    def held_epoch(self, partition: int) -> int | None:
        """The coordinator epoch this coordinator leads (or is loading) `partition` at."""
        entry = self._owned.get(partition)
        return entry.coordinator_epoch if entry is not None else self._loading.get(partition)

    def lookup(
        self, transactional_id: str
    ) -> tuple[TxnPartition, TransactionMetadata | None] | ErrorCode:
        """The id's partition and metadata (None: unknown id), or why this coordinator
        cannot answer for it (Kafka's getTransactionState)."""
        partition = self.partition_for(transactional_id)
        if partition in self._loading:
            return ErrorCode.coordinator_load_in_progress
        entry = self._owned.get(partition)
        if entry is None:
            return ErrorCode.not_coordinator
        return entry, entry.txns.get(transactional_id)

    def still_current(self, txn_id: str, entry: TxnPartition, meta: TransactionMetadata) -> bool:
        """After an await: same partition leadership, same metadata object."""
        now = self._owned.get(self.partition_for(txn_id))
        return now is entry and entry.txns.get(txn_id) is meta

    # ================================================================ load / unload

    async def load_partition(self, partition: int, coordinator_epoch: int) -> TxnPartition | None:
        """Read `partition` to its log end and cache its ids at `coordinator_epoch`; None
        if it was unloaded (or loaded again) while reading. The caller removed any older
        copy first."""
        self._loading[partition] = coordinator_epoch
        try:
            records = list(await self.log.replay(partition))
        except Exception:
            log.exception("loading %s-%d failed", rec.TRANSACTION_STATE_TOPIC, partition)
            if self._loading.get(partition) == coordinator_epoch:
                del self._loading[partition]
            raise
        if self._loading.get(partition) != coordinator_epoch:
            return None  # resigned (or re-elected) while reading
        del self._loading[partition]
        entry = TxnPartition(coordinator_epoch, _load(records, partition))
        self._owned[partition] = entry
        log.log(
            logging.INFO if entry.txns else logging.DEBUG,
            "loaded %d transactional ids from %s-%d at coordinator epoch %d",
            len(entry.txns),
            rec.TRANSACTION_STATE_TOPIC,
            partition,
            coordinator_epoch,
        )
        return entry

    def remove_partition(self, partition: int) -> TxnPartition | None:
        """Forget `partition` (loaded or loading); returns what was cached."""
        self._loading.pop(partition, None)
        return self._owned.pop(partition, None)

    def clear(self) -> None:
        self._owned.clear()
        self._loading.clear()

    # ================================================================ log writes

    async def append(
        self,
        txn_id: str,
        entry: TxnPartition,
        meta: TransactionMetadata,
        target: TxnTransitMetadata,
        keep_pending_on_error: bool = False,
    ) -> ErrorCode:
        """Write `target` (prepared on `meta`) and apply it once it is in the log."""
        key = rec.encode_key(txn_id)
        value = (
            None
            if target.state is _S.DEAD
            else rec.encode_value(target, self.config.log_value_version)
        )
        error = ErrorCode.none
        try:
            await self.log.append(self.partition_for(txn_id), (key, value), entry.coordinator_epoch)
        except KafkaError as e:
            error = _APPEND_ERRORS.get(e.code, e.code)
            log.info("writing %r for %r failed: %s", target.state.label, txn_id, e)
        except Exception:
            log.exception("writing %r for %r failed", target.state.label, txn_id)
            error = ErrorCode.unknown_server_error
        if not self.still_current(txn_id, entry, meta):
            return ErrorCode.not_coordinator if error is ErrorCode.none else error
        if error is not ErrorCode.none:
            if not keep_pending_on_error:
                meta.abort_transition()
            return error
        if target.state is _S.DEAD:
            del entry.txns[txn_id]
        else:
            meta.complete_transition(target)
        return ErrorCode.none

    # ================================================================ scans

    def timed_out_transactions(
        self, now: int
    ) -> list[tuple[str, TxnPartition, TransactionMetadata]]:
        """Ongoing transactions, with no transition pending, open longer than their
        timeout (the coordinator aborts them)."""
        return [
            (txn_id, entry, meta)
            for entry in list(self._owned.values())
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
        for entry in list(self._owned.values()):
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
        if self._loading:
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
        for entry in self._owned.values():
            yield from entry.txns.items()

    def transactions(self) -> list[TransactionMetadata]:
        return [m for e in self._owned.values() for m in e.txns.values()]


def _load(
    records: Iterable[tuple[bytes, bytes | None]], partition: int
) -> dict[str, TransactionMetadata]:
    """Later records win; a tombstone (or a Dead value, never written by Kafka) deletes.
    A record Yak cannot read is logged and skipped rather than failing the whole load."""
    txns: dict[str, TransactionMetadata] = {}
    for key, value in records:
        try:
            txn_id = rec.decode_key(key)
            if txn_id is None:
                log.warning("unknown key version in %s-%d", rec.TRANSACTION_STATE_TOPIC, partition)
                continue
            if value is None:
                txns.pop(txn_id, None)
                continue
            t = rec.decode_value(value)
        except (ValueError, UnicodeDecodeError) as e:
            log.error(
                "unreadable record in %s-%d skipped: %s", rec.TRANSACTION_STATE_TOPIC, partition, e
            )
            continue
        if t.state is _S.DEAD:
            txns.pop(txn_id, None)
        elif t.state is _S.PREPARE_EPOCH_FENCE:
            log.error("%r: PrepareEpochFence is never written; record skipped", txn_id)
        else:
            txns[txn_id] = TransactionMetadata.from_transit(txn_id, t)
    return txns
