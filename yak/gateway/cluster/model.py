"""What the gateway's cluster calls answer with: `ClusterError` and the metadata and
offset records the REST API, the console and the core read."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException

DEFAULT_TIMEOUT_S = 10.0


class ClusterError(Exception):
    """A failed cluster call, carrying Kafka's error name/code when there is one."""

    def __init__(self, message: str, code: int = -1, name: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.name = name

    @property
    def unreachable(self) -> bool:
        return self.name in ("_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "TIMEOUT")


def cluster_error(exc: BaseException) -> ClusterError:
    if isinstance(exc, ClusterError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err: KafkaError = exc.args[0]
        return ClusterError(err.str(), err.code(), err.name())
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return ClusterError("timed out waiting for the cluster", -185, "_TIMED_OUT")
    return ClusterError(str(exc) or type(exc).__name__)


@dataclass
class PartitionMeta:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    error: str | None = None


@dataclass
class TopicMeta:
    name: str
    partitions: dict[int, PartitionMeta] = field(default_factory=dict)
    internal: bool = False
    # Kafka's error name for a topic a named Metadata request answered with an error
    # (e.g. TOPIC_AUTHORIZATION_FAILED); None when the topic was served.
    error: str | None = None


@dataclass
class ClusterMeta:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, tuple[str, int]]
    topics: dict[str, TopicMeta]


@dataclass
class Watermarks:
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int


@dataclass
class Produced:
    topic: str
    partition: int
    offset: int
    timestamp: int
