"""Partition: one partition hosted on this broker, and everything the broker knows about it.

A `Partition` owns the local log (`PartitionLog`) and the replica state the controller
decided (`PartitionState`: replicas, ISR, leader, leader epoch, partition epoch), and it is
the only code that moves the high watermark. Every request that names a partition comes
through here, so the checks Kafka makes per partition are made in one place:

- `current_leader_epoch` from the client (KIP-320): older than ours -> FENCED_LEADER_EPOCH,
  newer -> UNKNOWN_LEADER_EPOCH (the client knows of a leader change we have not seen);
- a request only a leader may serve, on a follower -> NOT_LEADER_OR_FOLLOWER;
- acks=all while the ISR is smaller than `min.insync.replicas` -> NOT_ENOUGH_REPLICAS,
  before anything is written.

The high watermark is the smallest log end offset over the ISR (Kafka's
`maybeIncrementLeaderHW`), and it only moves while the ISR has at least
`min.insync.replicas` members (KAFKA-15583): a write that could not have been acknowledged
with acks=all is not exposed to consumers as committed either. On one broker the ISR is the
leader alone, so the high watermark follows every append at once.

Replication (issue 11): the leader's side (each follower's fetch state, the high
watermark that follows from it, ISR expansion and shrinking through the
`AlterPartitionManager`) is `FollowerTracking` (yak/partition/follower_state.py); what the
partition remembers about producers between requests (KIP-890 guards, refused idempotent
producers) is `ProducerGuards` (yak/partition/producer_guards.py). `Partition` extends
both, so the append and fetch paths read one object's attributes. On a follower, it
appends the leader's batches as they are (`append_as_follower`), keeps its high watermark
at min(leader's, own log end) and truncates where its log diverges from the leader's
epochs (`truncate_to`, driven by the replica fetcher).

Reads return storage's buffers untouched (the zero-copy Fetch path); nothing is decoded.
A read_committed read stops at the last stable offset and carries the aborted transactions
overlapping what it returns (from storage's `.txnindex`).

Transaction markers (`append_txn_marker`) are written here on the transaction
coordinator's behalf: the WriteTxnMarkers path, local or from another broker.
"""

from __future__ import annotations

import logging
import struct
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from yak.clock import Clock, MonotonicClock
from yak.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    KafkaError,
    KafkaStorageError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    UnknownLeaderEpochError,
)
from yak.partition.follower_state import FollowerState, FollowerTracking
from yak.partition.producer_guards import ProducerGuards, producer_of
from yak.partition.state import NO_LEADER, PartitionState

if TYPE_CHECKING:
    import uuid
    from collections.abc import Callable

    from yak.partition.isr import IsrChange
    from yak.partition.purgatory import FetchPurgatory, ProducePurgatory
    from yak.partition.verification import VerificationGuard
    from yak.protocol.records import BatchHeader
    from yak.storage import LogConfig, PartitionLog

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "FetchIsolation",
    "LogAppendInfo",
    "LogReadInfo",
    "Partition",
    "FollowerState",  # follower_state.py's, named here too (what Partition.follower returns)
]

log = logging.getLogger(__name__)

# ListOffsets' special timestamps (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

NO_EPOCH = -1
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")


class FetchIsolation(IntEnum):
    """How far a read may go (Kafka's FetchIsolation)."""

    LOG_END = 0  # a follower replicating: everything the leader has
    HIGH_WATERMARK = 1  # read_uncommitted consumers: what every in-sync replica has
    TXN_COMMITTED = 2  # read_committed consumers: below the last stable offset


class LogAppendInfo:
    """What an append wrote: offsets for the response, counts for metrics."""

    __slots__ = ("base_offset", "last_offset", "log_append_time", "log_start_offset",
                 "record_count", "size")

    def __init__(self, base_offset: int, last_offset: int, log_append_time: int,
                 log_start_offset: int, record_count: int, size: int) -> None:
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self.record_count = record_count
        self.size = size


class LogReadInfo:
    """One partition's read: whole batches as storage returned them, plus the offsets a
    Fetch response carries."""

    __slots__ = ("high_watermark", "last_stable_offset", "log_start_offset", "buffers", "size",
                 "aborted_transactions")

    def __init__(self, high_watermark: int, last_stable_offset: int, log_start_offset: int,
                 buffers: list[Any], size: int,
                 aborted_transactions: list[tuple[int, int]] | None) -> None:
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.buffers = buffers
        self.size = size
        self.aborted_transactions = aborted_transactions


