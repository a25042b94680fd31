"""What a leader remembers about producers between their requests, to answer the next
batch right: KIP-890's verification guards and the producers refused with a retriable
error.

- `maybe_start_verification` / `_check_verification`: the `VerificationGuard` a
  transactional batch is verified with (yak/partition/verification.py says why a guard),
  one per producer, dropped when the transaction starts here, when a marker for the
  producer is written, and on any leadership change;
- `note_refused_producer` / `_sequence_gap_error`: an idempotent producer's batch refused
  before it was written, with a retriable error, makes the sequence gap it leaves answer
  with the same error until that producer's next batch is written (why: the docstring of
  `_sequence_gap_error`).

`ProducerGuards` is a part of `Partition` (a class it extends, like `FollowerTracking`):
the append path checks these with no await between the check and the write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yak.errors import InvalidTxnStateError, KafkaError
from yak.partition.verification import VerificationGuard
from yak.protocol.records import HEADER_SIZE, read_header

if TYPE_CHECKING:
    from yak.errors import OutOfOrderSequenceError
    from yak.protocol.records import BatchHeader
    from yak.storage import PartitionLog

__all__ = ["ProducerGuards", "producer_of"]


class ProducerGuards:
    """Per producer, a partition's guards and refusals (see the module's docstring)."""

    # The partition's, read here.
    topic: str
    index: int
    log: PartitionLog
    # Set up by the partition (its __init__, leadership changes, appends), kept here.
    _verification_guards: dict[int, VerificationGuard]
    _refused_producers: dict[int, tuple[int, type[KafkaError], str]]

    def _check_verification(self, guard: VerificationGuard) -> None:
        pid, epoch = guard.producer_id, guard.producer_epoch
        if self.log.producer_state.has_ongoing_txn(pid, epoch):
            return
        if self._verification_guards.get(pid) is not guard:
            raise InvalidTxnStateError(
                f"{self.topic}-{self.index}: the transaction of producer {pid} (epoch"
                f" {epoch}) ended after this batch was verified")

    def maybe_start_verification(self, producer_id: int,
                                 producer_epoch: int) -> VerificationGuard:
        """The guard a transactional batch of this producer is verified with: the one in
        place if it is for the same epoch (concurrent requests share it), else a new one
        (Kafka's maybeStartTransactionVerification)."""
        guard = self._verification_guards.get(producer_id)
        if guard is None or guard.producer_epoch != producer_epoch:
            guard = self._verification_guards[producer_id] = VerificationGuard(
                producer_id, producer_epoch)
        return guard

    def note_refused_producer(self, records: memoryview, header: BatchHeader | None,
                              error: KafkaError) -> None:
        """An idempotent producer's batch was refused before it was written, with a
        retriable error (this broker fenced or not leading for a moment, the ISR below
        min.insync.replicas, the disk full): until that producer's next batch is written
        here, a sequence gap it leaves is answered with the same error (see
        `_sequence_gap_error`)."""
        pid, epoch = producer_of(records, header)
        if pid >= 0:
            self._refused_producers[pid] = (epoch, type(error), error.message)

    def _sequence_gap_error(self, records: memoryview, header: BatchHeader | None,
                            error: OutOfOrderSequenceError) -> KafkaError:
        """OUT_OF_ORDER_SEQUENCE_NUMBER, unless the gap is this producer's batch that was
        refused here with a retriable error: then that error again.

        Why: a producer pipelines up to 5 batches. When the first is refused for a
        transient reason, Kafka's state that refused it (leadership, the ISR, an offline
        log dir) refuses the ones behind it the same way. Here such a state can end between
        two requests (a lease renewed 100 ms late, the disk freed), and the batch behind
        would meet the gap. librdkafka answers OUT_OF_ORDER_SEQUENCE_NUMBER on a batch
        behind the head by bumping the producer epoch and renumbering every unacknowledged
        message on every partition, so a batch another partition's leader had written but
        not yet acknowledged is written again: a duplicate (librdkafka issue #4953; found
        by `yak chaos`). The retriable answer makes it retry the refused batch first, then
        the rest, with their sequences.
        """
        pid, epoch = producer_of(records, header)
        refused = self._refused_producers.get(pid)
        if refused is None or refused[0] != epoch:
            return error
        _, kind, message = refused
        return kind(f"{message} (a batch of producer {pid} ahead of this one was refused;"
                    f" it must be written first)")


def producer_of(records: memoryview, header: BatchHeader | None) -> tuple[int, int]:
    """(producer id, producer epoch) of a produce's first batch; (-1, -1) if it has none
    or is too short to say (storage refuses that one on its own)."""
    if header is None:
        if len(records) < HEADER_SIZE:
            return -1, -1
        header = read_header(records)
    return header.producer_id, header.producer_epoch
