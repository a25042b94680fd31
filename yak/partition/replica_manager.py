"""ReplicaManager: every partition hosted on this broker, and the operations on them.

Handlers and coordinators never touch a `PartitionLog`: they ask the ReplicaManager to
append (with the producer's acks, on behalf of a client, a coordinator or replication),
to read (with an isolation level and byte limits, long-polling when there is too little),
to list offsets, to delete records or to describe the log directory. It owns the
delayed-operation purgatories (Fetch long-polls, acks=all produces waiting on the high
watermark), the threads that do disk work off the event loop (fsync for
`write.caching=false`, log maintenance), and the `Partition` objects.

Which partitions exist and who leads them is not decided here: the controller does, and
hands each decision to `apply_partition_state` (Kafka's `applyDelta`/`makeLeaders`). On one
broker that is the local metadata store's controller at start-up and on every topic
change; in a cluster it is the etcd controller's watch (issue 11).

Replication (issue 11): a Fetch from a follower (`FetchParams.replica_id >= 0`) is answered
here like Kafka's leader does: the follower's `last_fetched_epoch` is checked against this
log's epochs (a `diverging_epoch` tells it where to truncate), its fetch offset becomes its
known log end offset (which moves the high watermark and may add it to the ISR), and it
reads up to the log end. On a follower the replica fetcher (yak/cluster/replica_fetcher.py)
calls `append_as_follower`, `truncate` and `end_offset_for_epoch`. A periodic task drops
lagging followers from the ISR; ISR changes go to the `AlterPartitionManager`.

Fencing: a broker that lost its registration (`fence()`), or whose session is no longer
known to be valid (`session_valid`, a check without I/O), acknowledges nothing: leader
appends are refused and waiting acks=all produces fail, until `unfence()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from yak.clock import Clock, MonotonicClock
from yak.errors import (
    CorruptRecordError,
    DuplicateSequenceError,
    ErrorCode,
    InvalidRecordError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from yak.partition.isr import AlterPartitionManager, IsrChange
from yak.partition.partition import (
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    FetchIsolation,
    LogAppendInfo,
    Partition,
)
from yak.partition.purgatory import FetchPurgatory, ProducePurgatory
from yak.partition.state import INTERNAL_TOPICS, PartitionState
from yak.partition.verification import TxnVerifier, VerificationGuard
from yak.protocol.records import (
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_BIT,
    read_header,
)

if TYPE_CHECKING:
    import uuid
    from collections.abc import Callable

    from yak.partition.ordering import EffectTurn
    from yak.protocol.records import BatchHeader
    from yak.storage import LogConfig, LogManager
    from yak.tiered import RemoteLogManager

__all__ = [
    "AppendOrigin",
    "TxnMarker",
    "FetchParams",
    "FetchPartition",
    "LogDirDescription",
    "PartitionAppendResult",
    "PartitionReadResult",
    "ReplicaManager",
]

log = logging.getLogger(__name__)

MAINTENANCE_INTERVAL_S = 1.0
_NONE = int(ErrorCode.none)
_OUT_OF_RANGE = int(ErrorCode.offset_out_of_range)
_UNKNOWN_TP = int(ErrorCode.unknown_topic_or_partition)
_STORAGE = int(ErrorCode.kafka_storage_error)
_TIMED_OUT = int(ErrorCode.request_timed_out)
_NOT_LEADER = int(ErrorCode.not_leader_or_follower)
_FENCED_EPOCH = int(ErrorCode.fenced_leader_epoch)
_NOT_ENOUGH_AFTER = int(ErrorCode.not_enough_replicas_after_append)
_I32 = struct.Struct(">i")


class AppendOrigin(IntEnum):
    """Who is appending (Kafka's AppendOrigin): clients may not write internal topics."""

    CLIENT = 0
    COORDINATOR = 1
    REPLICATION = 2


class PartitionAppendResult:
    """One partition's answer to an append: an error code, or where the records went."""

    __slots__ = ("topic", "partition", "error", "error_message", "info", "record_errors")

    def __init__(self, topic: str, partition: int, error: int = _NONE,
                 error_message: str | None = None, info: LogAppendInfo | None = None,
                 record_errors: list[tuple[int, str | None]] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.error = error
        self.error_message = error_message
        self.info = info
        # KIP-467: (index in batch, message) of the records that failed the batch.
        self.record_errors = record_errors or []


class PartitionReadResult:
    """One partition's answer to a fetch. Offsets are -1 where the partition is unknown.

    `diverging_epoch` (a follower's fetch only): (epoch, end offset) where the follower's
    log stops matching this leader's; `current_leader`: (leader id, leader epoch) sent with
    NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH so the fetcher need not ask for metadata
    (KIP-951)."""

    __slots__ = ("error", "high_watermark", "last_stable_offset", "log_start_offset",
                 "buffers", "size", "aborted_transactions", "diverging_epoch",
                 "current_leader")

    def __init__(self, error: int, high_watermark: int = -1, last_stable_offset: int = -1,
                 log_start_offset: int = -1, buffers: list[Any] | None = None, size: int = 0,
                 aborted_transactions: list[tuple[int, int]] | None = None,
                 diverging_epoch: tuple[int, int] | None = None,
                 current_leader: tuple[int, int] | None = None) -> None:
        self.error = error
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.buffers = buffers if buffers is not None else []
        self.size = size
        self.aborted_transactions = aborted_transactions
        self.diverging_epoch = diverging_epoch
        self.current_leader = current_leader


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One COMMIT/ABORT marker for one partition (an entry of WriteTxnMarkers)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


@dataclass(slots=True)
class FetchPartition:
    """One partition a Fetch asks for."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1  # a follower's: the epoch of the last batch it has
    log_start_offset: int = -1  # a follower's log start offset


@dataclass(slots=True)
class FetchParams:
    """The request-wide part of a Fetch (Kafka's FetchParams)."""

    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK
    replica_id: int = -1  # -1: a consumer; a broker id: a follower (issue 11)
    replica_epoch: int = -1  # the follower's broker epoch (KIP-903), -1 unknown
    # The connection sends file data with sendfile: storage may return `FileRegion`s.
    zero_copy: bool = False


@dataclass
class LogDirDescription:
    """DescribeLogDirs for the one log directory: partition sizes and disk space."""

    path: str
    total_bytes: int
    usable_bytes: int
    topics: dict[str, list[tuple[int, int]]] = field(default_factory=dict)


class _SyncState:
    __slots__ = ("waiters", "running")

    def __init__(self) -> None:
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.running = False


class ReplicaManager:
    def __init__(self, node_id: int, logs: LogManager, io_threads: int = 4,
                 replica_lag_time_max_ms: int = 30_000,
                 alter_partition: AlterPartitionManager | None = None,
                 clock: Clock | None = None, replica_fetch_dead_ms: int = 0) -> None:
        self.node_id = node_id
        # Durations of the replication protocol (follower silence, ISR expiration, retry
        # pauses), read by every Partition; a test passes a ManualClock (yak/clock.py).
        self.clock: Clock = clock or MonotonicClock()
        self.logs = logs
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        # `replica.fetch.dead.ms` (issue 27): a follower that stopped fetching leaves the
        # ISR after this long, not after replica.lag.time.max.ms (0: lag alone).
        self.replica_fetch_dead_ms = replica_fetch_dead_ms
        # Where ISR changes go (None: nowhere, the ISR never changes: one broker alone).
        self.alter_partition = alter_partition
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._fenced = False
        self._fenced_reason = ""
        # The broker's no-I/O session check (the lease's local deadline), set by the
        # composition in a cluster: False means "not known to be registered", ack nothing.
        self.session_valid: Callable[[], bool] | None = None
        # KIP-890 part 1: asks the transaction coordinator (here or on another broker)
        # whether partitions are in a producer's ongoing transaction; set by the
        # composition. None: no coordinator, transactional batches that would start a
        # transaction are refused (INVALID_TXN_STATE).
        self.txn_verifier: TxnVerifier | None = None
        self._verifications: set[asyncio.Task[None]] = set()
        self._isr_tasks: set[asyncio.Task[None]] = set()
        # write.caching=false: per partition, the fsync job in flight and who waits on it.
        self._syncs: dict[Partition, _SyncState] = {}
        self._isr_expiration: asyncio.Task[None] | None = None
        # The replica fetchers' (topic, partition) -> messages behind the leader's high
        # watermark, set by whoever copies followed partitions here (metrics read it).
        self.follower_lags: Callable[[], dict[tuple[str, int], int]] | None = None
        # Totals for metrics (Kafka's IsrShrinksPerSec / IsrExpandsPerSec; issue 27's
        # shrinks of dead followers and expansions held back by the flapping guard).
        self.isr_shrinks = 0
        self.isr_expands = 0
        self._retired_counts = (0, 0)  # of partitions no longer hosted here
        self.fetch_purgatory = FetchPurgatory()
        self.produce_purgatory = ProducePurgatory()
        # fsync for write.caching=false runs here so the event loop never blocks on disk.
        self.io_pool = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="yak-io")
        # Maintenance (retention deletes, checkpoints) gets its own thread so a long pass
        # never queues acks=all fsyncs behind it.
        self._maintenance_pool = ThreadPoolExecutor(max_workers=1,
                                                    thread_name_prefix="yak-maintenance")
        self._maintenance: asyncio.Task[None] | None = None
        # Tiered storage (issue 25, docs/tiered.md): serves fetches below the local log
        # start of topics with remote.storage.enable; set by the composition, or None.
        self.remote_log: RemoteLogManager | None = None

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._maintenance = loop.create_task(self._maintenance_loop(), name="log-maintenance")
        self._isr_expiration = loop.create_task(self._isr_expiration_loop(),
                                                name="isr-expiration")

    async def stop(self) -> None:
        for task in (self._maintenance, self._isr_expiration, *self._isr_tasks,
                     *self._verifications):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._maintenance = self._isr_expiration = None
        self._isr_tasks.clear()
        # A pass already running in its thread must finish before the logs shut down.
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._maintenance_pool.shutdown, True)
        await loop.run_in_executor(None, self.io_pool.shutdown, True)
        self.produce_purgatory.fail_all()
        self.fetch_purgatory.notify_all()

    async def _maintenance_loop(self) -> None:
        """Retention, time-based rolls, flush.ms and checkpoints, once a second, in a
        thread: a retention pass that deletes segments must not stall requests."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(MAINTENANCE_INTERVAL_S)
            try:
                await loop.run_in_executor(
                    self._maintenance_pool, self.logs.maintenance, int(time.time() * 1000)
                )
            except Exception:
                log.exception("log maintenance failed")

    def isr_check_interval_s(self) -> float:
        """How often the ISR expiration task runs: every half `replica.lag.time.max.ms`
        (Kafka's), and every quarter `replica.fetch.dead.ms` so a dead follower leaves
        the ISR within about 1.25 times that bound; between 50 ms and a second."""
        interval = self.replica_lag_time_max_ms / 2000
        if self.replica_fetch_dead_ms > 0:
            interval = min(interval, self.replica_fetch_dead_ms / 4000)
        return min(max(interval, 0.05), 1.0)

    async def _isr_expiration_loop(self) -> None:
        """Kafka's "isr-expiration" task: each led partition drops the followers that have
        not caught up for `replica.lag.time.max.ms`, or (issue 27) that stopped fetching
        for `replica.fetch.dead.ms`."""
        while True:
            await asyncio.sleep(self.isr_check_interval_s())
            if self._fenced:
                continue
            now = self.clock.now_ms()
            for p in list(self._partitions.values()):
                if p.is_leader:
                    try:
                        p.maybe_shrink_isr(now)
                    except Exception:
                        log.exception("ISR check of %s-%d failed", p.topic, p.index)

    # ------------------------------------------------------------------ ISR changes

    def _submit_isr(self, p: Partition, change: IsrChange) -> bool:
        """A partition asks for an ISR change: send it to the store in the background.
        Refused (False) while fenced or with no store: the ISR then stays as it is."""
        if self._fenced or self.alter_partition is None:
            return False
        task = asyncio.get_running_loop().create_task(self._alter_isr(p, change),
                                                      name=f"alter-isr-{p.topic}-{p.index}")
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)
        return True

    async def _alter_isr(self, p: Partition, change: IsrChange) -> None:
        assert self.alter_partition is not None
        before = set(p.state.isr)
        try:
            state = await self.alter_partition.submit(change)
        except asyncio.CancelledError:
            raise
        except KafkaError as e:
            log.info("%s-%d: ISR change to %s refused: %s", change.topic, change.partition,
                     list(change.new_isr), e)
            p.isr_change_done(change, None)
            return
        except Exception as e:
            log.warning("%s-%d: ISR change to %s not made (%s); the ISR stays %s",
                        change.topic, change.partition, list(change.new_isr), e,
                        list(p.state.isr))
            p.isr_change_done(change, None)
            return
        p.isr_change_done(change, state)
        after = set(p.state.isr)
        if after - before:
            self.isr_expands += 1
        if before - after:
            self.isr_shrinks += 1

    # ------------------------------------------------------------------ fencing

    @property
    def fenced(self) -> bool:
        return self._fenced

    def fence(self, reason: str = "the broker lost its registration") -> None:
        """Stop acknowledging anything (the broker's session is gone or unknown): leader
        appends are refused and every waiting acks=all produce fails, until `unfence()`.
        Waiting produces may still be completed by the new leader after a client retry;
        none is acknowledged from here."""
        if not self._fenced:
            log.warning("fenced: %s; no write is acknowledged until the controller's"
                        " state arrives", reason)
        self._fenced = True
        self._fenced_reason = reason
        self.produce_purgatory.fail_all()

    def unfence(self) -> None:
        if self._fenced:
            log.info("unfenced: acknowledging writes again")
        self._fenced = False

    def _may_acknowledge(self) -> bool:
        if self._fenced:
            return False
        check = self.session_valid
        return check is None or check()

    # ------------------------------------------------------------------ partitions

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def partition_or_error(self, topic: str, partition: int) -> Partition:
        p = self._partitions.get((topic, partition))
        if p is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} is not hosted here")
        return p

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    @property
    def dead_follower_shrinks(self) -> int:
        """ISR shrinks of followers that had stopped fetching (issue 27), ever."""
        return self._retired_counts[0] + sum(
            p.dead_follower_shrinks for p in self._partitions.values())

    @property
    def isr_expansions_held(self) -> int:
        """Expansions the flapping guard held back (issue 27), ever."""
        return self._retired_counts[1] + sum(
            p.isr_expansions_held for p in self._partitions.values())

    def has_local_log(self, topic: str, partition: int) -> bool:
        return self.logs.get(topic, partition) is not None

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        p = self._partitions.get((topic, partition))
        return None if p is None else p.state

    def apply_partition_state(
        self,
        topic: str,
        partition: int,
        topic_id: uuid.UUID,
        state: PartitionState,
        config: LogConfig,
    ) -> Partition:
        """Host `topic-partition` under the controller's `state`: create its log if this
        broker has none, then become its leader or a follower. A state older than the one
        applied is ignored (a late watch event must not undo a newer decision)."""
        key = (topic, partition)
        p = self._partitions.get(key)
        if p is None:
            plog = self.logs.create(topic, partition, config)
            p = Partition(topic, partition, topic_id, self.node_id, plog,
                          self.fetch_purgatory, self.produce_purgatory,
                          submit_isr=self._submit_isr,
                          replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                          clock=self.clock,
                          replica_fetch_dead_ms=self.replica_fetch_dead_ms)
            self._partitions[key] = p
        elif p.log.config != config:
            p.log.update_config(config)
        if state.leader == self.node_id:
            if p.make_leader(state):
                log.debug("leading %s-%d at epoch %d", topic, partition, state.leader_epoch)
        elif p.make_follower(state):
            log.debug("following %s-%d at epoch %d", topic, partition, state.leader_epoch)
        return p

    def update_config(self, topic: str, config: LogConfig) -> None:
        """A topic's configs changed: every hosted partition of it runs with them now."""
        for (t, _), p in list(self._partitions.items()):
            if t == topic:
                p.log.update_config(config)

    def stop_partition(self, topic: str, partition: int, delete: bool) -> None:
        """Stop hosting a partition (topic deleted, or moved away); `delete` removes its log."""
        p = self._partitions.pop((topic, partition), None)
        if p is not None:  # keep the counters monotonic for metrics
            self._retired_counts = (self._retired_counts[0] + p.dead_follower_shrinks,
                                    self._retired_counts[1] + p.isr_expansions_held)
        self.produce_purgatory.fail(topic, partition)
        self.fetch_purgatory.notify(topic, partition)
        if delete and (p is not None or self.logs.get(topic, partition) is not None):
            self.logs.delete(topic, partition)

    def delete_stray_logs(self, expected: set[tuple[str, int]]) -> list[tuple[str, int]]:
        """Delete local logs of partitions no topic has any more (a topic deleted just
        before a crash): Kafka's stray-replica clean-up. Returns what was deleted."""
        stray = [(p.topic, p.partition) for p in self.logs.logs()
                 if (p.topic, p.partition) not in expected]
        for topic, partition in stray:
            log.warning("deleting stray log %s-%d", topic, partition)
            self.stop_partition(topic, partition, delete=True)
        return stray

    # ------------------------------------------------------------------ append

    def append_local(
        self, topic: str, partition: int, records: memoryview, required_acks: int,
        origin: AppendOrigin = AppendOrigin.CLIENT, header: BatchHeader | None = None,
        verification_guard: VerificationGuard | None = None,
    ) -> PartitionAppendResult:
        """Write one partition's records on the leader; never raises (the error is in the
        result, so one bad partition never fails the others of a request). `header`: the
        first batch's header if the caller parsed it (storage then does not again)."""
        try:
            if origin is AppendOrigin.CLIENT and topic in INTERNAL_TOPICS:
                raise InvalidTopicError(f"Cannot append to internal topic {topic}")
            p = self._partitions.get((topic, partition))
            if p is None:
                raise UnknownTopicOrPartitionError(f"{topic}-{partition} is not hosted here")
            if origin is AppendOrigin.REPLICATION:
                info = p.append_as_follower(records)
            else:
                if not self._may_acknowledge():
                    fenced = NotLeaderOrFollowerError(
                        f"{topic}-{partition}: this broker is fenced"
                        f" ({self._fenced_reason if self._fenced else 'session not valid'})")
                    p.note_refused_producer(records, header, fenced)
                    raise fenced
                info = p.append_as_leader(records, required_acks, header,
                                          verification_guard)
        except DuplicateSequenceError as e:
            # A retry of a batch already in the log: success with the original offsets;
            # nothing was appended, so nothing is counted.
            p = self._partitions[(topic, partition)]
            info = LogAppendInfo(e.base_offset, e.last_offset, e.log_append_time,
                                 p.log_start_offset, 0, 0)
        except InvalidRecordError as e:
            return PartitionAppendResult(topic, partition, int(e.code), e.message,
                                         record_errors=e.record_errors)
        except KafkaError as e:
            return PartitionAppendResult(topic, partition, int(e.code), e.message)
        except Exception:
            log.exception("append to %s-%d failed", topic, partition)
            return PartitionAppendResult(topic, partition, _STORAGE)
        return PartitionAppendResult(topic, partition, _NONE, None, info)

    async def handle_produce_append(
        self,
        entries: Sequence[tuple[str, int, memoryview]],
        required_acks: int,
        timeout_ms: int,
        transactional_id: str | None = None,
        turn: EffectTurn | None = None,
    ) -> list[PartitionAppendResult]:
        """A client's Produce (Kafka's `handleProduceAppend`): one result per entry, in
        order. The order of work, and why:

        1. checks that need no state: acks, one batch per partition, no control batch,
           transactional records only with a transactional id (the batch header is
           parsed once here and handed to storage);
        2. KIP-890: the first transactional batch of a transaction in a partition is
           verified with the transaction coordinator, under a `VerificationGuard`;
           concurrent requests of the producer share the question;
        3. `turn.wait()`: every earlier request of the client's connection has had its
           effects (see yak/partition/ordering.py); this is the only await before the
           appends, so a batch that waited on verification cannot be overtaken by a later
           one of the same producer (OUT_OF_ORDER_SEQUENCE_NUMBER, fatal for librdkafka);
        4. the appends, with no await in between (each checks its guard under the same
           turn: a marker written during verification fails the batch), then
           `turn.release()`;
        5. acks=all: wait for the high watermark (and the fsync), which holds no one back.
        """
        try:
            if required_acks not in (0, 1, -1):
                code = int(InvalidRequiredAcksError.code)
                return [PartitionAppendResult(t, i, code) for t, i, _ in entries]
            results: list[PartitionAppendResult | None] = [None] * len(entries)
            headers: list[BatchHeader | None] = [None] * len(entries)
            # (entry index, partition, header) of batches that need KIP-890 verification.
            unverified: list[tuple[int, Partition, BatchHeader]] = []
            for i, (topic, index, data) in enumerate(entries):
                try:
                    h = headers[i] = _client_batch_header(data)
                except KafkaError as e:
                    results[i] = PartitionAppendResult(topic, index, int(e.code), e.message)
                    continue
                if h is None or not h.attributes & TRANSACTIONAL_BIT:
                    continue
                if transactional_id is None:  # Kafka refuses these: they could never end
                    results[i] = PartitionAppendResult(
                        topic, index, int(ErrorCode.transactional_id_authorization_failed),
                        "transactional records without a transactional id")
                    continue
                p = self._partitions.get((topic, index))
                if p is not None and p.is_leader and not p.has_ongoing_txn(
                        h.producer_id, h.producer_epoch):
                    unverified.append((i, p, h))
            guards: dict[int, VerificationGuard] = {}
            if unverified:
                assert transactional_id is not None
                guards = await self._verify(transactional_id, unverified, entries, results)
            if turn is not None and not turn.ready:
                await turn.wait()
            for i, (topic, index, data) in enumerate(entries):
                if results[i] is None:
                    results[i] = self.append_local(topic, index, data, required_acks,
                                                   AppendOrigin.CLIENT, headers[i],
                                                   guards.get(i))
        finally:
            if turn is not None:
                turn.release()
        done: list[PartitionAppendResult] = results  # type: ignore[assignment]
        if required_acks == -1:
            await self.wait_for_acks(done, timeout_ms)
        return done

    async def _verify(
        self, transactional_id: str, unverified: list[tuple[int, Partition, BatchHeader]],
        entries: Sequence[tuple[str, int, memoryview]],
        results: list[PartitionAppendResult | None],
    ) -> dict[int, VerificationGuard]:
        """Step 2 of `handle_produce_append`: verify each (entry, partition, header), one
        question to the coordinator per producer for the partitions no concurrent request
        is asking about already. Failures go into `results`; returns the guards of the
        entries that passed."""
        asking: dict[tuple[int, int], list[tuple[tuple[str, int], VerificationGuard]]] = {}
        waits: list[tuple[int, VerificationGuard, asyncio.Future[int]]] = []
        loop = asyncio.get_running_loop()
        for i, p, h in unverified:
            guard = p.maybe_start_verification(h.producer_id, h.producer_epoch)
            if guard.pending is None or guard.pending.done():
                guard.pending = loop.create_future()
                asking.setdefault((h.producer_id, h.producer_epoch), []).append(
                    ((p.topic, p.index), guard))
            waits.append((i, guard, guard.pending))
        for (pid, epoch), asked in asking.items():
            # A task of its own: the answer is shared, so no request's cancellation (its
            # connection closing) may cancel it.
            task = loop.create_task(self._ask_coordinator(transactional_id, pid, epoch, asked))
            self._verifications.add(task)
            task.add_done_callback(self._verifications.discard)
        guards: dict[int, VerificationGuard] = {}
        for i, guard, fut in waits:
            code = await asyncio.shield(fut)
            if code:
                topic, index, _ = entries[i]
                results[i] = PartitionAppendResult(
                    topic, index, code,
                    f"transactional batch refused: {ErrorCode(code).name}")
            else:
                guards[i] = guard
        return guards

    async def _ask_coordinator(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        asked: list[tuple[tuple[str, int], VerificationGuard]],
    ) -> None:
        """Ask the transaction coordinator about `asked` and answer each guard's future
        with a Produce error code; a failure to ask is NOT_ENOUGH_REPLICAS, retriable
        (Kafka's answer when verification cannot reach the coordinator)."""
        tps = [tp for tp, _ in asked]
        codes: dict[tuple[str, int], int] = {}
        try:
            if self.txn_verifier is None:
                codes = {tp: int(ErrorCode.invalid_txn_state) for tp in tps}
            else:
                codes = await self.txn_verifier(transactional_id, producer_id,
                                                producer_epoch, tps)
        except Exception:
            log.exception("KIP-890 verification of %s for %s failed", tps, transactional_id)
        finally:
            for tp, guard in asked:
                fut = guard.pending
                if fut is not None and not fut.done():
                    fut.set_result(int(codes.get(tp, ErrorCode.not_enough_replicas)))

    async def append_records(
        self,
        entries: Iterable[
            tuple[str, int, memoryview] | tuple[str, int, memoryview, BatchHeader | None]
        ],
        required_acks: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        timeout_ms: int = 30_000,
    ) -> list[PartitionAppendResult]:
        """Append each (topic, partition, records) and wait as `required_acks` asks.

        acks=0/1 return once the leader wrote. acks=-1 (all) waits until every in-sync
        replica has the records (the high watermark passes them: at once on one broker)
        and, on a `write.caching=false` topic, until they are fsynced; whatever is not done
        within `timeout_ms` is answered REQUEST_TIMED_OUT.
        """
        if required_acks not in (0, 1, -1):
            code = int(InvalidRequiredAcksError.code)
            return [PartitionAppendResult(e[0], e[1], code) for e in entries]
        # An entry may carry a 4th item: the batch header its caller parsed (Produce does).
        results = [
            self.append_local(e[0], e[1], e[2], required_acks, origin,
                              e[3] if len(e) > 3 else None)  # type: ignore[misc]
            for e in entries
        ]
        if required_acks == -1 and origin is not AppendOrigin.REPLICATION:
            # (A follower's copy is acknowledged by its next fetch, not by waiting here.)
            await self.wait_for_acks(results, timeout_ms)
        return results

    async def write_txn_markers(
        self, markers: Sequence[TxnMarker], timeout_ms: int = 30_000
    ) -> list[PartitionAppendResult]:
        """Append each marker on the coordinator's behalf (acks=all, Kafka's
        WriteTxnMarkers), one result per marker in order; a partition not hosted here is
        UNKNOWN_TOPIC_OR_PARTITION, whose meaning the caller decides (deleted, or led
        elsewhere)."""
        results: list[PartitionAppendResult] = []
        for m in markers:
            p = self._partitions.get((m.topic, m.partition))
            try:
                if p is None:
                    raise UnknownTopicOrPartitionError(
                        f"{m.topic}-{m.partition} is not hosted here")
                info = p.append_txn_marker(m.producer_id, m.producer_epoch,
                                           m.coordinator_epoch, m.commit)
            except KafkaError as e:
                results.append(PartitionAppendResult(m.topic, m.partition, int(e.code),
                                                      e.message))
                continue
            except Exception:
                log.exception("marker for %s-%d failed", m.topic, m.partition)
                results.append(PartitionAppendResult(m.topic, m.partition, _STORAGE))
                continue
            results.append(PartitionAppendResult(m.topic, m.partition, _NONE, None, info))
        await self.wait_for_acks(results, timeout_ms)
        return results

    async def wait_for_acks(self, results: Sequence[PartitionAppendResult],
                            timeout_ms: int) -> None:
        """The delayed-produce step of acks=all: replication, then durability if asked."""
        waits: list[tuple[PartitionAppendResult, Any]] = []
        for r in results:
            info = r.info
            if r.error or info is None:
                continue
            p = self._partitions.get((r.topic, r.partition))
            if p is None:
                r.error, r.info = _NOT_LEADER, None
                continue
            required = info.last_offset + 1
            if p.high_watermark < required:
                waits.append((r, self.produce_purgatory.watch(r.topic, r.partition, required)))
            if not p.config.write_caching:
                waits.append((r, self._sync(p, required)))
        if not waits:
            self._check_still_acknowledging(results)
            return
        done, pending = await asyncio.wait([w for _, w in waits], timeout=timeout_ms / 1000)
        for r, w in waits:
            if r.info is None:
                if w in pending:
                    w.cancel()
                continue  # already failed by its other wait
            if w in pending:
                w.cancel()
                p = self._partitions.get((r.topic, r.partition))
                # Kafka's DelayedProduce: the ISR fell below min.insync.replicas after the
                # append (the high watermark cannot move then), else a plain timeout.
                r.error = _NOT_ENOUGH_AFTER if p is not None and p.under_min_isr \
                    else _TIMED_OUT
                r.info = None
            elif w.exception() is not None:
                # Written but not durable: the client must not take it as acknowledged.
                log.error("fsync of %s-%d failed: %r", r.topic, r.partition, w.exception())
                r.error, r.info = _STORAGE, None
            elif w.result() is False:  # leadership moved away while waiting
                r.error, r.info = _NOT_LEADER, None
        self._check_still_acknowledging(results)

    def _check_still_acknowledging(self, results: Sequence[PartitionAppendResult]) -> None:
        """Last check before acks=all answers success: a broker fenced meanwhile (or
        whose session lapsed while it waited, e.g. paused) acknowledges nothing."""
        if self._may_acknowledge():
            return
        for r in results:
            if r.info is not None:
                r.error, r.info = _NOT_LEADER, None

    def _sync(self, p: Partition, offset: int) -> asyncio.Future[None]:
        """A future done once `p` is durable up to `offset` (fsync off the event loop).

        Group commit on the loop side: at most one fsync job per partition is in the io
        threads; requests arriving while it runs wait for the next one, which then covers
        everything appended meanwhile. So a burst of pipelined acks=all produces costs one
        thread hand-off per fsync, not one per request."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        st = self._syncs.get(p)
        if st is None:
            st = self._syncs[p] = _SyncState()
        st.waiters.append((offset, fut))
        if not st.running:
            self._start_sync(loop, p, st)
        return fut

    def _start_sync(self, loop: asyncio.AbstractEventLoop, p: Partition, st: _SyncState
                    ) -> None:
        target = max(o for o, _ in st.waiters)
        try:
            job = loop.run_in_executor(self.io_pool, p.log.sync, target)
        except RuntimeError as e:  # the io threads are shut down: the broker is stopping
            for _, fut in st.waiters:
                if not fut.done():
                    fut.set_exception(KafkaStorageError(f"not synced: {e}"))
            st.waiters = []
            self._syncs.pop(p, None)
            return
        st.running = True
        job.add_done_callback(lambda j: self._sync_done(loop, p, st, target, j))

    def _sync_done(self, loop: asyncio.AbstractEventLoop, p: Partition, st: _SyncState,
                   target: int, job: asyncio.Future[None]) -> None:
        st.running = False
        exc = None if not job.cancelled() else asyncio.CancelledError()
        if exc is None:
            exc = job.exception()
        later: list[tuple[int, asyncio.Future[None]]] = []
        for offset, fut in st.waiters:
            if fut.done():
                continue  # given up on (request timeout)
            if offset > target:
                later.append((offset, fut))
            elif exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(None)
        st.waiters = later
        if later:
            self._start_sync(loop, p, st)
        elif not later and self._syncs.get(p) is st:
            del self._syncs[p]

    # ------------------------------------------------------------------ fetch

    async def fetch_messages(
        self, params: FetchParams, wanted: Sequence[FetchPartition],
        turn: EffectTurn | None = None,
    ) -> list[PartitionReadResult]:
        """Read every wanted partition; if together they have fewer than `min_bytes` and
        no error, park in the fetch purgatory until new data or `max_wait_ms`, then read
        again (Kafka's DelayedFetch). Results are in the order of `wanted`.

        `turn`: the request's place in its connection's order of effects: the first read
        (and a follower's fetch state) comes after every earlier request's effects, as if
        the connection were handled one request at a time; the long poll holds no one."""
        try:
            if turn is not None and not turn.ready:
                await turn.wait()
            resolved = [self._partitions.get((w.topic, w.partition)) for w in wanted]
            remote: list[int] = []  # indexes of tiered reads below the local log start
            if params.replica_id >= 0:
                results, total, errors = self._read_for_follower(params, wanted, resolved)
            else:
                results, total, errors = self._read_all(params, wanted, resolved, remote)
        finally:
            if turn is not None:
                turn.release()
        # A follower is fetching (alive) until this fetch is answered or dropped with its
        # connection; then silent until its next one (`replica.fetch.dead.ms`, issue 27).
        followed: list[Partition] = []
        if params.replica_id >= 0:
            followed = [p for p in resolved if p is not None and p.is_leader]
            for p in followed:
                p.follower_fetch_started(params.replica_id)
        try:
            if remote:
                await self._read_remote(params, wanted, resolved, results, remote, total)
                return results
            if total >= params.min_bytes or errors or not wanted or params.max_wait_ms <= 0:
                return results
            loop = asyncio.get_running_loop()
            deadline = loop.time() + params.max_wait_ms / 1000
            keys = [(w.topic, w.partition) for w in wanted]
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return results
                woken = await self.fetch_purgatory.wait(keys, remaining)
                resolved = [self._partitions.get(k) for k in keys]
                results, total, errors = self._read_all(params, wanted, resolved)
                if not woken or total >= params.min_bytes or errors:
                    return results
        finally:
            if followed:
                now = self.clock.now_ms()
                for p in followed:
                    p.follower_fetch_ended(params.replica_id, now)

    def _read_for_follower(
        self, params: FetchParams, wanted: Sequence[FetchPartition],
        resolved: Sequence[Partition | None],
    ) -> tuple[list[PartitionReadResult], int, bool]:
        """A follower's fetch, first pass (Kafka's leader side of replication): check its
        epochs, answer a diverging epoch where its log stops matching ours, record its log
        end offset (moving the high watermark, maybe adding it to the ISR), then read up to
        the log end. A later pass after a long-poll wake-up is a plain read."""
        now = self.clock.now_ms()
        replica = params.replica_id
        epoch = params.replica_epoch
        early = False  # an error or a diverging epoch: answer at once, never long-poll
        plain_wanted: list[FetchPartition] = []
        plain_resolved: list[Partition | None] = []
        slots: list[int | PartitionReadResult] = []
        for w, p in zip(wanted, resolved, strict=True):
            if p is None:
                slots.append(PartitionReadResult(_UNKNOWN_TP))
                early = True
                continue
            try:
                p.check_epoch(w.current_leader_epoch)
            except KafkaError as e:
                slots.append(PartitionReadResult(int(e.code), current_leader=(
                    p.state.leader, p.leader_epoch)))
                early = True
                continue
            offset = w.fetch_offset
            if w.last_fetched_epoch >= 0:
                # Kafka's Partition.fetchRecords: the follower's last epoch must end here
                # at or after its fetch offset, or it must truncate first.
                end_epoch, end_offset = p.end_offset_for_epoch(w.last_fetched_epoch)
                if end_epoch < 0 or end_offset < 0:
                    # No epoch of ours is that old: nothing to compare; the follower
                    # learns our log's bounds from OFFSET_OUT_OF_RANGE (Kafka's answer).
                    early = True
                    slots.append(PartitionReadResult(_OUT_OF_RANGE, p.high_watermark,
                                                     p.last_stable_offset, p.log_start_offset))
                    continue
                if end_epoch < w.last_fetched_epoch or end_offset < offset:
                    early = True
                    slots.append(PartitionReadResult(
                        _NONE, p.high_watermark, p.last_stable_offset, p.log_start_offset,
                        diverging_epoch=(end_epoch, end_offset)))
                    continue
            if p.log_start_offset <= offset <= p.log_end_offset:
                p.update_follower_fetch_state(replica, offset, now, epoch, w.log_start_offset)
            slots.append(len(plain_wanted))
            plain_wanted.append(w)
            plain_resolved.append(p)
        read, total, errors = self._read_all(params, plain_wanted, plain_resolved)
        out = [s if isinstance(s, PartitionReadResult) else read[s] for s in slots]
        return out, total, errors or early

    def _read_all(
        self, params: FetchParams, wanted: Sequence[FetchPartition],
        resolved: Sequence[Partition | None], remote: list[int] | None = None,
    ) -> tuple[list[PartitionReadResult], int, bool]:
        """Kafka's byte limits: each partition at most its `max_bytes`, the response at
        most `params.max_bytes`, except that the first partition with data returns at
        least one whole batch, so a batch bigger than the limits can still be consumed."""
        total = 0
        errors = False
        out: list[PartitionReadResult] = []
        isolation = params.isolation
        max_bytes = params.max_bytes
        rl = self.remote_log
        for w, p in zip(wanted, resolved, strict=True):
            if p is None:
                out.append(PartitionReadResult(_UNKNOWN_TP))
                errors = True
                continue
            try:
                p.check_epoch(w.current_leader_epoch)
                info = p.read(w.fetch_offset, min(w.max_bytes, max_bytes - total), isolation,
                              total == 0, params.zero_copy)
            except OffsetOutOfRangeError:
                if (remote is not None and self.remote_log is not None
                        and p.log.config.remote_storage_enable
                        and w.fetch_offset < p.log_start_offset):
                    remote.append(len(out))  # tiered: read by _read_remote
                    out.append(PartitionReadResult(_NONE))
                    continue
                out.append(PartitionReadResult(_OUT_OF_RANGE, p.high_watermark,
                                               p.last_stable_offset, p.log_start_offset))
                errors = True
                continue
            except KafkaError as e:
                code = int(e.code)
                out.append(PartitionReadResult(
                    code, current_leader=(p.state.leader, p.leader_epoch)
                    if code in (_NOT_LEADER, _FENCED_EPOCH) else None))
                errors = True
                continue
            total += info.size
            log_start = info.log_start_offset
            if rl is not None and p.log.config.remote_storage_enable:
                # Tiered: the whole log's start (the remote one), as Kafka answers.
                remote_start = rl.log_start_offset(w.topic, w.partition)
                if remote_start is not None:
                    log_start = remote_start
            out.append(PartitionReadResult(_NONE, info.high_watermark, info.last_stable_offset,
                                           log_start, info.buffers, info.size,
                                           info.aborted_transactions))
        return out, total, errors

    async def _read_remote(
        self, params: FetchParams, wanted: Sequence[FetchPartition],
        resolved: Sequence[Partition | None], results: list[PartitionReadResult],
        slots: list[int], total: int,
    ) -> None:
        """Fill `results[i]` for the tiered partitions whose fetch offset is below the local
        log start (issue 25): from the remote log, after the local reads, within what is
        left of the response's byte budget. The remote log holds only records below the
        high watermark that nothing can change any more, so no order of effects applies."""
        rl = self.remote_log
        assert rl is not None
        committed = params.isolation is FetchIsolation.TXN_COMMITTED
        for i in slots:
            w, p = wanted[i], resolved[i]
            assert p is not None
            log_ = p.log
            hw = log_.high_watermark
            lso = min(log_.last_stable_offset, hw)
            start = rl.log_start_offset(w.topic, w.partition)
            low = log_.log_start_offset if start is None else start
            try:
                rr, aborted = await rl.read(
                    w.topic, w.partition, str(p.topic_id), log_, w.fetch_offset,
                    min(w.max_bytes, params.max_bytes - total), lso if committed else hw,
                    total == 0, committed)
            except OffsetOutOfRangeError:
                results[i] = PartitionReadResult(_OUT_OF_RANGE, hw, lso, low)
                continue
            except KafkaError as e:
                results[i] = PartitionReadResult(int(e.code), hw, lso, low)
                continue
            total += rr.size
            results[i] = PartitionReadResult(_NONE, hw, lso, low, rr.buffers, rr.size, aborted)

    # ------------------------------------------------------------------ follower side

    def follower_partition(self, topic: str, partition: int, leader_epoch: int) -> Partition:
        """The partition a replica fetcher works on, if this broker still follows it at
        `leader_epoch` (a fetch answered under an older leadership is dropped)."""
        p = self._partitions.get((topic, partition))
        if p is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} is not hosted here")
        if p.is_leader or p.leader_epoch != leader_epoch:
            raise NotLeaderOrFollowerError(
                f"{topic}-{partition} is no longer followed here at epoch {leader_epoch}")
        return p

    def append_as_follower(
        self, topic: str, partition: int, leader_epoch: int, records: memoryview,
        leader_high_watermark: int, leader_log_start_offset: int,
    ) -> LogAppendInfo | None:
        """Append batches fetched from the leader (offsets and epochs as they are; the
        producers' state follows them, so a new leader knows their sequences), then
        take the leader's high watermark and log start offset. A trailing partial batch
        is left for the next fetch. Returns None when there was nothing to append;
        raises KafkaError (not followed at this epoch any more, corrupt data)."""
        p = self.follower_partition(topic, partition, leader_epoch)
        info = None
        n = _whole_batches(records)
        if n:
            info = p.append_as_follower(records[:n] if n != len(records) else records)
        p.update_high_watermark_as_follower(leader_high_watermark, leader_log_start_offset)
        return info

    def truncate(self, topic: str, partition: int, leader_epoch: int, offset: int) -> int:
        """Truncate a follower's log at `offset` (diverging epochs); returns its new log
        end offset. Runs on the event loop on purpose: no leadership change or append
        may interleave with a truncation, and it is rare (after a leader change)."""
        p = self.follower_partition(topic, partition, leader_epoch)
        if offset < p.log_end_offset:
            log.info("%s-%d: truncating from %d to %d (diverged from the leader at epoch %d)",
                     topic, partition, p.log_end_offset, offset, leader_epoch)
            p.truncate_to(offset)
            self.fetch_purgatory.notify(topic, partition)
        return p.log_end_offset

    def truncate_fully_and_start_at(self, topic: str, partition: int, leader_epoch: int,
                                    offset: int) -> None:
        """Empty a follower's log and start it at `offset` (the leader's log starts after
        ours ends, or our log is ahead of a leader that has nothing in common with it)."""
        p = self.follower_partition(topic, partition, leader_epoch)
        log.info("%s-%d: restarting the log at %d (was %d..%d) to follow the leader",
                 topic, partition, offset, p.log_start_offset, p.log_end_offset)
        p.truncate_fully_and_start_at(offset)
        self.fetch_purgatory.notify(topic, partition)

    def last_offset_for_leader_epoch(
        self, topic: str, partition: int, leader_epoch: int, current_leader_epoch: int = -1,
        require_leader: bool = True,
    ) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= `leader_epoch`, its end offset), or
        (-1, -1) if this log has no such epoch; raises KafkaError for the epoch checks
        (clients, KIP-320) and for a partition not led here when `require_leader`."""
        p = self.partition_or_error(topic, partition)
        p.check_epoch(current_leader_epoch, require_leader=require_leader)
        return p.end_offset_for_epoch(leader_epoch)

    def under_replicated_partitions(self) -> int:
        return sum(1 for p in self._partitions.values() if p.is_under_replicated)

    # ------------------------------------------------------------------ offsets, deletes

    def fetch_offset_for_timestamp(
        self, topic: str, partition: int, timestamp: int, isolation: FetchIsolation,
        current_leader_epoch: int = -1,
    ) -> tuple[int, int, int]:
        """ListOffsets on the leader: (offset, timestamp, leader epoch); raises KafkaError."""
        p = self.partition_or_error(topic, partition)
        p.check_epoch(current_leader_epoch)
        found = p.fetch_offset_for_timestamp(timestamp, isolation)
        rl = self.remote_log
        if rl is not None and p.log.config.remote_storage_enable:
            # Tiered (issue 25): earliest is the remote log's start; -4 stays local.
            if timestamp == EARLIEST_TIMESTAMP:
                start = rl.log_start_offset(topic, partition)
                if start is not None and start < found[0]:
                    return start, -1, rl.epoch_for(topic, partition, start)
            elif timestamp == LATEST_TIERED_TIMESTAMP:
                last = rl.highest_copied_offset(topic, partition)
                if last is not None:
                    return last, -1, rl.epoch_for(topic, partition, last)
        return found

    async def remote_offset_for_timestamp(
        self, topic: str, partition: int, timestamp: int, found: tuple[int, int, int],
    ) -> tuple[int, int, int]:
        """ListOffsets by time on a tiered partition (issue 25): the first record at or after
        `timestamp` may be in the remote log, older than anything local; `found` is the
        local answer, kept when the remote log has none."""
        rl = self.remote_log
        p = self._partitions.get((topic, partition))
        if rl is None or p is None or timestamp < 0 or not p.log.config.remote_storage_enable:
            return found
        remote = await rl.offset_for_timestamp(topic, partition, p.log, timestamp)
        if remote is None:
            return found
        return remote[0], remote[1], rl.epoch_for(topic, partition, remote[0])

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords on the leader; returns the new low watermark; raises KafkaError."""
        p = self.partition_or_error(topic, partition)
        low = p.delete_records_on_leader(offset)
        rl = self.remote_log
        if rl is not None and p.log.config.remote_storage_enable:
            # Tiered (issue 25): the whole log's start moves, remote records included.
            rl.delete_records(topic, partition, p.log.high_watermark if offset == -1 else offset)
            start = rl.log_start_offset(topic, partition)
            if start is not None:
                return start
        return low

    def describe_log_dirs(
        self, wanted: Mapping[str, Iterable[int]] | None
    ) -> LogDirDescription:
        """Sizes of the hosted partitions asked for (None: all of them) and the disk space
        of the log directory. Partitions not hosted here are left out, as Kafka does."""
        if wanted is None:
            chosen = sorted(self._partitions.values(), key=lambda p: (p.topic, p.index))
        else:
            chosen = [p for t, parts in sorted(wanted.items()) for i in parts
                      if (p := self._partitions.get((t, i))) is not None]
        path = os.path.realpath(self.logs.data_dir)
        usage = shutil.disk_usage(path)
        desc = LogDirDescription(path, usage.total, usage.free)
        for p in chosen:
            try:
                size = p.size_in_bytes
            except (OSError, KafkaStorageError):  # a segment deleted by retention meanwhile
                size = 0
            desc.topics.setdefault(p.topic, []).append((p.index, size))
        return desc


def _client_batch_header(data: memoryview) -> BatchHeader | None:
    """The header of a client's batch, after the checks Kafka makes of a Produce v3+
    partition's records that storage does not: exactly one batch, not a control batch.
    None if the framing is bad (storage then refuses it with CORRUPT_MESSAGE); size and
    CRC are storage's checks."""
    if len(data) < HEADER_SIZE:
        raise CorruptRecordError("truncated record batch")
    h = read_header(data, 0)
    if not h.framing_ok:
        return None
    size = h.batch_length + LOG_OVERHEAD
    if size != len(data):
        if size > len(data):
            raise CorruptRecordError("record batch truncated")
        raise InvalidRecordError(
            "Produce v3+ requests must carry exactly one record batch per partition")
    if h.attributes & CONTROL_BIT:
        raise InvalidRecordError("clients may not write control batches")
    return h




def _whole_batches(records: memoryview) -> int:
    """Bytes of the whole batches at the start of `records` (a fetch may end in a partial
    batch when a byte limit cut it). Reads one length field per batch."""
    n = len(records)
    pos = 0
    while n - pos >= 12:
        size = _I32.unpack_from(records, pos + 8)[0] + 12
        if size < 12 + 49:
            raise CorruptRecordError(f"batch length {size - 12} at byte {pos}")
        if pos + size > n:
            break
        pos += size
    return pos
