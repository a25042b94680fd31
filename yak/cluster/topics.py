"""Topic lifecycle: the single broker's controller for topics and partition leadership.

Every path that makes or changes a topic (CreateTopics, auto-creation in Metadata,
internal topics such as `__consumer_offsets`) goes through `TopicManager`. It decides the
replica assignment, records the decision in the metadata store (topics, configs, one
`PartitionState` per partition) and hands each partition's state to the ReplicaManager,
which creates the log and leads it. So a topic never exists in the metadata without its
partitions, and topic configs are validated against the one settings table.

Ordering is chosen for crash safety: creation writes the metadata first and then the logs
(`startup()` creates any log a crash left missing); deletion removes the metadata first and
then the logs (`startup()` deletes logs no topic owns any more).

On one broker this broker is the controller: every partition's replicas and ISR are this
broker, and if the data directory was written under another `node.id`, start-up moves
leadership here with new epochs (what KRaft's controller does when a broker takes over).
The cluster issue replaces these decisions with the etcd controller's; the metadata view
(`get`, `by_id`, `partition_states`) stays what handlers read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING
from uuid import UUID

from yak.cluster.metadata import MetadataStore, TopicInfo
from yak.errors import (
    ErrorCode,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    KafkaError,
    KafkaStorageError,
    UnknownTopicOrPartitionError,
)
from yak.partition.state import PartitionState
from yak.settings import ACTED, DEPRECATED, TOPIC_CONFIGS, ConfigError

if TYPE_CHECKING:
    from yak.config import BrokerConfig
    from yak.partition import ReplicaManager
    from yak.storage import LogConfig

__all__ = ["MAX_PARTITIONS", "TopicManager"]

log = logging.getLogger(__name__)

# A guard against typos like 100000: every partition is a directory with open files.
MAX_PARTITIONS = 10_000


class TopicManager:
    def __init__(
        self, metadata: MetadataStore, replica_manager: ReplicaManager, config: BrokerConfig
    ) -> None:
        self.metadata = metadata
        self.replicas = replica_manager
        self.config = config
        self.node_id = config.node_id

    # ------------------------------------------------------------------ startup

    def log_configs(self) -> dict[str, LogConfig]:
        """Every topic's LogConfig, for storage to load its logs with."""
        return {info.name: self.log_config(info) for info in self.metadata.topics()}

    def startup(self) -> None:
        """Host every partition of every topic, after storage loaded the logs.

        Creates logs a crash left missing, applies each topic's configs, moves leadership
        to this broker if the data was written under another node id, and deletes logs of
        topics deleted just before a crash.
        """
        expected: set[tuple[str, int]] = set()
        for info in self.metadata.topics():
            cfg = self.log_config(info)
            states = self.metadata.partition_states(info.name)
            for p, state in enumerate(states):
                state = self._take_over(info.name, p, state)
                if not self.replicas.has_local_log(info.name, p):
                    log.warning("creating missing log %s-%d", info.name, p)
                self.replicas.apply_partition_state(info.name, p, info.topic_id, state, cfg)
                expected.add((info.name, p))
        self.replicas.delete_stray_logs(expected)

    def _take_over(self, topic: str, partition: int, state: PartitionState) -> PartitionState:
        """One broker: this node is the only replica and the leader, whatever was recorded."""
        me = (self.node_id,)
        if state.leader == self.node_id and state.replicas == me and state.isr == me:
            return state
        new = state.with_leader(self.node_id, isr=me, replicas=me)
        log.warning("%s-%d: leadership moves to node %d (was %d), leader epoch %d",
                    topic, partition, self.node_id, state.leader, new.leader_epoch)
        self.metadata.set_partition_state(topic, partition, new, state.partition_epoch)
        return new

    # ------------------------------------------------------------------ queries

    def get(self, name: str) -> TopicInfo | None:
        return self.metadata.get(name)

    def by_id(self, topic_id: UUID) -> TopicInfo | None:
        return self.metadata.by_id(topic_id)

    def topics(self) -> list[TopicInfo]:
        return self.metadata.topics()

    def partition_states(self, name: str) -> list[PartitionState]:
        return self.metadata.partition_states(name)

    def log_config(self, info: TopicInfo) -> LogConfig:
        return self.validate_configs(info.configs, warn=False)

    def validate_configs(self, configs: Mapping[str, str], warn: bool = True) -> LogConfig:
        """The LogConfig for these topic overrides, or InvalidConfigurationError naming the key.

        Only topic config names are accepted (a broker name such as `log.retention.hours`
        is a mistake at topic level, as in Kafka). Every value is checked against the
        settings table; Kafka topic configs Yak does not act on are stored and reported,
        so tools that always send them keep working, and deprecated ones (e.g.
        `message.format.version`) are also logged, as Kafka 3.x does.
        """
        from yak.storage import LogConfig

        effective: dict[str, str] = {}
        for name, value in configs.items():
            spec = TOPIC_CONFIGS.get(name)
            if spec is None:
                raise InvalidConfigurationError(f"Unknown topic config name: {name}")
            try:
                spec.parse(value)
            except ConfigError as e:
                raise InvalidConfigurationError(str(e)) from None
            if spec.effect == ACTED:
                effective[name] = value
            elif spec.effect == DEPRECATED and warn:
                log.warning("topic config %s is deprecated and has no effect (as in Kafka 3.x;"
                            " removed in Kafka 4.0)", name)
        return LogConfig.from_props(effective, base=self.config.log_defaults)

    # ------------------------------------------------------------------ changes
    #
    # Changes are coroutines: in a cluster they are etcd transactions
    # (`yak.cluster.cluster_topics.ClusterTopicManager`); here they write the local store.

    def _assignment(self, count: int) -> list[tuple[int, ...]]:
        return [(self.node_id,)] * count

    def check_assignment(self, assignment: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        """Explicit replica lists (CreateTopics/CreatePartitions): on one broker, each must
        be this broker alone."""
        out = []
        for p, replicas in enumerate(assignment):
            if list(replicas) != [self.node_id]:
                raise InvalidReplicaAssignmentError(
                    f"Replica assignment {list(replicas)} for partition {p} names brokers"
                    f" other than the only broker {self.node_id}"
                )
            out.append((self.node_id,))
        return out

    def live_broker_count(self) -> int:
        """Brokers new replicas can be placed on (INVALID_REPLICATION_FACTOR above it)."""
        return 1

    def _prepare_create(
        self,
        name: str,
        partitions: int | None,
        configs: Mapping[str, str] | None,
        replication_factor: int | None,
        assignment: Sequence[Sequence[int]] | None,
    ) -> tuple[int, int, dict[str, str], LogConfig]:
        """Validate a create: (partitions, replication factor, configs, their LogConfig)."""
        if assignment is not None:
            n = len(assignment)
            rf = len(assignment[0]) if assignment else 0
            if not assignment or any(len(r) == 0 for r in assignment):
                raise InvalidReplicaAssignmentError("Replica assignments must not be empty.")
        else:
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
        live_brokers = self.live_broker_count()
        if assignment is None and rf > live_brokers:
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {rf} time(s): The target replication factor"
                f" of {rf} cannot be reached because only {live_brokers} broker(s) are registered."
            )
        self.metadata.check_new_topic(name)
        topic_configs = {k: str(v) for k, v in (configs or {}).items()}
        cfg = self.validate_configs(topic_configs)
        return n, rf, topic_configs, cfg

    async def create(
        self,
        name: str,
        partitions: int | None = None,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
        replication_factor: int | None = None,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Create a topic and its logs; `partitions`/`replication_factor` None or -1 = default.

        A replication factor above 1 cannot be met by a one-broker cluster, and Kafka
        answers that with INVALID_REPLICATION_FACTOR rather than creating a weaker topic.
        """
        n, _rf, topic_configs, cfg = self._prepare_create(
            name, partitions, configs, replication_factor, assignment)
        replicas = (self.check_assignment(assignment) if assignment is not None
                    else self._assignment(n))
        if validate_only:
            return TopicInfo(name, UUID(int=0), n, topic_configs)
        info = self.metadata.create_topic(name, n, topic_configs, replicas)
        try:
            self._host(info, 0, cfg)
        except Exception as e:
            # Never leave a topic that clients see but cannot use (e.g. disk full).
            self._undo_create(name, n)
            if isinstance(e, KafkaError):
                raise
            raise KafkaStorageError(f"cannot create logs of topic {name!r}: {e}") from e
        return info

    def _host(self, info: TopicInfo, first: int, cfg: LogConfig) -> None:
        """Hand the partitions from `first` on to the ReplicaManager (creates their logs)."""
        states = self.metadata.partition_states(info.name)
        for p in range(first, info.partitions):
            self.replicas.apply_partition_state(info.name, p, info.topic_id, states[p], cfg)

    def _undo_create(self, name: str, partitions: int) -> None:
        for p in range(partitions):
            try:
                self.replicas.stop_partition(name, p, delete=True)
            except Exception:
                log.exception("cleaning up %s-%d after a failed create", name, p)
        self.metadata.delete_topic(name)

    async def delete(self, name: str) -> TopicInfo:
        info = self.metadata.delete_topic(name)
        for p in range(info.partitions):
            self.replicas.stop_partition(name, p, delete=True)
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

    def _check_new_assignment(self, info: TopicInfo, total: int,
                              assignment: Sequence[Sequence[int]] | None) -> None:
        if assignment is not None and len(assignment) != total - info.partitions:
            raise InvalidReplicaAssignmentError(
                f"Increasing the number of partitions by {total - info.partitions} but"
                f" {len(assignment)} assignments provided."
            )

    async def add_partitions(self, name: str, total: int, validate_only: bool = False,
                             assignment: Sequence[Sequence[int]] | None = None) -> TopicInfo:
        info = self.check_add_partitions(name, total)
        self._check_new_assignment(info, total, assignment)
        replicas = (self.check_assignment(assignment) if assignment is not None
                    else self._assignment(total - info.partitions))
        if validate_only:
            return info
        old = info.partitions
        cfg = self.log_config(info)
        info = self.metadata.add_partitions(name, total, replicas)
        self._host(info, old, cfg)
        return info

    async def alter_configs(
        self, name: str, configs: Mapping[str, str], validate_only: bool = False
    ) -> TopicInfo:
        """Replace the topic's overrides and apply them to its live partitions at once."""
        info = self.metadata.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        new_configs = {k: str(v) for k, v in configs.items()}
        cfg = self.validate_configs(new_configs)
        if validate_only:
            return info
        info = self.metadata.set_topic_configs(name, new_configs)
        self.replicas.update_config(name, cfg)
        return info

    def internal_replication_factor(self, wanted: int, setting: str) -> int:
        """An internal topic's replicas: one broker holds one (Kafka would warn that
        `setting` asks for more; a single broker is that by design)."""
        return 1

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """ElectLeaders on one broker: it leads every partition already."""
        out: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        for topic, p in partitions or ():
            info = self.metadata.get(topic)
            if info is None or not 0 <= p < info.partitions:
                out[(topic, p)] = (ErrorCode.unknown_topic_or_partition, None)
            else:
                out[(topic, p)] = (ErrorCode.election_not_needed, None)
        return out
