"""TopicManager with real storage and partition layer: metadata and partitions stay in step."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from yak.cluster.metadata import LocalMetadataStore
from yak.cluster.topics import TopicManager
from yak.config import BrokerConfig
from yak.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    KafkaStorageError,
)
from yak.partition import ReplicaManager
from yak.storage import LogManager, PartitionLog


class Topics(TopicManager):
    """The manager plus what a test looks at: the logs behind its partitions."""

    def __init__(self, data_dir: Path, config: BrokerConfig, logs: LogManager) -> None:
        self.logs = logs
        super().__init__(LocalMetadataStore(data_dir, config.node_id),
                         ReplicaManager(config.node_id, logs), config)

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        p = self.replicas.get_partition(topic, partition)
        return None if p is None else p.log

    # The manager's changes are coroutines (etcd transactions in a cluster); these tests
    # drive the single broker's, which do their work before their first await.
    def create(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return asyncio.run(super().create(*args, **kwargs))

    def delete(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return asyncio.run(super().delete(*args, **kwargs))

    def add_partitions(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return asyncio.run(super().add_partitions(*args, **kwargs))

    def alter_configs(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return asyncio.run(super().alter_configs(*args, **kwargs))


def open_manager(data_dir: Path, **settings: str) -> Topics:
    config = BrokerConfig.from_settings({"log.dirs": str(data_dir), **settings})
    logs = LogManager(str(data_dir), config.log_defaults, start_cleaner=False)
    topics = Topics(data_dir, config, logs)
    logs.startup(topics.log_configs())
    topics.startup()
    return topics


def test_create_uses_defaults_and_overrides(tmp_path: Path) -> None:
    tm = open_manager(tmp_path, **{"num.partitions": "2", "log.retention.hours": "1"})
    info = tm.create("t", None, {"segment.bytes": "1048576"})
    assert info.partitions == 2
    for p in range(2):
        plog = tm.partition_log("t", p)
        assert plog is not None
        assert plog.config.segment_bytes == 1048576
        assert plog.config.retention_ms == 3600000  # broker log.retention.hours
    assert tm.partition_log("t", 2) is None
    assert tm.partition_log("nope", 0) is None
    with pytest.raises(InvalidReplicationFactorError):
        tm.create("rf", 1, replication_factor=2)
    with pytest.raises(InvalidConfigurationError):
        tm.create("bad", 1, {"segment.bytes": "x"})
    with pytest.raises(InvalidConfigurationError, match="Unknown topic config"):
        tm.create("bad", 1, {"log.segment.bytes": "1048576"})
    with pytest.raises(InvalidPartitionsError):
        tm.create("zero", 0)
    # Accepted Kafka config Yak does not act on: stored, not passed to storage.
    tm.create("pre", 1, {"preallocate": "true"})
    assert tm.get("pre").configs == {"preallocate": "true"}
    assert {t.name for t in tm.topics()} == {"t", "pre"}


def test_alter_configs_apply_live_and_survive_restart(tmp_path: Path) -> None:
    tm = open_manager(tmp_path)
    tm.create("t", 2, {"retention.ms": "1000"})
    tm.alter_configs("t", {"max.message.bytes": "512"})
    for p in range(2):
        cfg = tm.partition_log("t", p).config
        assert cfg.max_message_bytes == 512
        assert cfg.retention_ms == 7 * 24 * 3600 * 1000  # replaced, back to default
    tm.alter_configs("t", {"max.message.bytes": "1"}, validate_only=True)
    assert tm.partition_log("t", 0).config.max_message_bytes == 512
    tm.logs.shutdown()

    tm2 = open_manager(tmp_path)
    assert tm2.partition_log("t", 1).config.max_message_bytes == 512
    tm2.logs.shutdown()


def test_startup_reconciles_crash_leftovers(tmp_path: Path) -> None:
    tm = open_manager(tmp_path)
    tm.create("keep", 2)
    tm.create("gone", 1)
    tm.logs.shutdown()
    # A crash between the metadata write and the log changes: a deleted topic's log
    # remains, and a created topic's log is missing.
    meta = LocalMetadataStore(tmp_path / "__yak_metadata.json")
    meta.delete_topic("gone")
    meta.create_topic("new", 2)
    tm2 = open_manager(tmp_path)
    assert tm2.logs.get("gone", 0) is None
    assert not (tmp_path / "gone-0").exists()
    assert tm2.partition_log("new", 1) is not None
    assert tm2.partition_log("keep", 1) is not None
    tm2.logs.shutdown()


def test_add_partitions_and_delete(tmp_path: Path) -> None:
    tm = open_manager(tmp_path)
    tm.create("t", 1, {"cleanup.policy": "compact"})
    with pytest.raises(InvalidPartitionsError):
        tm.add_partitions("t", 1)
    tm.add_partitions("t", 3, validate_only=True)
    assert tm.partition_log("t", 1) is None
    tm.add_partitions("t", 3)
    assert tm.partition_log("t", 2).config.compact  # new partitions get the topic's configs
    tm.delete("t")
    assert tm.get("t") is None and tm.logs.get("t", 0) is None
    assert not list(tmp_path.glob("t-*"))
    tm.logs.shutdown()


class _FailingLogManager(LogManager):
    """Storage that fails on one partition (a full disk, say)."""

    def create(self, topic, partition, config=None):
        if partition == 2:
            raise OSError(28, "No space left on device")
        return super().create(topic, partition, config)


def test_failed_log_creation_leaves_no_half_topic(tmp_path: Path) -> None:
    config = BrokerConfig.from_settings({"log.dirs": str(tmp_path)})
    logs = _FailingLogManager(str(tmp_path), config.log_defaults, start_cleaner=False)
    logs.startup()
    tm = Topics(tmp_path, config, logs)
    with pytest.raises(KafkaStorageError, match="No space"):
        tm.create("t", 4)
    assert tm.get("t") is None
    assert logs.get("t", 0) is None and logs.get("t", 1) is None
    assert LocalMetadataStore(tmp_path / "__yak_metadata.json").get("t") is None
    logs.shutdown()
