"""Kafka's error codes, defined once for all of Yak.

The numeric codes come from kio's `ErrorCode` (generated from Kafka's own
`Errors.java`), so Yak never keeps a second, drifting table. Internal layers
(storage, coordinators) raise `KafkaError` subclasses; the broker maps them to
the wire with `error.code`, so a storage failure reaches the client as the code
a Kafka client already knows how to handle (retry, refresh metadata, give up).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = [
    "ErrorCode",
    "KafkaError",
    "CorruptRecordError",
    "InvalidRecordError",
    "RecordTooLargeError",
    "RecordBatchTooLargeError",
    "InvalidTimestampError",
    "KafkaStorageError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "UnknownProducerIdError",
    "UnknownTopicOrPartitionError",
    "InvalidTopicError",
    "TopicAlreadyExistsError",
    "InvalidPartitionsError",
    "InvalidReplicationFactorError",
    "InvalidConfigurationError",
    "PolicyViolationError",
    "NotLeaderOrFollowerError",
    "FencedLeaderEpochError",
    "UnknownLeaderEpochError",
    "NotEnoughReplicasError",
    "NotEnoughReplicasAfterAppendError",
    "RequestTimedOutError",
    "InvalidRequiredAcksError",
    "InvalidReplicaAssignmentError",
    "UnknownTopicIdError",
    "TopicDeletionDisabledError",
    "InvalidRequestError",
    "UnsupportedVersionError",
    "SaslAuthenticationError",
    "IllegalSaslStateError",
    "UnsupportedSaslMechanismError",
    "TopicAuthorizationFailedError",
    "GroupAuthorizationFailedError",
    "ClusterAuthorizationFailedError",
    "TransactionalIdAuthorizationFailedError",
    "DelegationTokenAuthorizationFailedError",
    "SecurityDisabledError",
    "ResourceNotFoundError",
    "DuplicateResourceError",
    "UnacceptableCredentialError",
    "ThrottlingQuotaExceededError",
    "TransactionCoordinatorFencedError",
    "InvalidTxnStateError",
    "error_for_code",
]


class KafkaError(Exception):
    """An error that has a Kafka error code; `retriable` follows Kafka's classification."""

    code: ErrorCode = ErrorCode.unknown_server_error
    retriable: bool = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.code.name)
        self.message = message or self.code.name


class CorruptRecordError(KafkaError):
    """Bad CRC, bad magic framing, or a batch whose bytes do not add up (CORRUPT_MESSAGE)."""

    code = ErrorCode.corrupt_message
    retriable = True


class InvalidRecordError(KafkaError):
    """A batch that is well formed but not acceptable (e.g. a client-written control batch).

    `record_errors`: (index of the record in its batch, message) for each refused record,
    which the Produce response (v8+) carries as KIP-467's `record_errors`.
    """

    code = ErrorCode.invalid_record

    def __init__(
        self, message: str = "", record_errors: list[tuple[int, str | None]] | None = None
    ) -> None:
        super().__init__(message)
        self.record_errors: list[tuple[int, str | None]] = record_errors or []


class RecordTooLargeError(KafkaError):
    """A batch larger than `max.message.bytes` (MESSAGE_TOO_LARGE)."""

    code = ErrorCode.message_too_large


class RecordBatchTooLargeError(KafkaError):
    code = ErrorCode.record_list_too_large


class InvalidTimestampError(KafkaError):
    """A CreateTime outside `message.timestamp.before/after.max.ms`."""

    code = ErrorCode.invalid_timestamp


class KafkaStorageError(KafkaError):
    """Disk full or any other I/O failure: nothing of the append is visible."""

    code = ErrorCode.kafka_storage_error
    retriable = True


class OffsetOutOfRangeError(KafkaError):
    code = ErrorCode.offset_out_of_range


class OutOfOrderSequenceError(KafkaError):
    code = ErrorCode.out_of_order_sequence_number


class DuplicateSequenceError(KafkaError):
    """A retried batch already in the log; carries the original offsets to answer with."""

    code = ErrorCode.duplicate_sequence_number

    def __init__(self, base_offset: int, last_offset: int, log_append_time: int = -1) -> None:
        super().__init__(f"duplicate batch at offset {base_offset}")
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.log_append_time = log_append_time


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.invalid_producer_epoch


class UnknownProducerIdError(KafkaError):
    code = ErrorCode.unknown_producer_id


class UnknownTopicOrPartitionError(KafkaError):
    code = ErrorCode.unknown_topic_or_partition
    retriable = True


class InvalidTopicError(KafkaError):
    code = ErrorCode.invalid_topic_exception


