"""The topic manager: every topic change is a metadata store transaction.

Every path that makes or changes a topic (CreateTopics, auto-creation in Metadata,
internal topics such as `__consumer_offsets`, CreatePartitions, config changes,
ElectLeaders) goes through `ClusterTopicManager`, on every broker: a single broker is a
one-node cluster whose store is the local KV backend (`local_kv.py`), so there is one
topic manager and one metadata path (issue 22).

The broker that receives the request validates it (partition counts, replication factor,
topic configs against the one settings table), places the replicas on the registered
brokers (Kafka's round robin, `placement.py`; the least-loaded brokers first when their
load reports differ, `broker_load.py`; never a broker cordoned by `cordoned.log.dirs`,
which `yak cluster decommission` sets) and writes the result in one transaction
guarded by compares on the keys it touches (`EtcdMetadataStore`); the store serializes
concurrent writers, so no request is forwarded to the controller (Kafka's KIP-590
Envelope) to get the same guarantee. Every broker, this one included, then applies the
new records from its own watch (`node.py`'s publisher): it creates or deletes its logs,
leads or follows, and at start-up hosts what the image assigns it and deletes logs no
topic owns any more. So the metadata is always written first and the logs follow it.

Reads (`get`, `by_id`, `topics`, `partition_states`) come from the watched image.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from yak.cluster.broker_load import BrokerLoad, preference, read_loads
from yak.cluster.dynamic_config import document_name
from yak.cluster.etcd_store import EtcdMetadataStore
from yak.cluster.metadata import StalePartitionStateError, TopicInfo
from yak.cluster.placement import assign_replicas
from yak.cluster.quorum_controller import elect, usable
from yak.errors import (
    ErrorCode,
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from yak.settings import ACTED, DEPRECATED, TOPIC_CONFIGS, ConfigError

if TYPE_CHECKING:
    from yak.config import BrokerConfig
    from yak.partition import PartitionState, ReplicaManager
    from yak.storage import LogConfig

__all__ = ["MAX_PARTITIONS", "ClusterTopicManager"]

log = logging.getLogger(__name__)

# KIP-1066's broker config: log dirs that take no new replicas.
CORDONED = "cordoned.log.dirs"

# A guard against typos like 100000: every partition is a directory with open files.
MAX_PARTITIONS = 10_000


class ClusterTopicManager:
    def __init__(self, store: EtcdMetadataStore, replica_manager: ReplicaManager,
                 config: BrokerConfig) -> None:
        self.store = store
        self.replicas = replica_manager
        self.config = config
        self.node_id = config.node_id
        self._last_id: uuid.UUID | None = None  # `topic_name`'s last id, and its text
        self._last_text = ""

    # ------------------------------------------------------------------ queries

    def get(self, name: str) -> TopicInfo | None:
        return self.store.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.store.by_id(topic_id)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name only: a Fetch v13+ per topic per request, without `by_id`'s TopicInfo.

        The store maps the id's text; a UUID's text never changes, and the request decoder
        hands the same UUID object for the same 16 bytes (`fetch_codec`'s cache), so the
        text of the last id asked about is kept: `UUID.__str__` is Python code, once per
        follower fetch otherwise. The name itself is looked up every time (a deleted or
        re-created topic answers as the image says)."""
        if topic_id is self._last_id:
            text = self._last_text
        else:
            text = str(topic_id)
            self._last_id, self._last_text = topic_id, text
        return self.store.topic_name(text)

    def topics(self) -> list[TopicInfo]:
        return self.store.topics()

    def partition_states(self, name: str) -> list[PartitionState]:
        return self.store.partition_states(name)

    # ------------------------------------------------------------------ configs

    def log_configs(self) -> dict[str, LogConfig]:
        """Every topic's LogConfig, for storage to load its logs with."""
        return {info.name: self.log_config(info) for info in self.store.topics()}

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

    # ------------------------------------------------------------------ brokers

    def usable_brokers(self) -> dict[int, str | None]:
        """node id -> rack of the brokers new replicas may go to: registered, not fenced,
        not shutting down, not cordoned."""
        brokers = self.store.brokers()
        cordoned = self.cordoned_brokers()
        return {n: b.rack for n, b in brokers.items()
                if usable(brokers, n) and n not in cordoned}

    def cordoned_brokers(self) -> set[int]:
        """Brokers whose own dynamic configs set `cordoned.log.dirs` (Kafka's KIP-1066; `yak
        cluster decommission` sets it to `*`): no new replica goes to them. A Yak broker
        has one log dir, so any value cordons the whole broker. Read from the image."""
        out = set()
        for n in self.store.brokers():
            value, _rev = self.store.document(document_name(str(n)))
            if value is None:
                continue
            try:
                configs = json.loads(value).get("configs", {})
            except (ValueError, AttributeError):
                continue
            if isinstance(configs, dict) and str(configs.get(CORDONED, "")).strip():
                out.add(n)
        return out

    def broker_loads(self) -> dict[int, BrokerLoad]:
        """The brokers' latest load reports, from the image (no I/O)."""
        return read_loads(self.store.under(self.store.keys.broker_loads))

    def load_preference(self, brokers: Sequence[int]) -> list[int] | None:
        """`brokers` least loaded first, or None when the reports do not tell them apart
        (placement then keeps its usual order)."""
        order = preference(brokers, self.broker_loads())
        return None if order == sorted(brokers) else order

    def live_broker_count(self) -> int:
        return len(self.usable_brokers())

    def internal_replication_factor(self, wanted: int, setting: str) -> int:
        """The replication factor of an internal topic: `wanted`, capped at the registered
        brokers (with a warning), as Kafka does for `__consumer_offsets`; cordoned brokers
        do not count, since no new replica may go to them (a decommission in progress
        must not make the first consumer group's topic impossible to create)."""
        n = max(1, len(set(self.store.brokers()) - self.cordoned_brokers()))
        if wanted > n:
            log.warning("%s=%d but only %d broker(s) are registered: using %d", setting,
                        wanted, n, n)
            return n
        return wanted

    def check_assignment(self, assignment: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        """Explicit replica lists: registered brokers, no broker twice in a list, one
        replication factor for all (Kafka's checks and messages)."""
        registered = self.store.brokers()
        out = []
        rf = len(assignment[0]) if assignment else 0
        for p, replicas in enumerate(assignment):
            r = tuple(int(b) for b in replicas)
            if not r:
                raise InvalidReplicaAssignmentError(f"Empty replica list for partition {p}.")
            if len(set(r)) != len(r):
                raise InvalidReplicaAssignmentError(
                    f"Duplicate brokers not allowed in replica assignment: {list(r)}"
                    f" for partition {p}.")
            if len(r) != rf:
                raise InvalidReplicaAssignmentError(
                    "All partitions should have the same number of replicas.")
            unknown = sorted(b for b in r if b not in registered)
            if unknown:
                raise InvalidReplicaAssignmentError(
                    f"Replica assignment for partition {p} names unregistered broker(s)"
                    f" {unknown}.")
            out.append(r)
        return out

    # ------------------------------------------------------------------ checks

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
        self.store.check_new_topic(name)
        topic_configs = {k: str(v) for k, v in (configs or {}).items()}
        cfg = self.validate_configs(topic_configs)
        return n, rf, topic_configs, cfg

    def check_add_partitions(self, name: str, total: int) -> TopicInfo:
        info = self.store.get(name)
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

    # ------------------------------------------------------------------ changes

    async def create(
        self,
        name: str,
        partitions: int | None = None,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
        replication_factor: int | None = None,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo:
        n, rf, topic_configs, _cfg = self._prepare_create(
            name, partitions, configs, replication_factor, assignment)
        if assignment is not None:
            replicas = self.check_assignment(assignment)
        else:
            brokers = self.usable_brokers()
            replicas = assign_replicas(n, rf, brokers,
                                       preferred=self.load_preference(list(brokers)))
        if validate_only:
            return TopicInfo(name, uuid.UUID(int=0), n, topic_configs)
        info = await self.store.create_topic(name, topic_configs, replicas)
        log.info("created topic %s: %d partition(s), replicas %s", name, n,
                 [list(r) for r in replicas[:8]] + (["..."] if n > 8 else []))
        return info

    async def delete(self, name: str) -> TopicInfo:
        info = await self.store.delete_topic(name)
        log.info("deleted topic %s", name)
        return info

    async def add_partitions(self, name: str, total: int, validate_only: bool = False,
                             assignment: Sequence[Sequence[int]] | None = None) -> TopicInfo:
        info = self.check_add_partitions(name, total)
        self._check_new_assignment(info, total, assignment)
        existing = self.store.partition_states(name)
        rf = len(existing[0].replicas) if existing else 1
        if assignment is not None:
            replicas = self.check_assignment(assignment)
            if replicas and len(replicas[0]) != rf:
                raise InvalidReplicaAssignmentError(
                    f"Inconsistent replication factor between partitions, partition 0 has"
                    f" {rf} while partitions [{info.partitions}] have replication factors"
                    f" [{len(replicas[0])}], respectively.")
        else:
            brokers = self.usable_brokers()
            ordered = sorted(brokers)
            first = existing[0].replicas[0] if existing and existing[0].replicas else -1
            start = next((i for i, b in enumerate(ordered) if b >= first), 0)
            replicas = [tuple(r) for r in assign_replicas(
                total - info.partitions, rf, brokers, start_partition=info.partitions,
                fixed_start_index=start, preferred=self.load_preference(ordered))]
        if validate_only:
            return info
        return await self.store.add_partitions(name, replicas)

    async def alter_configs(
        self, name: str, configs: Mapping[str, str], validate_only: bool = False
    ) -> TopicInfo:
        """Replace the topic's overrides in etcd; every broker applies them to its logs
        when its watch delivers the change."""
        info = self.store.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        new_configs = {k: str(v) for k, v in configs.items()}
        self.validate_configs(new_configs)
        if validate_only:
            return info
        return await self.store.set_topic_configs(name, new_configs)

    # ------------------------------------------------------------------ elections

    async def elect_leaders(
        self, election_type: int, partitions: Sequence[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """ElectLeaders (API 43): each partition's outcome. `partitions` None: every
        partition (only those an election changes are answered, as Kafka does)."""
        brokers = self.store.brokers()
        wanted: list[tuple[str, int]]
        if partitions is None:
            wanted = [(info.name, p) for info in self.store.topics()
                      for p in range(info.partitions)]
        else:
            wanted = list(partitions)
        out: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        for topic, p in wanted:
            info = self.store.get(topic)
            entry = (self.store.partition_entry(str(info.topic_id), p)
                     if info is not None else None)
            if entry is None:
                out[(topic, p)] = (ErrorCode.unknown_topic_or_partition, None)
                continue
            outcome = elect(entry.record, entry.mod_revision, brokers, election_type)
            if outcome.record is None:
                if partitions is not None or outcome.error not in (
                        ErrorCode.election_not_needed,):
                    out[(topic, p)] = (outcome.error, outcome.message)
                continue
            try:
                await self.store.compare_and_set_partition(str(info.topic_id), outcome.record,
                                                           entry.mod_revision)
                log.info("%s-%d: elected leader %d (epoch %d) on request", topic, p,
                         outcome.record.leader, outcome.record.leader_epoch)
                out[(topic, p)] = (ErrorCode.none, None)
            except StalePartitionStateError as e:
                out[(topic, p)] = (ErrorCode.invalid_update_version, e.message)
            except KafkaError as e:
                out[(topic, p)] = (e.code, e.message)
        return out