class Partition(FollowerTracking, ProducerGuards):
    def __init__(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        node_id: int,
        log: PartitionLog,
        fetch_purgatory: FetchPurgatory,
        produce_purgatory: ProducePurgatory,
        submit_isr: Callable[[Partition, IsrChange], bool] | None = None,
        replica_lag_time_max_ms: int = 30_000,
        clock: Clock | None = None,
        replica_fetch_dead_ms: int = 0,
    ) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.node_id = node_id
        self.log = log
        self._fetch_purgatory = fetch_purgatory
        self._produce_purgatory = produce_purgatory
        self._submit_isr = submit_isr
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        # A follower silent this long leaves the ISR without waiting for the lag bound
        # (`replica.fetch.dead.ms`, issue 27; 0: off).
        self.replica_fetch_dead_ms = replica_fetch_dead_ms
        # Durations (follower silence, ISR retry pauses): the ReplicaManager's clock.
        self._clock: Clock = clock or MonotonicClock()
        self.state = PartitionState((), (), NO_LEADER, NO_EPOCH, NO_EPOCH)
        self.leader_epoch = NO_EPOCH
        self.is_leader = False
        # What each other replica's fetches told this leader (empty on a follower).
        self._followers: dict[int, FollowerState] = {}
        # The ISR change in flight (one at a time) and the ISR the high watermark counts
        # meanwhile: the union of the committed and the requested ISR.
        self._pending_isr: IsrChange | None = None
        self._maximal_isr: tuple[int, ...] = ()
        self._isr_retry_at_ms = 0
        # Log end offset when this leader epoch began: a follower must reach it to join
        # the ISR (it then has every batch of earlier epochs this leader has).
        self._leader_epoch_start_offset = -1
        # Idempotent producers whose batch was refused here with a retriable error since
        # their last batch was written: producer id -> (epoch, error class, message).
        self._refused_producers: dict[int, tuple[int, type[KafkaError], str]] = {}
        # KIP-890 verifications in progress or answered, by producer id (see
        # yak/partition/verification.py): dropped when the transaction starts here, when a
        # marker for the producer is written, and on any leadership change.
        self._verification_guards: dict[int, VerificationGuard] = {}
        # Counted for metrics: ISR changes this leader committed; shrinks of silent
        # (dead or frozen) followers; expansions the flapping guard held back.
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.dead_follower_shrinks = 0
        self.isr_expansions_held = 0
        # When each replica was last shrunk out of the ISR here (the flapping guard).
        self._shrunk_at: dict[int, list[int]] = {}
        self._held_logged: tuple[int, int] | None = None  # (replica, shrink) logged

    def __repr__(self) -> str:
        return (f"Partition({self.topic}-{self.index}, leader={self.state.leader}, "
                f"epoch={self.leader_epoch}, isr={list(self.state.isr)})")

    # ------------------------------------------------------------------ leadership

    def make_leader(self, state: PartitionState, now_ms: int | None = None) -> bool:
        """Become (or stay) leader under `state`; False if `state` is older than ours.

        Followers' fetch state starts over on a new leader epoch: a follower is only known
        to have what it fetches from this leader epoch on; the ISR members count as caught
        up now (Kafka's `resetReplicaState`), so they have `replica.lag.time.max.ms` to show
        up before they are dropped.
        """
        if not self._is_newer(state):
            return False
        now = self._clock.now_ms() if now_ms is None else now_ms
        new_epoch = state.leader_epoch != self.leader_epoch or not self.is_leader
        self.state = state
        self.leader_epoch = state.leader_epoch
        self.is_leader = True
        self._pending_isr = None
        self._maximal_isr = state.isr
        if new_epoch:
            self._verification_guards.clear()
            self._followers = {
                r: FollowerState(now if r in state.isr else 0)
                for r in state.replicas if r != self.node_id
            }
            self._leader_epoch_start_offset = self.log.log_end_offset
        else:
            for r in state.replicas:
                if r != self.node_id and r not in self._followers:
                    self._followers[r] = FollowerState(now if r in state.isr else 0)
            for r in [r for r in self._followers if r not in state.replicas]:
                del self._followers[r]
        self.maybe_increment_high_watermark()
        return True

    def make_follower(self, state: PartitionState) -> bool:
        """Follow `state.leader`; False if `state` is older than ours. Waiting produces
        cannot complete here any more, and waiting fetches must go and ask the leader."""
        if not self._is_newer(state):
            return False
        was_leader = self.is_leader
        self.state = state
        self.leader_epoch = state.leader_epoch
        self.is_leader = False
        self._followers = {}
        self._pending_isr = None
        self._maximal_isr = state.isr
        self._verification_guards.clear()
        if was_leader:
            self._produce_purgatory.fail(self.topic, self.index)
        self._fetch_purgatory.notify(self.topic, self.index)
        return True

    def _is_newer(self, state: PartitionState) -> bool:
        if state.leader_epoch < self.leader_epoch:
            return False
        return not (state.leader_epoch == self.leader_epoch
                    and state.partition_epoch < self.state.partition_epoch)

    def check_epoch(self, current_leader_epoch: int, require_leader: bool = True) -> None:
        """The per-request partition checks (Kafka's `localLogWithEpochOrThrow`).

        `current_leader_epoch` -1 means the client did not say (old versions, tools).
        """
        if current_leader_epoch >= 0 and current_leader_epoch != self.leader_epoch:
            if current_leader_epoch < self.leader_epoch:
                raise FencedLeaderEpochError(
                    f"{self.topic}-{self.index}: leader epoch {current_leader_epoch} is older"
                    f" than the current {self.leader_epoch}"
                )
            raise UnknownLeaderEpochError(
                f"{self.topic}-{self.index}: leader epoch {current_leader_epoch} is newer"
                f" than the current {self.leader_epoch}"
            )
        if require_leader and not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"this broker does not lead {self.topic}-{self.index}"
            )

    # ------------------------------------------------------------------ offsets

    @property
    def config(self) -> LogConfig:
        return self.log.config

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        return min(self.log.last_stable_offset, self.log.high_watermark)

    @property
    def size_in_bytes(self) -> int:
        return self.log.size_in_bytes

    @property
    def recovered_uncleanly(self) -> bool:
        """Was this partition's log loaded after an unclean shutdown (kill -9, a crash)?"""
        return not self.log.recovery_stats.clean

    @property
    def under_min_isr(self) -> bool:
        return len(self.state.isr) < self.log.config.min_insync_replicas

    @property
    def is_under_replicated(self) -> bool:
        """Led here with fewer in-sync replicas than replicas (Kafka's URP)."""
        return self.is_leader and len(self.state.isr) < len(self.state.replicas)

    # ------------------------------------------------------------------ follower side

    def update_high_watermark_as_follower(self, leader_high_watermark: int,
                                          leader_log_start_offset: int = -1) -> None:
        """A follower's high watermark is min(leader's, own log end); it only moves
        forward. The leader's log start offset moves ours (DeleteRecords, retention).
        A move wakes consumers long-polling this follower (KIP-392)."""
        log_ = self.log
        hw = min(leader_high_watermark, log_.log_end_offset)
        if hw > log_.high_watermark:
            log_.update_high_watermark(hw)
            self._fetch_purgatory.notify(self.topic, self.index)
        if leader_log_start_offset > log_.log_start_offset:
            target = min(leader_log_start_offset, log_.high_watermark)
            if target > log_.log_start_offset:
                log_.delete_records(target)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= `epoch` in this log, the offset where it ends): Kafka's
        `endOffsetForEpoch`, for OffsetForLeaderEpoch and the diverging-epoch check."""
        return self.log.leader_epoch_cache.end_offset_for(epoch, self.log.log_end_offset)

    def truncate_to(self, offset: int) -> None:
        """Drop everything at or after `offset` (a follower diverged from its leader).
        Disk work: the replica manager runs it off the event loop."""
        if self.is_leader:
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.index} is led here")
        self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at `offset` (the leader's log starts after ours
        ends). Disk work, off the event loop."""
        if self.is_leader:
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.index} is led here")
        self.log.truncate_fully_and_start_at(offset)

    @property
    def latest_epoch(self) -> int:
        """The epoch of the last batch in this log (-1: none): a follower's
        `last_fetched_epoch`."""
        return self.log.leader_epoch_cache.latest

    # ------------------------------------------------------------------ append

    def append_as_leader(
        self, records: memoryview, required_acks: int, header: BatchHeader | None = None,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Validate and write one produce's records; raise a KafkaError to refuse them.

        Kafka refuses acks=all before writing when the ISR is below min.insync.replicas,
        so a write that could not be acknowledged never reaches the log.
        `verification_guard`: the guard a transactional batch was verified with (KIP-890);
        unless its transaction is already open here, the guard must still be this
        partition's, checked with no await before the write (Kafka's VerificationGuard).
        """
        log_ = self.log
        try:
            if not self.is_leader:
                raise NotLeaderOrFollowerError(
                    f"this broker does not lead {self.topic}-{self.index}")
            if verification_guard is not None:
                self._check_verification(verification_guard)
            if required_acks == -1 and len(self.state.isr) < log_.config.min_insync_replicas:
                raise NotEnoughReplicasError(
                    f"{self.topic}-{self.index}: the ISR has {len(self.state.isr)} replica(s),"
                    f" fewer than min.insync.replicas={log_.config.min_insync_replicas}"
                )
            result = log_.append_as_leader(records, self.leader_epoch, header=header)
        except OutOfOrderSequenceError as e:
            raise self._sequence_gap_error(records, header, e) from e
        except (NotLeaderOrFollowerError, NotEnoughReplicasError, KafkaStorageError) as e:
            self.note_refused_producer(records, header, e)
            raise
        if self._refused_producers:
            self._refused_producers.pop(producer_of(records, header)[0], None)
        if verification_guard is not None:
            # The transaction is open here now: later batches need no guard.
            guards = self._verification_guards
            if guards.get(verification_guard.producer_id) is verification_guard:
                del guards[verification_guard.producer_id]
        info = LogAppendInfo(result.base_offset, result.last_offset, result.log_append_time,
                             result.log_start_offset,
                             result.last_offset - result.base_offset + 1, len(records))
        if not self.maybe_increment_high_watermark():
            # The high watermark waits for followers; new data is still news to them.
            self._fetch_purgatory.notify(self.topic, self.index)
        return info

    def append_as_follower(self, records: memoryview) -> LogAppendInfo:
        """Append batches copied from the leader, offsets and epochs as they are (the
        replica fetcher's path, issue 11). The follower's high watermark is set by the
        fetcher from the leader's, never here."""
        if self.is_leader:
            raise NotLeaderOrFollowerError(
                f"{self.topic}-{self.index} is led here: replication appends go to followers"
            )
        log_ = self.log
        if log_.log_end_offset == log_.log_start_offset and len(records) >= 27:
            # An empty log started at the leader's log start, which DeleteRecords may have
            # put inside a batch: the leader sends that whole batch. Restart the log at the
            # batch's base (Kafka's UnexpectedAppendOffsetException case); the log start
            # offset moves back up with the leader's in the same fetch.
            base, = _I64.unpack_from(records, 0)
            last = base + _I32.unpack_from(records, 23)[0]
            if base < log_.log_end_offset <= last:
                log_.truncate_fully_and_start_at(base)
        result = log_.append_as_follower(records)
        return LogAppendInfo(result.base_offset, result.last_offset, -1, result.log_start_offset,
                             result.last_offset - result.base_offset + 1, len(records))

    # ------------------------------------------------------------------ transactions

    def append_txn_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
        required_acks: int = -1,
    ) -> LogAppendInfo:
        """Write a COMMIT/ABORT marker for the coordinator (Kafka's appendRecordsToLeader
        with origin COORDINATOR); raises a KafkaError to refuse it."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"this broker does not lead {self.topic}-{self.index}")
        log_ = self.log
        if required_acks == -1 and len(self.state.isr) < log_.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.index}: the ISR has {len(self.state.isr)} replica(s),"
                f" fewer than min.insync.replicas={log_.config.min_insync_replicas}"
            )
        result = log_.append_txn_marker(producer_id, producer_epoch, coordinator_epoch,
                                        commit, self.leader_epoch)
        # The transaction ended: a batch verified for it and not yet appended must fail.
        self._verification_guards.pop(producer_id, None)
        info = LogAppendInfo(result.base_offset, result.last_offset, -1,
                             result.log_start_offset, 1, 0)
        if not self.maybe_increment_high_watermark():
            self._fetch_purgatory.notify(self.topic, self.index)
        return info

    def has_ongoing_txn(self, producer_id: int, producer_epoch: int) -> bool:
        """Is a transaction of this producer at this epoch open here? (KIP-890 part 1: only
        the first transactional batch of a transaction in a partition is verified.)"""
        return self.log.producer_state.has_ongoing_txn(producer_id, producer_epoch)

    def active_producers(self) -> list[tuple[int, int, int, int, int, int]]:
        """DescribeProducers: (producer id, epoch, last sequence, last timestamp,
        coordinator epoch, current transaction's first offset or -1) per known producer."""
        return [
            (e.producer_id, e.epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
             e.current_txn_first_offset)
            for e in list(self.log.producer_state.producers.values())
        ]

    # ------------------------------------------------------------------ read

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: FetchIsolation,
        min_one_message: bool,
        regions: bool = False,
    ) -> LogReadInfo:
        """Whole batches from `fetch_offset`, below the isolation's bound.

        A `fetch_offset` outside [log start, log end] raises OffsetOutOfRangeError; the
        error response still reports this partition's offsets (the client resets from them).
        """
        log_ = self.log
        hw = log_.high_watermark
        lso = min(log_.last_stable_offset, hw)
        log_start = log_.log_start_offset
        if fetch_offset < log_start or fetch_offset > log_.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} outside [{log_start}, {log_.log_end_offset}] of"
                f" {self.topic}-{self.index}"
            )
        if isolation is FetchIsolation.HIGH_WATERMARK:
            upper = hw
        elif isolation is FetchIsolation.TXN_COMMITTED:
            upper = lso
        else:
            upper = log_.log_end_offset
        committed = isolation is FetchIsolation.TXN_COMMITTED
        if fetch_offset >= upper or (max_bytes <= 0 and not min_one_message):
            return LogReadInfo(hw, lso, log_start, [], 0, [] if committed else None)
        rr = log_.read(fetch_offset, max(max_bytes, 0), max_offset=upper,
                       min_one_message=min_one_message, regions=regions)
        aborted = None
        if committed:
            aborted = [] if not rr.size else [
                (e.producer_id, e.first_offset)
                for e in log_.collect_aborted_txns(fetch_offset, rr.next_offset)
            ]
        return LogReadInfo(hw, lso, log_start, rr.buffers, rr.size, aborted)

    # ------------------------------------------------------------------ list offsets

    def fetch_offset_for_timestamp(
        self, timestamp: int, isolation: FetchIsolation
    ) -> tuple[int, int, int]:
        """(offset, timestamp, leader epoch) for ListOffsets; (-1, -1, -1) when no record
        qualifies, as Kafka answers.

        Latest is the high watermark (read_uncommitted) or the last stable offset
        (read_committed), with the current leader epoch; earliest and by-time give the
        epoch of the batch found, from the leader-epoch cache. A new leader whose high
        watermark has not reached its epoch's first offset answers clients
        OFFSET_NOT_AVAILABLE (KIP-207): its high watermark may still be below what the old
        leader had exposed, and a consumer resetting to it would read records again.
        """
        log_ = self.log
        if (isolation is not FetchIsolation.LOG_END and self.is_leader
                and log_.high_watermark < self._leader_epoch_start_offset):
            raise OffsetNotAvailableError(
                f"{self.topic}-{self.index}: the high watermark {log_.high_watermark} has not"
                f" reached the leader epoch's start {self._leader_epoch_start_offset}")
        if isolation is FetchIsolation.TXN_COMMITTED:
            upper = self.last_stable_offset
        elif isolation is FetchIsolation.LOG_END:
            upper = log_.log_end_offset
        else:
            upper = log_.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return upper, -1, self.leader_epoch
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            start = log_.log_start_offset
            return start, -1, self._epoch_for_offset(start)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1, -1  # nothing is tiered
        if timestamp < 0 and timestamp != MAX_TIMESTAMP:
            raise InvalidRequestError(f"invalid ListOffsets timestamp {timestamp}")
        found = log_.offset_for_timestamp(timestamp)
        if found is None:
            return -1, -1, -1
        offset, found_ts = int(found[0]), int(found[1])
        if offset >= upper:
            return -1, -1, -1
        return offset, found_ts, self._epoch_for_offset(offset)

    def _epoch_for_offset(self, offset: int) -> int:
        epoch = NO_EPOCH
        for e, start in self.log.leader_epoch_cache.entries:
            if start > offset:
                break
            epoch = e
        return epoch if epoch >= 0 else self.leader_epoch

    # ------------------------------------------------------------------ delete records

    def delete_records_on_leader(self, offset: int) -> int:
        """DeleteRecords: move the log start offset to `offset` (-1: the high watermark).

        Only committed records may go: beyond the high watermark is OFFSET_OUT_OF_RANGE,
        since deleting what consumers cannot read yet would hide it from them forever.
        Returns the new low watermark.
        """
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"this broker does not lead {self.topic}-{self.index}")
        log_ = self.log
        hw = log_.high_watermark
        target = hw if offset == -1 else offset
        if target < 0 or target > hw:
            raise OffsetOutOfRangeError(
                f"Cannot delete records below offset {offset}: the high watermark is {hw}"
            )
        if target > log_.log_start_offset:
            log_.delete_records(target)
        return int(log_.log_start_offset)
