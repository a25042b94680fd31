"""Topic lifecycle: the one place that keeps topic metadata and partition logs in step.

Every path that makes or changes a topic (CreateTopics, auto-creation in Metadata/Produce,
internal topics such as `__consumer_offsets`) goes through `TopicManager`, so a topic
never exists in the metadata without its logs, and topic configs are validated by the same
`LogConfig.from_props` that the logs will run with.

Ordering is chosen for crash safety: creation writes the metadata first and then the logs
(`startup()` creates any log a crash left missing); deletion removes the metadata first and
then the logs (`startup()` deletes logs no topic owns any more).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from yak.cluster.metadata import MetadataStore, TopicInfo
from yak.config import BrokerConfig
from yak.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    KafkaError,
    KafkaStorageError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from yak.storage import LogConfig, LogManager, PartitionLog

__all__ = ["TopicManager", "MAX_PARTITIONS"]

log = logging.getLogger(__name__)

# Kafka topic configs that Yak accepts and reports but does not act on (tiered storage,
# replication throttles, preallocation, per-codec levels, removed down-conversion).
ACCEPTED_UNUSED_TOPIC_CONFIGS = frozenset(
    {
        "segment.jitter.ms",
        "preallocate",
        "message.downconversion.enable",
        "message.timestamp.difference.max.ms",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "local.retention.ms",
        "local.retention.bytes",
        "remote.storage.enable",
    }
)

# A guard against typos like 100000: every partition is a directory with open files.
MAX_PARTITIONS = 10_000


class TopicManager:
    def __init__(self, metadata: MetadataStore, logs: LogManager, config: BrokerConfig) -> None:
        self.metadata = metadata
        self.logs = logs
        self.config = config

    # ------------------------------------------------------------------ startup

    def startup(self) -> None:
        """Reconcile logs with metadata after `LogManager.startup()`.

        Applies each topic's overrides to its loaded logs, creates logs a crash left
        missing, and deletes logs of topics deleted just before a crash.
        """
        for info in self.metadata.topics.values():
            cfg = self.log_config(info)
            for p in range(info.partitions):
                plog = self.logs.get(info.name, p)
                if plog is None:
                    log.warning("creating missing log %s-%d", info.name, p)
                    self.logs.create(info.name, p, cfg)
                else:
                    # Logs load with the broker defaults; topic overrides live here.
                    plog.update_config(cfg)
        for plog in list(self.logs.logs()):
            topic, partition = _topic_partition(plog)
            info = self.metadata.get(topic)
            if info is None or partition >= info.partitions:
                log.warning("deleting orphan log %s-%d", topic, partition)
                self.logs.delete(topic, partition)

    # ------------------------------------------------------------------ queries

    def get(self, name: str) -> TopicInfo | None:
        return self.metadata.get(name)

    def topics(self) -> list[TopicInfo]:
        return list(self.metadata.topics.values())

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        info = self.metadata.get(topic)
        if info is None or not 0 <= partition < info.partitions:
            return None
        return self.logs.get(topic, partition)

    def log_config(self, info: TopicInfo) -> LogConfig:
        return self.validate_configs(info.configs)

    def validate_configs(self, configs: Mapping[str, str]) -> LogConfig:
        """The LogConfig for these topic overrides, or InvalidConfigurationError naming the key.

        Only topic config names are accepted (a broker name such as `log.retention.hours`
        is a mistake at topic level, as in Kafka). Kafka topic configs Yak does not act on
        are stored and reported, so tools that always send them keep working.
        """
        from yak.storage import TOPIC_CONFIG_DEFAULTS, LogConfig

        effective: dict[str, str] = {}
        for name, value in configs.items():
            if name in TOPIC_CONFIG_DEFAULTS:
                effective[name] = value
            elif name not in ACCEPTED_UNUSED_TOPIC_CONFIGS:
                raise InvalidConfigurationError(f"Unknown topic config name: {name}")
        return LogConfig.from_props(effective, base=self.config.log_defaults)

    # ------------------------------------------------------------------ changes

    def create(
        self,
        name: str,
        partitions: int | None = None,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
        replication_factor: int | None = None,
    ) -> TopicInfo:
        """Create a topic and its logs; `partitions`/`replication_factor` None or -1 = default.

        A replication factor above 1 cannot be met by a one-broker cluster, and Kafka
        answers that with INVALID_REPLICATION_FACTOR rather than creating a weaker topic.
        """
        n = self.config.num_partitions if partitions in (None, -1) else int(partitions)  # type: ignore[arg-type]
        rf = (
            self.config.default_replication_factor
            if replication_factor in (None, -1)
            else int(replication_factor)  # type: ignore[arg-type]
        )
        if n < 1:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        if n > MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"Number of partitions {n} is larger than the maximum of {MAX_PARTITIONS}."
            )
        if rf < 1:
            raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
        live_brokers = 1
        if rf > live_brokers:
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {rf} time(s): The target replication factor"
                f" of {rf} cannot be reached because only {live_brokers} broker(s) are registered."
            )
        self.metadata.check_new_topic(name)
        topic_configs = {k: str(v) for k, v in (configs or {}).items()}
        cfg = self.validate_configs(topic_configs)
        if validate_only:
            from uuid import UUID

            return TopicInfo(name, UUID(int=0), n, topic_configs)
        info = self.metadata.create_topic(name, n, topic_configs)
        try:
            for p in range(n):
                self.logs.create(name, p, cfg)
        except Exception as e:
            # Never leave a topic that clients see but cannot use (e.g. disk full).
            self._undo_create(name, n)
            if isinstance(e, KafkaError):
                raise
            raise KafkaStorageError(f"cannot create logs of topic {name!r}: {e}") from e
        return info

    def _undo_create(self, name: str, partitions: int) -> None:
        for p in range(partitions):
            if self.logs.get(name, p) is not None:
                try:
                    self.logs.delete(name, p)
                except Exception:
                    log.exception("cleaning up %s-%d after a failed create", name, p)
        self.metadata.delete_topic(name)

    def delete(self, name: str) -> TopicInfo:
        info = self.metadata.delete_topic(name)
        for p in range(info.partitions):
            if self.logs.get(name, p) is not None:
                self.logs.delete(name, p)
        return info

    def check_add_partitions(self, name: str, total: int) -> TopicInfo:
        info = self.metadata.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        if total < info.partitions:
            raise InvalidPartitionsError(
                f"Topic currently has {info.partitions} partitions, which is higher than the"
                f" requested {total}."
            )
        if total == info.partitions:
            raise InvalidPartitionsError(f"Topic already has {info.partitions} partitions.")
        if total > MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"Number of partitions {total} is larger than the maximum of {MAX_PARTITIONS}."
            )
        return info

    def add_partitions(self, name: str, total: int, validate_only: bool = False) -> TopicInfo:
        info = self.check_add_partitions(name, total)
        if validate_only:
            return info
        old = info.partitions
        cfg = self.log_config(info)
        info = self.metadata.add_partitions(name, total)
        for p in range(old, total):
            self.logs.create(name, p, cfg)
        return info

    def alter_configs(
        self, name: str, configs: Mapping[str, str], validate_only: bool = False
    ) -> TopicInfo:
        """Replace the topic's overrides and apply them to its live logs at once."""
        info = self.metadata.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        new_configs = {k: str(v) for k, v in configs.items()}
        cfg = self.validate_configs(new_configs)
        if validate_only:
            return info
        info = self.metadata.set_topic_configs(name, new_configs)
        for p in range(info.partitions):
            plog = self.logs.get(name, p)
            if plog is not None:
                plog.update_config(cfg)
        return info


def _topic_partition(plog: object) -> tuple[str, int]:
    topic = getattr(plog, "topic", None)
    partition = getattr(plog, "partition", None)
    if topic is not None and partition is not None:
        return str(topic), int(partition)
    tp = plog.tp  # type: ignore[attr-defined]
    return str(tp[0]), int(tp[1])
