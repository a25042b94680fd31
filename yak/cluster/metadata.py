"""The cluster's metadata: topics (ids, partitions, configs), each partition's replica state,
producer id blocks and the cluster id, behind one interface with a local-file backend.

`MetadataStore` is the interface the rest of the broker sees (the topic manager, the
producer id manager). Its records are shaped like KRaft's: a topic (TopicRecord + its
ConfigRecords), one `PartitionState` per partition (PartitionRecord: replicas, ISR, leader,
leader epoch, partition epoch) and the next producer id (ProducerIdsRecord), so the cluster
issue can put an etcd backend behind the same interface.

`LocalMetadataStore` is the single broker's store: one JSON document,
`<data-dir>/__yak_metadata.json`, rewritten atomically (temp file, fsync, rename, fsync of
the directory) on every change, so a crash leaves either the old or the new metadata and
never a torn file. Metadata changes are rare (admin operations), so rewriting the whole
file is cheaper than any journal would be to get right. Files written before partition
states existed (version 1) are read and migrated: every partition is led by this broker
at epoch 0, which is what that broker was doing.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from yak.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from yak.partition.state import PartitionState

__all__ = [
    "METADATA_FILE",
    "MAX_TOPIC_NAME_LENGTH",
    "LocalMetadataStore",
    "MetadataStore",
    "MetadataView",
    "StalePartitionStateError",
    "TopicInfo",
    "validate_topic_name",
]

METADATA_FILE = "__yak_metadata.json"
FORMAT_VERSION = 2
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


def _collision_key(name: str) -> str:
    # Kafka's metric names turn '.' into '_', so topics differing only there collide.
    return name.replace(".", "_")


def new_cluster_id() -> str:
    """A Kafka-style cluster id: a random UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


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


class MetadataStore(MetadataView, Protocol):
    """The single broker's store: the reads plus synchronous, durable writes.

    Every change is durable when the call returns. Replica assignments are lists of
    broker ids, the first being the preferred leader. The cluster's backend
    (`yak.cluster.etcd_store.EtcdMetadataStore`) serves the same reads from a watched
    image of etcd, and its writes are coroutines (etcd transactions), called by the
    cluster's topic manager and controller.
    """

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str] | None = None,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo: ...

    def delete_topic(self, name: str) -> TopicInfo: ...

    def add_partitions(
        self, name: str, total: int, assignment: Sequence[Sequence[int]] | None = None
    ) -> TopicInfo: ...

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        """Replace the topic's overrides (callers merge for incremental changes)."""
        ...

    def set_partition_state(
        self, name: str, partition: int, state: PartitionState, expected_partition_epoch: int
    ) -> None:
        """Compare-and-set: StalePartitionStateError unless the stored partition epoch is
        `expected_partition_epoch`."""
        ...

    def allocate_producer_ids(self, block_size: int) -> int:
        """Reserve [first, first + block_size) for this broker; returns `first`. Ids are
        never handed out twice, even across restarts."""
        ...


