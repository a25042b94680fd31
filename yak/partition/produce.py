"""The write side of the ReplicaManager: Produce, the coordinators' appends, transaction
markers, and the delayed produce of acks=all (Kafka's `appendRecords`,
`handleProduceAppend`, `appendRecordsToLeader` and `DelayedProduce`).

An append never raises: each partition's error is in its `PartitionAppendResult`, so one
bad partition never fails the others of a request. A client's Produce
(`handle_produce_append`) makes the request checks, has the first transactional batch of
a transaction verified (KIP-890, yak/partition/verification.py), waits for its turn in
its connection's order of effects (yak/partition/ordering.py), appends with no await in
between, and only then waits for acks=all: the high watermark (the produce purgatory)
and, on a `write.caching=false` topic, the fsync (yak/partition/group_commit.py). A
broker that is fenced, or whose session is not known to be valid, acknowledges nothing.

`AppendPath` is a part of `ReplicaManager` (a class it extends, like `FetchPath`): the
Produce hot path reads the ReplicaManager's own attributes, with no extra call per
request, and the handlers and coordinators keep calling the ReplicaManager.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from yak.errors import (
    CorruptRecordError,
    DuplicateSequenceError,
    ErrorCode,
    InvalidRecordError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from yak.partition.partition import LogAppendInfo
from yak.partition.state import INTERNAL_TOPICS
from yak.protocol.records import (
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_BIT,
    read_header,
)

if TYPE_CHECKING:
    from yak.partition.group_commit import GroupCommit
    from yak.partition.ordering import EffectTurn
    from yak.partition.partition import Partition
    from yak.partition.purgatory import ProducePurgatory
    from yak.partition.verification import TxnVerification, VerificationGuard
    from yak.protocol.records import BatchHeader

__all__ = ["AppendOrigin", "AppendPath", "PartitionAppendResult", "TxnMarker"]

log = logging.getLogger(__name__)

_NONE = int(ErrorCode.none)
_STORAGE = int(ErrorCode.kafka_storage_error)
_TIMED_OUT = int(ErrorCode.request_timed_out)
_NOT_LEADER = int(ErrorCode.not_leader_or_follower)
_NOT_ENOUGH_AFTER = int(ErrorCode.not_enough_replicas_after_append)


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


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One COMMIT/ABORT marker for one partition (an entry of WriteTxnMarkers)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


class AppendPath:
    """Appends on the ReplicaManager (see the module's docstring)."""

    # The ReplicaManager's, read here.
    _partitions: dict[tuple[str, int], Partition]
    _fenced: bool
    _fenced_reason: str
    session_valid: Callable[[], bool] | None
    produce_purgatory: ProducePurgatory
    group_commit: GroupCommit
    verification: TxnVerification

    def _may_acknowledge(self) -> bool:
        """Not fenced, and the session is known to be valid (see `ReplicaManager.fence`)."""
        if self._fenced:
            return False
        check = self.session_valid
        return check is None or check()

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
        entries: list[tuple[str, int, memoryview]],
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

        `entries` is emptied once the appends are done: its records are views of the
        connection's receive buffer, which the connection reuses once nothing holds a view
        of it, so an acks=all request must not hold them while it waits (issue 28). The
        loops that bind a record view are in functions of their own for the same reason.
        """
        try:
            if required_acks not in (0, 1, -1):
                code = int(InvalidRequiredAcksError.code)
                return [PartitionAppendResult(t, i, code) for t, i, _ in entries]
            results, headers, unverified = self._check_batches(entries, transactional_id)
            guards: dict[int, VerificationGuard] = {}
            if unverified:
                assert transactional_id is not None
                guards, refused = await self.verification.verify(transactional_id, unverified)
                for i, code in refused.items():
                    topic, index, _ = entries[i]
                    results[i] = PartitionAppendResult(
                        topic, index, code,
                        f"transactional batch refused: {ErrorCode(code).name}")
            if turn is not None and not turn.ready:
                await turn.wait()
            self._append_entries(entries, results, headers, guards, required_acks)
        finally:
            if turn is not None:
                turn.release()
            entries.clear()
        done: list[PartitionAppendResult] = results  # type: ignore[assignment]
        if required_acks == -1:
            await self.wait_for_acks(done, timeout_ms)
        return done

    def _check_batches(
        self, entries: list[tuple[str, int, memoryview]], transactional_id: str | None,
    ) -> tuple[list[PartitionAppendResult | None], list[BatchHeader | None],
               list[tuple[int, Partition, BatchHeader]]]:
        """Step 1 of `handle_produce_append`: a result for each entry refused before any
        state is read, each batch's header, and the (entry index, partition, header) of
        the batches that need KIP-890 verification."""
        results: list[PartitionAppendResult | None] = [None] * len(entries)
        headers: list[BatchHeader | None] = [None] * len(entries)
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
        return results, headers, unverified

    def _append_entries(
        self, entries: list[tuple[str, int, memoryview]],
        results: list[PartitionAppendResult | None], headers: list[BatchHeader | None],
        guards: dict[int, VerificationGuard], required_acks: int,
    ) -> None:
        """Step 4 of `handle_produce_append`: the appends of the entries not refused
        yet, with no await in between."""
        for i, (topic, index, data) in enumerate(entries):
            if results[i] is None:
                results[i] = self.append_local(topic, index, data, required_acks,
                                               AppendOrigin.CLIENT, headers[i],
                                               guards.get(i))

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
        """The delayed-produce step of acks=all: replication, then durability if asked.

        Each wait is a future of its own (the purgatory's, the group commit's), awaited
        directly, with one timer for the request that marks the ones still pending as
        expired (`_EXPIRED`): an `asyncio.wait` per request cost a set, a future, a
        callback per wait and a second loop pass per request (13.6 against 6.1 us per
        single-wait request in a micro-benchmark; issue 28)."""
        waits: list[tuple[PartitionAppendResult, asyncio.Future[Any]]] = []
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
                waits.append((r, self.group_commit.sync(p, required)))
        if not waits:
            self._check_still_acknowledging(results)
            return
        timer = asyncio.get_running_loop().call_later(timeout_ms / 1000, _expire, waits)
        try:
            for _, w in waits:
                if not w.done():
                    try:
                        await w
                    except asyncio.CancelledError:
                        # This request's own cancellation (its connection closed) goes
                        # on; a fsync job's CancelledError set on `w` is read below.
                        task = asyncio.current_task()
                        if w.cancelled() or (task is not None and task.cancelling()):
                            raise
                    except Exception:  # noqa: S110,SIM105 (a failed fsync: read below; no
                        pass  # context manager per wait on the hot path)
        finally:
            timer.cancel()
        for r, w in waits:
            exc = w.exception()
            expired = exc is None and w.result() is _EXPIRED
            if expired:
                # (a group commit's waiter done early is skipped by its fsync job)
                self.produce_purgatory.forget(r.topic, r.partition, w)
            if r.info is None:
                continue  # already failed by its other wait
            if expired:
                p = self._partitions.get((r.topic, r.partition))
                # Kafka's DelayedProduce: the ISR fell below min.insync.replicas after the
                # append (the high watermark cannot move then), else a plain timeout.
                r.error = _NOT_ENOUGH_AFTER if p is not None and p.under_min_isr \
                    else _TIMED_OUT
                r.info = None
            elif exc is not None:
                # Written but not durable: the client must not take it as acknowledged.
                log.error("fsync of %s-%d failed: %r", r.topic, r.partition, exc)
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


_EXPIRED = object()
"""The result `_expire` gives a wait still pending at the request's timeout."""


def _expire(waits: list[tuple[PartitionAppendResult, asyncio.Future[Any]]]) -> None:
    """An acks=all request's timeout: every wait still pending is expired (the request's
    task then wakes once, whichever wait it was awaiting)."""
    for _, w in waits:
        if not w.done():
            w.set_result(_EXPIRED)


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
