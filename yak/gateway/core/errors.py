"""Transport-neutral gateway errors: what went wrong, not how a transport says it.

The core raises `GatewayError(reason, message)`; each transport owns one table from
`Reason` to its own vocabulary (REST: HTTP status + Confluent error code, gRPC: a status
code, WebSocket: an error frame). A Kafka error keeps its code and name, so a transport
that reports Kafka codes per record (gRPC's `RecordResult`) can pass them through.
"""

from __future__ import annotations

import enum

from yak.gateway.cluster import ClusterError


class Reason(enum.Enum):
    INVALID_ARGUMENT = "invalid_argument"      # the request itself is malformed
    INVALID_PAYLOAD = "invalid_payload"        # record data the format cannot encode/decode
    UNSUPPORTED_FORMAT = "unsupported_format"  # an embedded format nobody registered
    TOPIC_NOT_FOUND = "topic_not_found"
    PARTITION_NOT_FOUND = "partition_not_found"
    SESSION_NOT_FOUND = "session_not_found"    # consumer instance / stream session
    GROUP_NOT_FOUND = "group_not_found"
    SESSION_EXISTS = "session_exists"
    TOPIC_EXISTS = "topic_exists"
    ILLEGAL_STATE = "illegal_state"            # e.g. subscribe after assign
    OFFSET_OUT_OF_RANGE = "offset_out_of_range"
    TOO_LARGE = "too_large"
    UNAVAILABLE = "unavailable"                # the cluster cannot be reached
    KAFKA_ERROR = "kafka_error"                # any other error the cluster answered
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"


class GatewayError(Exception):
    def __init__(self, reason: Reason, message: str, kafka_code: int = -1,
                 kafka_name: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.kafka_code = kafka_code
        self.kafka_name = kafka_name

    def __repr__(self) -> str:
        return f"GatewayError({self.reason.name}, {self.message!r})"


class RecordDecodeError(GatewayError):
    """A consumed record the session's format cannot decode; `index` says which one."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(Reason.INVALID_PAYLOAD, message)
        self.index = index


_INVALID = frozenset({
    "INVALID_CONFIG", "INVALID_PARTITIONS", "INVALID_REPLICATION_FACTOR",
    "INVALID_TOPIC_EXCEPTION", "POLICY_VIOLATION", "INVALID_REQUEST",
})
_DENIED = frozenset({
    "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
})
_UNAUTHENTICATED = frozenset({"SASL_AUTHENTICATION_FAILED", "_AUTHENTICATION"})


def from_cluster_error(e: ClusterError) -> GatewayError:
    """Classify a Kafka-side failure; the Kafka code and name travel along."""
    if e.unreachable:
        reason, msg = Reason.UNAVAILABLE, f"Kafka cluster unreachable: {e.message}"
    elif e.name in ("UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID"):
        reason, msg = Reason.TOPIC_NOT_FOUND, "Topic not found."
    elif e.name == "TOPIC_ALREADY_EXISTS":
        reason, msg = Reason.TOPIC_EXISTS, e.message
    elif e.name in _INVALID:
        reason, msg = Reason.INVALID_ARGUMENT, f"{e.name}: {e.message}"
    elif e.name in ("MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE"):
        reason, msg = Reason.TOO_LARGE, f"{e.name}: {e.message}"
    elif e.name in _DENIED:
        reason, msg = Reason.PERMISSION_DENIED, f"{e.name}: {e.message}"
    elif e.name in _UNAUTHENTICATED:
        reason, msg = Reason.UNAUTHENTICATED, f"{e.name}: {e.message}"
    else:
        reason, msg = Reason.KAFKA_ERROR, f"{e.name or 'Kafka error'}: {e.message}"
    return GatewayError(reason, msg, e.code, e.name)