class LocalMetadataStore:
    """The single broker's metadata in its data directory (see the module docstring).

    `node_id` is the broker that leads every partition this store creates without an
    explicit assignment, and the one old files are migrated to.
    """

    def __init__(self, path: str | Path, node_id: int = 1) -> None:
        p = Path(path)
        # Accept the data directory itself for convenience; the file lives inside it.
        self.path = p / METADATA_FILE if p.is_dir() or p.suffix != ".json" else p
        self.node_id = node_id
        self._lock = threading.RLock()
        self._cluster_id: str = ""
        self._topics: dict[str, TopicInfo] = {}
        self._states: dict[str, list[PartitionState]] = {}
        self._next_producer_id = 0
        self._load()

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    # ------------------------------------------------------------------ persistence

    def _load(self) -> None:
        if not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._cluster_id = new_cluster_id()
            self._save()
            return
        doc = json.loads(self.path.read_text("utf-8"))
        self._cluster_id = str(doc["cluster_id"])
        migrated = False
        for t in doc.get("topics", []):
            info = TopicInfo.from_json(t)
            self._topics[info.name] = info
            raw = t.get("partitionStates")
            if raw is None:  # a version 1 file: this broker led everything at epoch 0
                migrated = True
                states = [PartitionState.initial((self.node_id,)) for _ in range(info.partitions)]
            else:
                states = [PartitionState.from_json(s) for s in raw]
            self._states[info.name] = states
        # Version 1 kept the end of the last reserved block under another name.
        self._next_producer_id = int(doc.get("nextProducerId",
                                             doc.get("producer_id_block_end", 0)))
        if migrated or int(doc.get("version", 1)) < FORMAT_VERSION:
            self._save()

    def _save(self) -> None:
        topics = []
        for t in sorted(self._topics.values(), key=lambda t: t.name):
            d = t.to_json()
            d["partitionStates"] = [s.to_json() for s in self._states.get(t.name, [])]
            topics.append(d)
        doc = {
            "version": FORMAT_VERSION,
            "cluster_id": self._cluster_id,
            "nextProducerId": self._next_producer_id,
            "topics": topics,
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        data = json.dumps(doc, indent=1, sort_keys=True).encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _changing(self) -> _Undo:
        """Snapshot for rollback: a failed save must leave memory as it was on disk."""
        return _Undo(self)

    # ------------------------------------------------------------------ topics

    def topics(self) -> list[TopicInfo]:
        return list(self._topics.values())

    def get(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for t in self._topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    def check_new_topic(self, name: str) -> None:
        validate_topic_name(name)
        if name in self._topics:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        key = _collision_key(name)
        for other in self._topics:
            if _collision_key(other) == key:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")

    def _assignment(self, count: int, assignment: Sequence[Sequence[int]] | None
                    ) -> list[PartitionState]:
        if assignment is None:
            assignment = [(self.node_id,)] * count
        if len(assignment) != count:
            raise InvalidPartitionsError(
                f"{len(assignment)} replica assignments for {count} partitions"
            )
        return [PartitionState.initial(tuple(r)) for r in assignment]

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str] | None = None,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo:
        with self._lock:
            self.check_new_topic(name)
            if partitions < 1:
                raise InvalidPartitionsError("Number of partitions must be larger than 0.")
            states = self._assignment(partitions, assignment)
            info = TopicInfo(name, uuid.uuid4(), partitions, dict(configs or {}))
            with self._changing():
                self._topics[name] = info
                self._states[name] = states
                self._save()
            return info

    def delete_topic(self, name: str) -> TopicInfo:
        with self._lock:
            info = self._require(name)
            with self._changing():
                del self._topics[name]
                self._states.pop(name, None)
                self._save()
            return info

    def add_partitions(
        self, name: str, total: int, assignment: Sequence[Sequence[int]] | None = None
    ) -> TopicInfo:
        with self._lock:
            info = self._require(name)
            if total <= info.partitions:
                raise InvalidPartitionsError(
                    f"Topic currently has {info.partitions} partitions, which is higher than"
                    f" or equal to the requested {total}."
                    if total < info.partitions
                    else f"Topic already has {info.partitions} partitions."
                )
            new = self._assignment(total - info.partitions, assignment)
            with self._changing():
                self._topics[name] = TopicInfo(name, info.topic_id, total, dict(info.configs))
                self._states[name] = self._states.get(name, []) + new
                self._save()
            return self._topics[name]

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        with self._lock:
            info = self._require(name)
            with self._changing():
                self._topics[name] = TopicInfo(name, info.topic_id, info.partitions,
                                               dict(configs))
                self._save()
            return self._topics[name]

    def _require(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        return info

    # ------------------------------------------------------------------ partition states

    def partition_states(self, name: str) -> list[PartitionState]:
        self._require(name)
        return list(self._states.get(name, []))

    def set_partition_state(
        self, name: str, partition: int, state: PartitionState, expected_partition_epoch: int
    ) -> None:
        with self._lock:
            self._require(name)
            states = self._states[name]
            if not 0 <= partition < len(states):
                raise UnknownTopicOrPartitionError(f"{name}-{partition} does not exist")
            if states[partition].partition_epoch != expected_partition_epoch:
                raise StalePartitionStateError(
                    f"{name}-{partition} is at partition epoch"
                    f" {states[partition].partition_epoch}, not {expected_partition_epoch}"
                )
            with self._changing():
                self._states[name] = states[:partition] + [state] + states[partition + 1:]
                self._save()

    # ------------------------------------------------------------------ producer ids

    def allocate_producer_ids(self, block_size: int) -> int:
        with self._lock:
            first = self._next_producer_id
            with self._changing():
                self._next_producer_id = first + block_size
                self._save()
            return first

    def next_producer_id(self) -> int:
        return self._next_producer_id


class _Undo:
    """Restores a store's in-memory state if the block raises (e.g. the disk is full)."""

    def __init__(self, store: LocalMetadataStore) -> None:
        self._store = store
        self._saved: tuple[Any, ...] = ()

    def __enter__(self) -> None:
        s = self._store
        self._saved = (dict(s._topics), {k: list(v) for k, v in s._states.items()},
                       s._next_producer_id)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            s = self._store
            s._topics, s._states, s._next_producer_id = self._saved
