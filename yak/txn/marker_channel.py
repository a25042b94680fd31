"""`TransactionMarkerChannelManager`: a decided transaction's markers, then its completion.

Its one job starts once PrepareCommit/PrepareAbort is in `__transaction_state`: write the
COMMIT/ABORT markers to every partition of the transaction through the `MarkerWriter`
(`yak/txn/markers.py` in a broker), retry the partitions that failed retriably after
`retry_backoff_ms`, skip the ones that can no longer hold the transaction, give up when a
newer producer epoch or coordinator owns it, and once the last partition has its marker
write CompleteCommit/CompleteAbort through the state manager. This is Kafka's
`TransactionMarkerChannelManager` with its `TransactionMarkerRequestCompletionHandler`
policy (the sending itself is the `MarkerWriter`'s, one call per attempt).

It is separate from the coordinator because it runs after the request that decided the
transaction was answered, on its own timers, and has its own state (one job per id); and
from the state manager because the cache neither knows nor waits for markers. It asks the
state manager whether a job is still current after every await, so a deposed
coordinator never completes what the new one now owns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from yak.coordinator.timer import Clock, TimerQueue
from yak.errors import ErrorCode
from yak.txn.config import TxnConfig, TxnStats
from yak.txn.log import MarkerWriter
from yak.txn.state import TopicPartition, TransactionMetadata, TransactionState, TxnTransitMetadata
from yak.txn.state_manager import Spawn, TransactionStateManager, TxnPartition

__all__ = ["TransactionMarkerChannelManager", "MarkerJob"]

log = logging.getLogger(__name__)

_S = TransactionState

# Marker results (TransactionMarkerRequestCompletionHandler): retry these...
_MARKER_RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
        ErrorCode.leader_not_available,
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
    }
)
# ...give up on the whole transaction for these (a newer producer epoch or coordinator
# owns it now: the other coordinator finishes it)...
_MARKER_FENCED = frozenset(
    {ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced}
)
# ...and skip the partition for these: it no longer exists (deleted topic), or it
# cannot hold transactional data, so the producer could not have written to it.
_MARKER_SKIP = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unsupported_for_message_format,
        ErrorCode.unsupported_version,
    }
)


@dataclass(slots=True, eq=False)
class MarkerJob:
    """A transaction whose markers are being written (Kafka's PendingCompleteTxn)."""

    transactional_id: str
    partition: int
    coordinator_epoch: int
    meta: TransactionMetadata
    target: TxnTransitMetadata  # the CompleteCommit/CompleteAbort to write at the end
    commit: bool
    producer_id: int
    producer_epoch: int
    # Resolved when the job ends (completed, fenced, dropped): requests for the id that
    # arrived while it ran wait on it instead of answering CONCURRENT_TRANSACTIONS.
    finished: asyncio.Future[None] | None = None


class TransactionMarkerChannelManager:
    def __init__(
        self,
        markers: MarkerWriter,
        state: TransactionStateManager,
        config: TxnConfig,
        clock: Clock,
        timers: TimerQueue,
        stats: TxnStats,
        spawn: Spawn,
    ) -> None:
        self.markers = markers
        self.state = state
        self.config = config
        self.clock = clock
        self.timers = timers
        self.stats = stats
        self._spawn = spawn
        self._jobs: dict[str, MarkerJob] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    # ================================================================ jobs

    def start(self, entry: TxnPartition, partition: int, meta: TransactionMetadata) -> None:
        """`meta` is in PrepareCommit/PrepareAbort in the log: send its markers, then
        complete it (a job already running for the id is replaced)."""
        target = meta.prepare_complete(self.clock.now_ms())
        job = MarkerJob(
            meta.transactional_id,
            partition,
            entry.coordinator_epoch,
            meta,
            target,
            meta.state is _S.PREPARE_COMMIT,
            meta.producer_id,
            meta.producer_epoch,
        )
        old = self._jobs.get(meta.transactional_id)
        if old is not None:
            self._end_job(old)
        self._jobs[meta.transactional_id] = job
        self._send_markers(job, set(meta.partitions))

    async def complete_loaded(self, partition: int, entry: TxnPartition,
                              decided: list[TransactionMetadata]) -> None:
        """Send the markers of the transactions loaded in a Prepare state, once the
        partition's high watermark covers the loaded log end.

        Why wait: loading reads to the log end (see `yak.coordinator.loader`), so a
        PrepareCommit the previous leader wrote but never got acknowledged may be loaded
        from above the high watermark. Sending its markers at once and dying before a
        follower copied it would let a third coordinator, whose log lacks the record, abort
        what this one had committed in some partitions: a torn transaction. Meanwhile the
        transactions stay in their Prepare state, which answers the producer
        CONCURRENT_TRANSACTIONS, as Kafka does while it completes them."""
        if not await self.state.wait_loaded_committed(partition, entry.coordinator_epoch):
            return  # no longer the leader at this epoch: the next coordinator finishes them
        if self.state.entry(partition) is not entry:
            return
        for meta in decided:
            if entry.txns.get(meta.transactional_id) is meta and meta.state in (
                    _S.PREPARE_COMMIT, _S.PREPARE_ABORT):
                self.start(entry, partition, meta)

    def remove_for(self, transactional_ids: Iterable[str]) -> None:
        """The ids' partition was unloaded: stop their jobs (the next coordinator
        re-sends their markers)."""
        for txn_id in transactional_ids:
            job = self._jobs.get(txn_id)
            if job is not None:
                self._end_job(job)

    def stop(self) -> None:
        for job in list(self._jobs.values()):
            self._end_job(job)

    def _end_job(self, job: MarkerJob) -> None:
        """The job is over (completed, fenced, or its partition dropped): forget it, and
        wake the requests waiting for it (they look the id up again)."""
        if self._jobs.get(job.transactional_id) is job:
            del self._jobs[job.transactional_id]
            self.timers.cancel(("txn-markers", job.transactional_id))
        if job.finished is not None and not job.finished.done():
            job.finished.set_result(None)

    async def wait_for_completion(self, txn_id: str, meta: TransactionMetadata) -> bool:
        """Wait, at most `completion_wait_ms`, for the id's running completion (markers,
        then CompleteCommit/CompleteAbort) to end. True if there was one to wait for.

        Kafka answers CONCURRENT_TRANSACTIONS to a request that meets a completion in
        flight, and clients back off before retrying (librdkafka and the Java client 20 ms
        for AddPartitionsToTxn), while a local completion takes about a millisecond: a
        producer that starts its next transaction right after EndTxn lost ~20 ms per
        transaction. Waiting here is the client's retry done on the broker, without the
        backoff: the request is looked at again from scratch once the job is over, so it
        gets exactly the answer a retry would have got."""
        job = self._jobs.get(txn_id)
        if job is None or job.meta is not meta or self.config.completion_wait_ms <= 0:
            return False
        if job.finished is None:
            job.finished = asyncio.get_running_loop().create_future()
        # (asyncio.wait leaves the shared future alone when it times out)
        await asyncio.wait([job.finished], timeout=self.config.completion_wait_ms / 1000)
        return True

    def _job_current(self, job: MarkerJob) -> bool:
        entry = self.state.entry(job.partition)
        return (
            self._jobs.get(job.transactional_id) is job
            and entry is not None
            and entry.coordinator_epoch == job.coordinator_epoch
            and entry.txns.get(job.transactional_id) is job.meta
        )

    # ================================================================ markers

    def _send_markers(self, job: MarkerJob, tps: set[TopicPartition]) -> None:
        if not self._job_current(job):
            return
        if not tps:
            self._spawn(self._write_completion(job), f"txn-complete-{job.transactional_id}")
            return
        self._spawn(self._markers_attempt(job, tps), f"txn-markers-{job.transactional_id}")

    async def _markers_attempt(self, job: MarkerJob, tps: set[TopicPartition]) -> None:
        try:
            results: Mapping[TopicPartition, ErrorCode] = await self.markers.write_markers(
                job.producer_id,
                job.producer_epoch,
                job.coordinator_epoch,
                job.commit,
                frozenset(tps),
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:  # unreachable brokers etc.: retry them all
            log.info("writing markers for %r failed: %s", job.transactional_id, e)
            results = {}
        self._on_markers(job, tps, results)

    def _on_markers(
        self,
        job: MarkerJob,
        tps: Collection[TopicPartition],
        results: Mapping[TopicPartition, ErrorCode],
    ) -> None:
        if not self._job_current(job):
            return  # resigned, reloaded or stopped: the current coordinator finishes it
        retry: set[TopicPartition] = set()
        for tp in tps:
            error = results.get(tp, ErrorCode.request_timed_out)
            if error is ErrorCode.none or error in _MARKER_SKIP:
                if error is not ErrorCode.none:
                    log.info(
                        "skipping marker of %r for %s-%d: %s",
                        job.transactional_id,
                        tp[0],
                        tp[1],
                        error.name,
                    )
                job.meta.remove_partition(tp)
            elif error in _MARKER_FENCED:
                log.info(
                    "markers of %r are fenced (%s); another coordinator owns them",
                    job.transactional_id,
                    error.name,
                )
                self._end_job(job)
                return
            else:
                if error not in _MARKER_RETRIABLE:
                    log.error(
                        "unexpected %s writing a marker of %r to %s-%d; retrying",
                        error.name,
                        job.transactional_id,
                        tp[0],
                        tp[1],
                    )
                retry.add(tp)
        if retry:
            self.stats.marker_retries += 1
            self.timers.schedule(
                ("txn-markers", job.transactional_id),
                self.clock.now_ms() + self.config.retry_backoff_ms,
                lambda: self._send_markers(job, retry),
            )
        elif not job.meta.partitions:
            self._spawn(self._write_completion(job), f"txn-complete-{job.transactional_id}")

    # ================================================================ completion

    async def _write_completion(self, job: MarkerJob) -> None:
        if not self._job_current(job):
            return
        entry = self.state.entry(job.partition)
        assert entry is not None  # _job_current
        error = await self.state.append(
            job.transactional_id, entry, job.meta, job.target, keep_pending_on_error=True
        )
        if error is ErrorCode.none:
            self._end_job(job)
            return
        if not self._job_current(job):
            return  # no longer ours: the new leader reloads and finishes it
        # Still the leader at the same epoch (a local or transient failure): try again,
        # the pending state keeps every client request at CONCURRENT_TRANSACTIONS.
        log.info("completing %r failed (%s); retrying", job.transactional_id, error.name)
        self.timers.schedule(
            ("txn-markers", job.transactional_id),
            self.clock.now_ms() + self.config.retry_backoff_ms,
            lambda: self._send_markers(job, set()),
        )
