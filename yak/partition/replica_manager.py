"""ReplicaManager: every partition hosted on this broker, and the operations on them.

Handlers and coordinators never touch a `PartitionLog`: they ask the ReplicaManager to
append (with the producer's acks, on behalf of a client, a coordinator or replication),
to read (with an isolation level and byte limits, long-polling when there is too little),
to list offsets, to delete records or to describe the log directory. It owns the
`Partition` objects, the delayed-operation purgatories (Fetch long-polls, acks=all
produces waiting on the high watermark), the threads that do disk work off the event loop
(fsync for `write.caching=false`, log maintenance) and the broker's fencing.

Which partitions exist and who leads them is not decided here: the controller does, and
hands each decision to `apply_partition_state` (Kafka's `applyDelta`/`makeLeaders`), at
start-up and on every change the metadata brings.

This module keeps the orchestration (life cycle, hosting, fencing, ListOffsets,
DeleteRecords, DescribeLogDirs); each path is a part of its own, which `ReplicaManager`
extends so that the hot paths read one object's attributes and callers keep one API:

- `AppendPath` (produce.py): Produce, the coordinators' appends, markers, acks=all, with
  KIP-890 verification (verification.py) and the fsync group commit (group_commit.py);
- `FetchPath` (fetch.py): Fetch for consumers and followers, the long poll, tiered reads;
- `FollowerPath` (follower.py): what the replica fetchers do to followed partitions;
- `IsrMaintenance` (isr_maintenance.py): the isr-expiration task and the AlterPartition
  submissions (ISR changes go to the `AlterPartitionManager`, yak/partition/isr.py).

Fencing: a broker that lost its registration (`fence()`), or whose session is no longer
known to be valid (`session_valid`, a check without I/O), acknowledges nothing: leader
appends are refused and waiting acks=all produces fail, until `unfence()`.

Time: durations of the replication protocol are read from `clock` (monotonic), the time
log maintenance judges retention and rolls by from `wall_clock` (wall time, what record
timestamps mean); both are given at construction (yak/clock.py), so tests move time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from yak.clock import Clock, MonotonicClock, SystemClock
from yak.errors import (
    KafkaStorageError,
    OffsetNotAvailableError,
    UnknownTopicOrPartitionError,
)
from yak.partition.fetch import FetchParams, FetchPartition, FetchPath, PartitionReadResult
from yak.partition.follower import FollowerPath
from yak.partition.group_commit import GroupCommit
from yak.partition.isr_maintenance import IsrMaintenance
from yak.partition.partition import (
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    FetchIsolation,
    Partition,
)
from yak.partition.produce import AppendOrigin, AppendPath, PartitionAppendResult, TxnMarker
from yak.partition.purgatory import FetchPurgatory, ProducePurgatory
from yak.partition.state import PartitionState
from yak.partition.verification import TxnVerification

if TYPE_CHECKING:
    import uuid
    from collections.abc import Callable

    from yak.partition.isr import AlterPartitionManager
    from yak.partition.verification import TxnVerifier
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


@dataclass
class LogDirDescription:
    """DescribeLogDirs for the one log directory: partition sizes and disk space."""

    path: str
    total_bytes: int
    usable_bytes: int
    topics: dict[str, list[tuple[int, int]]] = field(default_factory=dict)


class ReplicaManager(AppendPath, FetchPath, FollowerPath, IsrMaintenance):
    """Every partition hosted on this broker, and the operations on them (see the module's
    docstring for which part does what)."""

    def __init__(self, node_id: int, logs: LogManager, io_threads: int = 4,
                 replica_lag_time_max_ms: int = 30_000,
                 alter_partition: AlterPartitionManager | None = None,
                 clock: Clock | None = None, replica_fetch_dead_ms: int = 0,
                 wall_clock: Clock | None = None) -> None:
        self.node_id = node_id
        # Durations of the replication protocol (follower silence, ISR expiration, retry
        # pauses), read by every Partition; a test passes a ManualClock (yak/clock.py).
        self.clock: Clock = clock or MonotonicClock()
        # Wall time for log maintenance (retention.ms and segment.ms compare it with
        # record timestamps); a test passes a ManualClock.
        self.wall_clock: Clock = wall_clock or SystemClock()
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
        # KIP-890 part 1: the questions to the transaction coordinator (`txn_verifier`,
        # set by the composition).
        self.verification = TxnVerification()
        self._isr_tasks: set[asyncio.Task[None]] = set()
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
        # write.caching=false: per partition, the fsync job in flight and who waits on it.
        self.group_commit = GroupCommit(self.io_pool)
        # Maintenance (retention deletes, checkpoints) gets its own thread so a long pass
        # never queues acks=all fsyncs behind it.
        self._maintenance_pool = ThreadPoolExecutor(max_workers=1,
                                                    thread_name_prefix="yak-maintenance")
        self._maintenance: asyncio.Task[None] | None = None
        # Tiered storage (issue 25, docs/tiered.md): serves fetches below the local log
        # start of topics with remote.storage.enable; set by the composition, or None.
        self.remote_log: RemoteLogManager | None = None

    @property
    def txn_verifier(self) -> TxnVerifier | None:
        """KIP-890 part 1: asks the transaction coordinator (here or on another broker)
        whether partitions are in a producer's ongoing transaction; set by the
        composition. None: no coordinator, transactional batches that would start a
        transaction are refused (INVALID_TXN_STATE)."""
        return self.verification.verifier

    @txn_verifier.setter
    def txn_verifier(self, verifier: TxnVerifier | None) -> None:
        self.verification.verifier = verifier

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._maintenance = loop.create_task(self._maintenance_loop(), name="log-maintenance")
        self._isr_expiration = loop.create_task(self._isr_expiration_loop(),
                                                name="isr-expiration")

    async def stop(self) -> None:
        for task in (self._maintenance, self._isr_expiration, *self._isr_tasks):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._maintenance = self._isr_expiration = None
        self._isr_tasks.clear()
        await self.verification.stop()
        # A pass already running in its thread must finish before the logs shut down.
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._maintenance_pool.shutdown, True)
        await loop.run_in_executor(None, self.io_pool.shutdown, True)
        self.produce_purgatory.fail_all()
        self.fetch_purgatory.notify_all()

    async def _maintenance_loop(self) -> None:
        """Retention, time-based rolls, flush.ms and checkpoints, once a second, in a
        thread: a retention pass that deletes segments must not stall requests."""
        while True:
            await asyncio.sleep(MAINTENANCE_INTERVAL_S)
            await self.maintenance_pass()

    async def maintenance_pass(self) -> None:
        """One pass of log maintenance at the wall clock's now, in the maintenance thread
        (what the loop runs every second; tests call it with a manual clock)."""
        try:
            await asyncio.get_running_loop().run_in_executor(
                self._maintenance_pool, self.logs.maintenance, self.wall_clock.now_ms())
        except Exception:
            log.exception("log maintenance failed")

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

    # ------------------------------------------------------------------ offsets, deletes

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

    async def wait_remote_log_ready(self, topic: str, partition: int) -> None:
        """Before ListOffsets answers from a tiered partition's remote log (earliest, latest
        tiered, by time): a new leader answers from the remote log metadata only once it
        has read it for its leadership (issue 25). The copy it held as a follower may
        predate a DeleteRecords its predecessor answered, so an earliest offset from it
        could name deleted records. Waits for that read up to remote.fetch.max.wait.ms,
        then OFFSET_NOT_AVAILABLE, which clients retry, as for a new leader whose high
        watermark is not caught up yet (KIP-207)."""
        rl = self.remote_log
        if rl is None:
            return
        p = self.partition_or_error(topic, partition)
        if not p.log.config.remote_storage_enable or not p.is_leader:
            return
        if not await rl.wait_leader_ready(topic, partition, p.leader_epoch):
            raise OffsetNotAvailableError(
                f"{topic}-{partition}: the remote log metadata of leader epoch"
                f" {p.leader_epoch} is not read yet")

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
        """The broker's own pruning on the leader (the share coordinator's state topic);
        returns the new low watermark; raises KafkaError. On a tiered partition the remote
        log's start is committed by the next round, not waited for: a client's
        DeleteRecords goes through `delete_records_acked`."""
        p = self.partition_or_error(topic, partition)
        low = p.delete_records_on_leader(offset)
        rl = self.remote_log
        if rl is not None and p.log.config.remote_storage_enable:
            # Tiered (issue 25): the whole log's start moves, remote records included.
            rl.request_log_start(topic, partition,
                                 p.log.high_watermark if offset == -1 else offset)
            start = rl.log_start_offset(topic, partition)
            if start is not None:
                return start
        return low

    async def delete_records_acked(self, topic: str, partition: int, offset: int,
                                   timeout_ms: int) -> int:
        """A client's DeleteRecords on the leader: returns the new low watermark once it is
        durable; raises KafkaError. On a tiered partition (issue 25) the whole log's start
        moves, remote records included, and is answered only once committed to the remote
        log metadata, as Kafka answers only once the log start offset is durable: an
        answered DeleteRecords is never undone by a restart or a new leader
        (KAFKA_STORAGE_ERROR or REQUEST_TIMED_OUT, retriable, if it cannot be committed)."""
        p = self.partition_or_error(topic, partition)
        target = p.log.high_watermark if offset == -1 else offset
        low = p.delete_records_on_leader(offset)
        rl = self.remote_log
        if rl is None or not p.log.config.remote_storage_enable:
            return low
        start = await rl.delete_records(topic, partition, target, max(timeout_ms, 0) / 1000)
        return low if start is None else start

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

