"""The topic manager of a broker in a cluster: topic changes as etcd transactions.

The single broker's `TopicManager` decides everything itself and hosts the partitions it
creates. In a cluster the broker that receives CreateTopics, DeleteTopics,
CreatePartitions or a config change validates it (the same checks, against the settings
table), places the replicas on the registered brokers (Kafka's round robin,
`placement.py`) and writes the result to etcd in one transaction guarded by compares on
the keys it touches (`EtcdMetadataStore`); etcd serializes concurrent writers, so no
request is forwarded to the controller (Kafka's KIP-590 Envelope) to get the same
guarantee. Every broker, this one included, then applies the new records from its own
watch (`node.py`'s publisher): it creates or deletes its logs, leads or follows.

Reads (`get`, `by_id`, `topics`, `partition_states`) come from the watched image.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from yak.cluster.etcd_store import EtcdMetadataStore
from yak.cluster.metadata import StalePartitionStateError, TopicInfo
from yak.cluster.placement import assign_replicas
from yak.cluster.quorum_controller import elect, usable
from yak.cluster.topics import TopicManager
from yak.errors import (
    ErrorCode,
    InvalidReplicaAssignmentError,
    KafkaError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from yak.config import BrokerConfig
    from yak.partition import ReplicaManager

__all__ = ["ClusterTopicManager"]

log = logging.getLogger(__name__)


class ClusterTopicManager(TopicManager):
    def __init__(self, store: EtcdMetadataStore, replica_manager: ReplicaManager,
                 config: BrokerConfig) -> None:
        super().__init__(store, replica_manager, config)  # type: ignore[arg-type]
        self.store = store

    # ------------------------------------------------------------------ brokers

    def usable_brokers(self) -> dict[int, str | None]:
        """node id -> rack of the brokers new replicas may go to: registered, not fenced,
        not shutting down."""
        brokers = self.store.brokers()
        return {n: b.rack for n, b in brokers.items() if usable(brokers, n)}

    def live_broker_count(self) -> int:
        return len(self.usable_brokers())

    def internal_replication_factor(self, wanted: int, setting: str) -> int:
        """The replication factor of an internal topic: `wanted`, capped at the registered
        brokers (with a warning), as Kafka does for `__consumer_offsets`."""
        n = max(1, len(self.store.brokers()))
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

    # ------------------------------------------------------------------ startup

    def startup(self) -> None:
        """Nothing to do: the publisher hosts this broker's partitions from the image."""

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
        replicas = (self.check_assignment(assignment) if assignment is not None
                    else assign_replicas(n, rf, self.usable_brokers()))
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
                fixed_start_index=start)]
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