class TopicAlreadyExistsError(KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidConfigurationError(KafkaError):
    code = ErrorCode.invalid_config


class PolicyViolationError(KafkaError):
    code = ErrorCode.policy_violation


class NotLeaderOrFollowerError(KafkaError):
    code = ErrorCode.not_leader_or_follower
    retriable = True


class FencedLeaderEpochError(KafkaError):
    code = ErrorCode.fenced_leader_epoch
    retriable = True


class UnknownLeaderEpochError(KafkaError):
    code = ErrorCode.unknown_leader_epoch
    retriable = True


class OffsetNotAvailableError(KafkaError):
    """A new leader's high watermark has not yet reached the start of its epoch: offsets
    it would answer could be below ones the old leader gave out (KIP-207); retriable."""

    code = ErrorCode.offset_not_available


class NotEnoughReplicasError(KafkaError):
    """acks=all while the ISR is smaller than min.insync.replicas: refused before appending."""

    code = ErrorCode.not_enough_replicas
    retriable = True


class NotEnoughReplicasAfterAppendError(KafkaError):
    """Appended, but the ISR shrank below min.insync.replicas before it was replicated."""

    code = ErrorCode.not_enough_replicas_after_append
    retriable = True


class RequestTimedOutError(KafkaError):
    code = ErrorCode.request_timed_out
    retriable = True


class InvalidRequiredAcksError(KafkaError):
    code = ErrorCode.invalid_required_acks


class InvalidReplicaAssignmentError(KafkaError):
    code = ErrorCode.invalid_replica_assignment


class UnknownTopicIdError(KafkaError):
    code = ErrorCode.unknown_topic_id
    retriable = True


class TopicDeletionDisabledError(KafkaError):
    code = ErrorCode.topic_deletion_disabled


class InvalidRequestError(KafkaError):
    code = ErrorCode.invalid_request


class UnsupportedVersionError(KafkaError):
    code = ErrorCode.unsupported_version


# Security (authentication, authorization, credentials, quotas).


class SaslAuthenticationError(KafkaError):
    """A failed login (bad password, unknown user): answered, then the connection closes."""

    code = ErrorCode.sasl_authentication_failed


class IllegalSaslStateError(KafkaError):
    """A SASL request out of order (e.g. SaslAuthenticate before SaslHandshake)."""

    code = ErrorCode.illegal_sasl_state


class UnsupportedSaslMechanismError(KafkaError):
    code = ErrorCode.unsupported_sasl_mechanism


class TopicAuthorizationFailedError(KafkaError):
    code = ErrorCode.topic_authorization_failed


class GroupAuthorizationFailedError(KafkaError):
    code = ErrorCode.group_authorization_failed


class ClusterAuthorizationFailedError(KafkaError):
    code = ErrorCode.cluster_authorization_failed


class TransactionalIdAuthorizationFailedError(KafkaError):
    code = ErrorCode.transactional_id_authorization_failed


class DelegationTokenAuthorizationFailedError(KafkaError):
    code = ErrorCode.delegation_token_authorization_failed


class SecurityDisabledError(KafkaError):
    """An ACL API on a broker without an authorizer."""

    code = ErrorCode.security_disabled


class ResourceNotFoundError(KafkaError):
    code = ErrorCode.resource_not_found


class DuplicateResourceError(KafkaError):
    code = ErrorCode.duplicate_resource


class UnacceptableCredentialError(KafkaError):
    code = ErrorCode.unacceptable_credential


class ThrottlingQuotaExceededError(KafkaError):
    code = ErrorCode.throttling_quota_exceeded
    retriable = True


class TransactionCoordinatorFencedError(KafkaError):
    """A transaction marker from a coordinator older than the one the partition has seen
    for that producer (a deposed coordinator's late marker)."""

    code = ErrorCode.transaction_coordinator_fenced


class InvalidTxnStateError(KafkaError):
    """A transactional batch whose transaction ended (its marker written) between its
    KIP-890 verification and its append (the VerificationGuard no longer matches)."""

    code = ErrorCode.invalid_txn_state


_BY_CODE: dict[ErrorCode, type[KafkaError]] = {}
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, KafkaError) and _cls is not KafkaError:
        _BY_CODE.setdefault(_cls.code, _cls)


def error_for_code(code: int, message: str = "") -> KafkaError:
    """The exception for a code read off the wire (clients, replication fetchers)."""
    ec = ErrorCode(code)
    cls = _BY_CODE.get(ec)
    if cls is None or cls is DuplicateSequenceError:
        err = KafkaError(message or ec.name)
        err.code = ec
        return err
    return cls(message)
