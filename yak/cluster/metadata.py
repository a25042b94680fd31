"""What the cluster's metadata is made of, whichever store holds it: a topic (`TopicInfo`:
name, id, partition count, config overrides), Kafka's topic-name rules, the read interface
(`MetadataView`) and the error of a partition change made against an older epoch.

The one store is `yak.cluster.etcd_store.EtcdMetadataStore`, over etcd in a cluster and
over the local KV backend (`local_kv.py`) on a single broker, which is a one-node cluster
(issue 22). The single broker's old `__yak_metadata.json` is only read, once, by
`local_migration.py`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from yak.errors import (
    ErrorCode,
    InvalidTopicError,
    KafkaError,
)
from yak.partition.state import PartitionState

__all__ = [
    "MAX_TOPIC_NAME_LENGTH",
    "MetadataView",
    "StalePartitionStateError",
    "TopicInfo",
    "validate_topic_name",
]

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    """Kafka's rules (`org.apache.kafka.common.internals.Topic.validate`)."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters,"
            f" topic name: {name}"
        )
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'"
        )


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "partitions": self.partitions,
            "configs": dict(self.configs),
        }

    @classmethod
    def from_json(cls, d: dict[str, object]) -> TopicInfo:
        return cls(
            name=str(d["name"]),
            topic_id=uuid.UUID(str(d["topic_id"])),
            partitions=int(d["partitions"]),  # type: ignore[arg-type]
            configs={str(k): str(v) for k, v in dict(d.get("configs") or {}).items()},  # type: ignore[call-overload]
        )


class StalePartitionStateError(KafkaError):
    """A partition state change made against an older partition epoch (AlterPartition's
    INVALID_UPDATE_VERSION): someone else changed the partition first."""

    code = ErrorCode.invalid_update_version


class MetadataView(Protocol):
    """The reads every backend serves without I/O: handlers and the topic manager read
    topics and partition states through this, whichever backend holds them."""

    @property
    def cluster_id(self) -> str: ...

    def topics(self) -> list[TopicInfo]: ...

    def get(self, name: str) -> TopicInfo | None: ...

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...

    def check_new_topic(self, name: str) -> None:
        """Raise what `create_topic` would for this name, changing nothing."""
        ...

    def partition_states(self, name: str) -> list[PartitionState]: ...

    def next_producer_id(self) -> int:
        """Every id below this one was handed out at some point."""
        ...
