"""The group coordinator's vocabulary: its settings and the values its API takes and returns.

One job: name what crosses the coordinator's boundary (the handlers build `OffsetToCommit`,
read `JoinResult`, `FetchedOffset` ...), and how a failed write to `__consumer_offsets` maps
to the error a client sees. Separate so that the membership manager, the offsets manager and
the facade share these without importing each other; `yak.group.coordinator` re-exports
every name, so the handlers' imports stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from yak.errors import ErrorCode, KafkaError
from yak.settings import BROKER_SETTINGS, ConfigError

__all__ = [
    "GroupConfig",
    "JoinResult",
    "SyncResult",
    "LeaveResult",
    "MemberDescription",
    "GroupDescription",
    "GroupListing",
    "FetchedOffset",
    "OffsetToCommit",
    "storage_error_code",
    "txn_storage_error_code",
]


def _default(name: str) -> int:
    return int(BROKER_SETTINGS[name].parse_default())


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Broker settings that shape group behaviour (Kafka's names in the comments; the
    defaults are the settings table's)."""

    initial_rebalance_delay_ms: int = _default("group.initial.rebalance.delay.ms")
    min_session_timeout_ms: int = _default("group.min.session.timeout.ms")
    max_session_timeout_ms: int = _default("group.max.session.timeout.ms")
    max_group_size: int = _default("group.max.size")
    offsets_retention_ms: int = _default("offsets.retention.minutes") * 60_000
    offsets_retention_check_interval_ms: int = _default("offsets.retention.check.interval.ms")
    offset_metadata_max_bytes: int = _default("offset.metadata.max.bytes")
    consumer_session_timeout_ms: int = _default("group.consumer.session.timeout.ms")
    consumer_heartbeat_interval_ms: int = _default("group.consumer.heartbeat.interval.ms")

    def validate(self) -> None:
        """What no single setting can check: the coordinator refuses to start on these
        (Kafka's GroupCoordinatorConfig requirements), with one line naming the key."""
        if self.min_session_timeout_ms > self.max_session_timeout_ms:
            raise ConfigError(
                f"invalid value {self.min_session_timeout_ms} for group.min.session.timeout.ms:"
                f" greater than group.max.session.timeout.ms ({self.max_session_timeout_ms})"
            )
        if self.consumer_heartbeat_interval_ms >= self.consumer_session_timeout_ms:
            raise ConfigError(
                f"invalid value {self.consumer_heartbeat_interval_ms} for"
                " group.consumer.heartbeat.interval.ms: must be less than"
                f" group.consumer.session.timeout.ms ({self.consumer_session_timeout_ms})"
            )


@dataclass(slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class LeaveResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupDescription:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str
    protocol_name: str
    members: list[MemberDescription] = field(default_factory=list)


@dataclass(slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(slots=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str | None = ""
    error: ErrorCode = ErrorCode.none


def txn_storage_error_code(err: BaseException) -> ErrorCode:
    """A TxnOffsetCommit append failure: as for OffsetCommit, except that the producer's
    own errors (a fenced epoch, a sequence problem) reach it as they are."""
    if isinstance(err, KafkaError) and err.code in (
        ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced,
        ErrorCode.out_of_order_sequence_number, ErrorCode.invalid_txn_state,
    ):
        return ErrorCode.invalid_producer_epoch if err.code is ErrorCode.producer_fenced \
            else err.code
    return storage_error_code(err)


def storage_error_code(err: BaseException) -> ErrorCode:
    """Kafka's mapping of an append failure for coordinator writes: the client should
    find the coordinator again and retry, except for records that can never fit."""
    if isinstance(err, KafkaError):
        if err.code in (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress):
            return err.code  # the runtime's own answer: the shard is not served here now
        if err.code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
            return ErrorCode.unknown_server_error
        if err.code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
            return ErrorCode.not_coordinator
    return ErrorCode.coordinator_not_available
