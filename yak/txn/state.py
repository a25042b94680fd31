"""A transactional id's state and the legal moves of its state machine.

The states, their ids (written to `__transaction_state`) and their allowed
predecessors are Kafka's (`TransactionMetadata.scala`, classic protocol, i.e.
transaction.version 1: no epoch bump per transaction). Keeping them as a table
means an impossible move (say Ongoing straight to CompleteCommit, skipping the
markers) raises in tests instead of silently making half a transaction visible.

Every change is two-phase, as in Kafka: `prepare_*` checks the move, computes the
target as an immutable `TxnTransitMetadata` and sets `pending_state`; the caller
writes that target to the log and, only once the write succeeded,
`complete_transition(target)` applies it (or `abort_transition()` after a failed
write). While a transition is pending every other request for the id gets
CONCURRENT_TRANSACTIONS, which is what serialises requests without locks.

    Empty/CompleteCommit/CompleteAbort --AddPartitions/AddOffsets--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --all markers written--> CompleteCommit
    Ongoing --EndTxn(abort) / timeout / fence--> PrepareAbort --markers--> CompleteAbort
    Ongoing --InitProducerId (pending only)--> PrepareEpochFence, then PrepareAbort
    Empty/CompleteCommit/CompleteAbort --InitProducerId--> Empty (epoch + 1 or new id)
    Empty/CompleteCommit/CompleteAbort --transactional.id.expiration.ms--> Dead (tombstone)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from yak.errors import ErrorCode, KafkaError

__all__ = [
    "TransactionState",
    "TopicPartition",
    "TxnTransitMetadata",
    "TransactionMetadata",
    "IllegalStateTransition",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "MAX_PRODUCER_EPOCH",
    "is_epoch_exhausted",
    "valid_previous_states",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # Short.MaxValue

TopicPartition = tuple[str, int]


class TransactionState(enum.Enum):
    """Value = Kafka's id byte (TransactionLogValue.TransactionStatus); `.label` is the
    name DescribeTransactions and ListTransactions show."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def label(self) -> str:
        return _LABELS[self]

    @classmethod
    def from_label(cls, label: str) -> TransactionState | None:
        return _BY_LABEL.get(label)

    @property
    def expiration_allowed(self) -> bool:
        """States in which an idle transactional id may be expired (nothing in flight)."""
        return self in (
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        )

    @property
    def is_open(self) -> bool:
        """A transaction exists that has not finished writing its markers."""
        return self in (
            TransactionState.ONGOING,
            TransactionState.PREPARE_COMMIT,
            TransactionState.PREPARE_ABORT,
            TransactionState.PREPARE_EPOCH_FENCE,
        )


_LABELS = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_LABEL = {v: k for k, v in _LABELS.items()}

_S = TransactionState
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


def valid_previous_states(target: TransactionState) -> frozenset[TransactionState]:
    return _VALID_PREVIOUS[target]


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka never hands out epoch 32767, so the coordinator can always fence once more."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


