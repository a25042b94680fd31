"""The cluster's topic metadata: which topics exist, their ids, partition counts, configs.

One JSON document, `<data-dir>/__yak_metadata.json`, rewritten atomically (temp file,
fsync, rename, fsync of the directory) on every change, so a crash leaves either the old
or the new metadata and never a torn file. Metadata changes are rare (admin operations),
so rewriting the whole file is cheaper than any journal would be to get right.

The interface is deliberately small: a Raft-backed store replaces this one for clusters.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from yak.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

__all__ = [
    "METADATA_FILE",
    "MAX_TOPIC_NAME_LENGTH",
    "MetadataStore",
    "TopicInfo",
    "validate_topic_name",
]

METADATA_FILE = "__yak_metadata.json"
MAX_TOPIC_NAME_LENGTH = 249
# Producer ids are handed out in blocks; only the end of the current block is persisted,
# so a restart skips the unused rest of the block rather than ever reusing an id.
PRODUCER_ID_BLOCK_SIZE = 1000
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


class MetadataStore:
    """Topics and cluster identity, persisted in the data directory."""

    def __init__(self, path: str | Path) -> None:
        p = Path(path)
        # Accept the data directory itself for convenience; the file lives inside it.
        self.path = p / METADATA_FILE if p.is_dir() or p.suffix != ".json" else p
        self._lock = threading.RLock()
        self.cluster_id: str = ""
        self.topics: dict[str, TopicInfo] = {}
        self._producer_id_block_end = 0
        self._next_producer_id = 0
        self._load()

    # ------------------------------------------------------------------ persistence

    def _load(self) -> None:
        if self.path.exists():
            doc = json.loads(self.path.read_text("utf-8"))
            self.cluster_id = str(doc["cluster_id"])
            self.topics = {t["name"]: TopicInfo.from_json(t) for t in doc.get("topics", [])}
            self._producer_id_block_end = int(doc.get("producer_id_block_end", 0))
            self._next_producer_id = self._producer_id_block_end
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.cluster_id = new_cluster_id()
            self._save()

    def _save(self) -> None:
        doc = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "producer_id_block_end": self._producer_id_block_end,
            "topics": [t.to_json() for t in sorted(self.topics.values(), key=lambda t: t.name)],
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

    # ------------------------------------------------------------------ topics

    def get(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for t in self.topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    def check_new_topic(self, name: str) -> None:
        """Raise what `create_topic` would, without changing anything (validate_only)."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        key = _collision_key(name)
        for other in self.topics:
            if _collision_key(other) == key:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")

    def create_topic(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> TopicInfo:
        with self._lock:
            self.check_new_topic(name)
            if partitions < 1:
                raise InvalidPartitionsError("Number of partitions must be larger than 0.")
            info = TopicInfo(name, uuid.uuid4(), partitions, dict(configs or {}))
            self.topics[name] = info
            try:
                self._save()
            except BaseException:
                del self.topics[name]
                raise
            return info

    def delete_topic(self, name: str) -> TopicInfo:
        with self._lock:
            info = self.topics.pop(name, None)
            if info is None:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
            try:
                self._save()
            except BaseException:
                self.topics[name] = info
                raise
            return info

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        with self._lock:
            info = self._require(name)
            if total <= info.partitions:
                raise InvalidPartitionsError(
                    f"Topic currently has {info.partitions} partitions, which is higher than"
                    f" or equal to the requested {total}."
                    if total < info.partitions
                    else f"Topic already has {info.partitions} partitions."
                )
            old = info.partitions
            info.partitions = total
            try:
                self._save()
            except BaseException:
                info.partitions = old
                raise
            return info

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        """Replace the topic's overrides (callers merge for incremental changes)."""
        with self._lock:
            info = self._require(name)
            old = info.configs
            info.configs = dict(configs)
            try:
                self._save()
            except BaseException:
                info.configs = old
                raise
            return info

    def _require(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        return info

    # ------------------------------------------------------------------ producer ids

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before, even across restarts."""
        with self._lock:
            if self._next_producer_id >= self._producer_id_block_end:
                self._producer_id_block_end = self._next_producer_id + PRODUCER_ID_BLOCK_SIZE
                self._save()
            pid = self._next_producer_id
            self._next_producer_id += 1
            return pid
