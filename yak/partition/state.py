"""The controller's decision for one partition, and the few Kafka facts about topics the
partition layer needs.

`PartitionState` is KRaft's PartitionRecord without the ids (the partition it belongs to
knows those): replicas, ISR, leader, leader epoch, partition epoch, leader recovery
state. Whoever decides leadership hands one to `ReplicaManager.apply_partition_state`:
the local metadata store's single-broker controller today, the etcd controller's watch
in a cluster (issue 11). The field names match `yak.cluster.records.PartitionRecord`, so
the cluster layer converts one into the other field by field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "INTERNAL_TOPICS",
    "LEADER_RECOVERED",
    "LEADER_RECOVERING",
    "NO_LEADER",
    "PartitionState",
]

NO_LEADER = -1
# KIP-704 LeaderRecoveryState: 1 after an unclean election until the leader recovered.
LEADER_RECOVERED = 0
LEADER_RECOVERING = 1

# Kafka's internal topics (`Topic.isInternal`): clients may read them, never produce to them.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Replica assignment and leadership of one partition, as the controller decided it.

    Every leader change bumps both epochs; an ISR change bumps `partition_epoch` only
    (Kafka's rule), so a stale decision can always be told from a newer one.
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_recovery_state: int = LEADER_RECOVERED

    @classmethod
    def initial(cls, replicas: tuple[int, ...] | list[int]) -> PartitionState:
        """A new partition: the first replica leads, every replica is in sync, epoch 0."""
        r = tuple(int(b) for b in replicas)
        return cls(replicas=r, isr=r, leader=r[0] if r else NO_LEADER)

    def with_leader(self, leader: int, isr: tuple[int, ...] | None = None,
                    replicas: tuple[int, ...] | None = None) -> PartitionState:
        """The state after a leader change: both epochs move on."""
        return replace(
            self,
            leader=leader,
            isr=self.isr if isr is None else tuple(isr),
            replicas=self.replicas if replicas is None else tuple(replicas),
            leader_epoch=self.leader_epoch + 1,
            partition_epoch=self.partition_epoch + 1,
        )

    def to_json(self) -> dict[str, Any]:
        """KRaft's JSON field names (camelCase, as `kafka-metadata-shell` prints them)."""
        return {
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "leader": self.leader,
            "leaderEpoch": self.leader_epoch,
            "partitionEpoch": self.partition_epoch,
            "leaderRecoveryState": self.leader_recovery_state,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PartitionState:
        return cls(
            replicas=tuple(int(b) for b in d["replicas"]),
            isr=tuple(int(b) for b in d["isr"]),
            leader=int(d.get("leader", NO_LEADER)),
            leader_epoch=int(d.get("leaderEpoch", 0)),
            partition_epoch=int(d.get("partitionEpoch", 0)),
            leader_recovery_state=int(d.get("leaderRecoveryState", LEADER_RECOVERED)),
        )