class IllegalStateTransition(KafkaError):
    """A coordinator bug (or a corrupt log), surfaced as UNKNOWN_SERVER_ERROR rather than
    silently applied."""

    code = ErrorCode.unknown_server_error


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The target of one prepared transition: exactly what is written to the log."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass(slots=True, eq=False)
class TransactionMetadata:
    """One transactional id's coordinator state (Kafka's field names, snake_cased)."""

    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60_000
    state: TransactionState = TransactionState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None

    # ------------------------------------------------------------ queries

    @property
    def pending(self) -> bool:
        return self.pending_state is not None

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def snapshot(self) -> TxnTransitMetadata:
        """The current state as a transit (what a reload of the log would give back)."""
        return TxnTransitMetadata(
            self.producer_id,
            self.last_producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            self.state,
            frozenset(self.partitions),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    # ------------------------------------------------------------ prepare

    def _prepare(
        self,
        state: TransactionState,
        producer_id: int,
        epoch: int,
        last_epoch: int,
        timeout_ms: int,
        partitions: frozenset[TopicPartition],
        start_ts: int,
        update_ts: int,
    ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalStateTransition(
                f"{self.transactional_id!r}: preparing {state.label} while "
                f"{self.pending_state.label} is pending"
            )
        if producer_id < 0:
            raise IllegalStateTransition(f"{self.transactional_id!r}: producer id {producer_id}")
        if state is not TransactionState.DEAD and epoch < 0:
            raise IllegalStateTransition(f"{self.transactional_id!r}: producer epoch {epoch}")
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalStateTransition(
                f"{self.transactional_id!r}: {self.state.label} -> {state.label} is not allowed"
            )
        self.pending_state = state
        return TxnTransitMetadata(
            producer_id,
            self.producer_id,
            epoch,
            last_epoch,
            timeout_ms,
            state,
            partitions,
            start_ts,
            update_ts,
        )

    def prepare_increment_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata | ErrorCode:
        """InitProducerId on an id with no open transaction: the next epoch, or (KIP-360,
        the producer names the epoch it had) a retry of a bump it never heard about."""
        if self.epoch_exhausted:
            raise IllegalStateTransition(f"{self.transactional_id!r}: epochs exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch  # a retried bump
        else:
            return ErrorCode.producer_fenced
        return self._prepare(
            TransactionState.EMPTY,
            self.producer_id,
            epoch,
            last,
            timeout_ms,
            frozenset(),
            -1,
            now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """Epoch overflow: a fresh producer id at epoch 0."""
        if self.state in (
            TransactionState.ONGOING,
            TransactionState.PREPARE_COMMIT,
            TransactionState.PREPARE_ABORT,
        ):
            raise IllegalStateTransition(f"{self.transactional_id!r}: rotation mid-transaction")
        last = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(
            TransactionState.EMPTY, new_producer_id, 0, last, timeout_ms, frozenset(), -1, now_ms
        )

    def prepare_fence_epoch(self) -> TxnTransitMetadata:
        """Bump the epoch of an Ongoing transaction that must be aborted (a new producer
        instance or a timeout); the bumped epoch is never returned to a client."""
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise IllegalStateTransition(f"{self.transactional_id!r}: cannot fence epoch 32767")
        return self._prepare(
            TransactionState.PREPARE_EPOCH_FENCE,
            self.producer_id,
            self.producer_epoch + 1,
            NO_PRODUCER_EPOCH,
            self.txn_timeout_ms,
            frozenset(self.partitions),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    def prepare_add_partitions(
        self, added: frozenset[TopicPartition], now_ms: int
    ) -> TxnTransitMetadata:
        start = now_ms if self.state.expiration_allowed else self.txn_start_timestamp
        return self._prepare(
            TransactionState.ONGOING,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.partitions) | added,
            start,
            now_ms,
        )

    def prepare_abort_or_commit(self, commit: bool, now_ms: int) -> TxnTransitMetadata:
        return self._prepare(
            TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.partitions),
            self.txn_start_timestamp,
            now_ms,
        )

    def prepare_fenced_abort(self, fence: TxnTransitMetadata, now_ms: int) -> TxnTransitMetadata:
        """Turn a pending PrepareEpochFence into the PrepareAbort that is written: Kafka
        never persists PrepareEpochFence, it aborts with the bumped epoch."""
        if self.pending_state is not TransactionState.PREPARE_EPOCH_FENCE:
            raise IllegalStateTransition(f"{self.transactional_id!r}: no epoch fence pending")
        if self.state is not TransactionState.ONGOING:
            raise IllegalStateTransition(f"{self.transactional_id!r}: fence of {self.state.label}")
        self.pending_state = TransactionState.PREPARE_ABORT
        return TxnTransitMetadata(
            fence.producer_id,
            self.producer_id,
            fence.producer_epoch,
            NO_PRODUCER_EPOCH,
            self.txn_timeout_ms,
            TransactionState.PREPARE_ABORT,
            frozenset(self.partitions),
            self.txn_start_timestamp,
            now_ms,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        if self.state is TransactionState.PREPARE_COMMIT:
            target = TransactionState.COMPLETE_COMMIT
        elif self.state is TransactionState.PREPARE_ABORT:
            target = TransactionState.COMPLETE_ABORT
        else:
            raise IllegalStateTransition(
                f"{self.transactional_id!r}: cannot complete from {self.state.label}"
            )
        return self._prepare(
            target,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_timestamp,
            now_ms,
        )

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(
            TransactionState.DEAD,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    # ------------------------------------------------------------ complete

    def abort_transition(self) -> None:
        """The log write failed: nothing changes, the id accepts requests again."""
        self.pending_state = None

    def remove_partition(self, tp: TopicPartition) -> None:
        """A marker reached `tp`; only legal while the transaction is being completed."""
        if self.state not in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            raise IllegalStateTransition(
                f"{self.transactional_id!r}: marker written while {self.state.label}"
            )
        self.partitions.discard(tp)

    def complete_transition(self, t: TxnTransitMetadata) -> None:
        """Apply a transition whose record is now in the log, re-checking what Kafka
        re-checks (a mismatch means two writers raced: a bug, never silently applied)."""
        target = self.pending_state
        if target is None or target is not t.state:
            self._fail(t, "it is not the pending transition")
        same_producer = (
            t.producer_id == self.producer_id and t.producer_epoch == self.producer_epoch
        )
        if target is TransactionState.EMPTY:
            bump_ok = t.producer_epoch == self.producer_epoch + 1 or (
                t.producer_epoch == 0 and t.producer_id != self.producer_id
            )
            retried = t.producer_epoch == self.producer_epoch and t.producer_id == self.producer_id
            if not (bump_ok or retried) or t.partitions or t.txn_start_timestamp != -1:
                self._fail(t, "bad InitProducerId transition")
            self.producer_id = t.producer_id
            self.last_producer_id = t.last_producer_id
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
            self.txn_timeout_ms = t.txn_timeout_ms
            self.partitions = set()
            self.txn_start_timestamp = -1
        elif target is TransactionState.ONGOING:
            if (
                not same_producer
                or not self.partitions <= t.partitions
                or t.txn_timeout_ms != self.txn_timeout_ms
            ):
                self._fail(t, "bad AddPartitions transition")
            self.txn_start_timestamp = t.txn_start_timestamp
            self.partitions |= t.partitions
        elif target in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            fenced = (
                target is TransactionState.PREPARE_ABORT
                and t.producer_id == self.producer_id
                and t.producer_epoch == self.producer_epoch + 1
            )
            if (
                not (same_producer or fenced)
                or frozenset(self.partitions) != t.partitions
                or t.txn_timeout_ms != self.txn_timeout_ms
                or t.txn_start_timestamp != self.txn_start_timestamp
            ):
                self._fail(t, "bad EndTxn transition")
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
        elif target in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT):
            if not same_producer or t.txn_timeout_ms != self.txn_timeout_ms:
                self._fail(t, "bad completion")
            self.partitions = set()
        else:  # PrepareEpochFence is never written; Dead is removed, never applied
            self._fail(t, f"{target.label} is never completed")
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.pending_state = None
        self.state = target

    def _fail(self, t: TxnTransitMetadata, why: str) -> None:
        raise IllegalStateTransition(
            f"{self.transactional_id!r} ({self.state.label}, pid {self.producer_id} epoch "
            f"{self.producer_epoch}): cannot apply {t}: {why}"
        )

    @classmethod
    def from_transit(cls, transactional_id: str, t: TxnTransitMetadata) -> TransactionMetadata:
        """Rebuild from a record read back from the log (loading a partition)."""
        return cls(
            transactional_id,
            t.producer_id,
            t.last_producer_id,
            t.producer_epoch,
            t.last_producer_epoch,
            t.txn_timeout_ms,
            t.state,
            set(t.partitions),
            t.txn_start_timestamp,
            t.txn_last_update_timestamp,
        )
