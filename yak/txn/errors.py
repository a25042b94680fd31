"""The transaction coordinator's error codes as each client sees them.

Its one job is translation: `compat_error` gives the code an older request version
understands (PRODUCER_FENCED arrived in later versions), and `produce_verification_error`
gives the code a Produce response reports when KIP-890 verification of a transactional
batch fails. Separate from the coordinator because its users are the request handlers and
the cluster layer's remote verification, which need the mapping but not the coordinator;
`yak.txn.coordinator` re-exports both.
"""

from __future__ import annotations

from yak.errors import ErrorCode

__all__ = ["compat_error", "produce_verification_error"]

# Versions below which clients only know INVALID_PRODUCER_EPOCH (KafkaApis).
_FENCED_AS_EPOCH_BELOW = {22: 4, 24: 2, 25: 2, 26: 2}


def compat_error(api_key: int, api_version: int, error: ErrorCode) -> ErrorCode:
    """The code an old client understands: PRODUCER_FENCED was added in InitProducerId v4,
    AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v2; TxnOffsetCommit < v2 clients crash on
    COORDINATOR_LOAD_IN_PROGRESS (KAFKA-7296)."""
    if error is ErrorCode.producer_fenced:
        below = _FENCED_AS_EPOCH_BELOW.get(api_key)
        if below is not None and api_version < below:
            return ErrorCode.invalid_producer_epoch
    if error is ErrorCode.coordinator_load_in_progress and api_key == 28 and api_version < 2:
        return ErrorCode.coordinator_not_available
    return error


# Verification failures as a Produce response reports them (Kafka's ReplicaManager and
# AddPartitionsToTxnManager): clients know these codes from before KIP-890.
_PRODUCE_VERIFY_ERRORS: dict[ErrorCode, ErrorCode] = {
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    ErrorCode.transaction_abortable: ErrorCode.invalid_txn_state,
    # retriable coordinator trouble: NOT_ENOUGH_REPLICAS makes every client retry the
    # Produce without a metadata refresh
    ErrorCode.concurrent_transactions: ErrorCode.not_enough_replicas,
    ErrorCode.network_exception: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_load_in_progress: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_not_available: ErrorCode.not_enough_replicas,
    ErrorCode.not_coordinator: ErrorCode.not_enough_replicas,
}


def produce_verification_error(error: ErrorCode) -> ErrorCode:
    """The Produce error for a transactional batch whose partition failed KIP-890
    verification (`verify_partitions`, or AddPartitionsToTxn v4 verify_only remotely)."""
    return _PRODUCE_VERIFY_ERRORS.get(error, error)
