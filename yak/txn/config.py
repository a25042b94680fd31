"""The settings, counters and names that the transaction coordinator's three parts share.

`TransactionCoordinator` (requests), `TransactionStateManager` (the id cache and
`__transaction_state`) and `TransactionMarkerChannelManager` (markers and completion) all
read `TxnConfig` and count into one `TxnStats`. They live here, below the three, so each
part imports them without importing another part. `yak.txn.coordinator` re-exports them,
which is where the composition and the tests import them from.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TxnConfig", "TxnStats", "OFFSETS_TOPIC"]

OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """Broker settings that shape the coordinator (Kafka's names in the comments)."""

    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3_600_000
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions (AddOffsetsToTxn)
    # Yak's own: pause before re-sending markers / re-writing a completion that failed.
    retry_backoff_ms: int = 100
    # Yak's own: how long AddPartitionsToTxn/AddOffsetsToTxn wait for the id's previous
    # transaction to complete before answering CONCURRENT_TRANSACTIONS (0: never wait).
    completion_wait_ms: int = 100
    log_value_version: int = 0  # TransactionLogValue version written (see records.py)


@dataclass(slots=True)
class TxnStats:
    """Counters for metrics (monotonic since start-up)."""

    commits: int = 0
    aborts: int = 0
    timed_out: int = 0  # aborted by the timeout sweep
    fenced: int = 0  # Ongoing transactions aborted by a new InitProducerId
    expired_ids: int = 0
    marker_retries: int = 0
