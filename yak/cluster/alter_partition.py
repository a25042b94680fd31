"""ISR changes requested by a partition's leader, as compare-and-set writes in the metadata
store (`yak.partition.isr.AlterPartitionManager`, for every broker: on etcd in a cluster,
on the local KV store in a one-node cluster; one path since issue 22, when the single
broker's `LocalAlterPartitionManager` went).

Kafka's leaders send AlterPartition to the controller, which checks the leader epoch and
the partition epoch and refuses ISR members that are not eligible. Here the leader writes
the partition record itself, in one etcd transaction that holds only if

- the partition key is unchanged since the record the leader's image holds (its
  mod_revision: AlterPartition's partition-epoch check, done by etcd), and
- the leader's own registration is the one it holds (its create_revision is this
  broker's epoch): a leader whose session expired, or that paused past it, can no longer
  change the ISR, so a deposed leader cannot shrink the ISR to itself and acknowledge
  alone.

Before writing, the request is checked as Kafka's controller checks it: the requester
leads the partition at `leader_epoch` (else FENCED_LEADER_EPOCH), the record is at
`partition_epoch` (else INVALID_UPDATE_VERSION), the new ISR is non-empty, contains the
leader and only replicas, and every member it adds is registered, not fenced, not shutting
down, and (KIP-903) at the broker epoch the leader saw it fetch with (else
INELIGIBLE_REPLICA). A replica added back gets its current directory id recorded
(`directories`), so a later wipe of its data dir is noticed by the controller.

When etcd cannot be reached the change is refused (`EtcdUnavailable`): the leader keeps
serving with the ISR it has, never a smaller one. That is logged once per change of
state, not once per attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from yak.cluster.etcd import Compare, EtcdError
from yak.cluster.etcd_store import EtcdMetadataStore
from yak.cluster.metadata import StalePartitionStateError
from yak.cluster.quorum_controller import usable
from yak.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    KafkaError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from yak.partition.isr import IsrChange
from yak.partition.state import PartitionState

__all__ = ["StoreAlterPartitionManager", "IneligibleReplicaError"]

log = logging.getLogger(__name__)


class IneligibleReplicaError(KafkaError):
    """A replica the new ISR adds may not join it (Kafka's INELIGIBLE_REPLICA)."""

    code = ErrorCode.ineligible_replica


class StoreAlterPartitionManager:
    """`submit` an ISR change for a partition this broker leads (see module docstring).

    `broker_epoch()` is this broker's registration epoch (-1 when not registered).
    """

    def __init__(self, store: EtcdMetadataStore, node_id: int,
                 broker_epoch: Callable[[], int]) -> None:
        self.store = store
        self.node_id = node_id
        self._broker_epoch = broker_epoch
        self._etcd_down = False

    async def submit(self, change: IsrChange) -> PartitionState:
        """Write the new ISR; returns the partition state written. Raises a KafkaError
        (stale or invalid request) or EtcdError (etcd unreachable: nothing changed)."""
        topic, partition = change.topic, change.partition
        leader_epoch, partition_epoch = change.leader_epoch, change.partition_epoch
        new_isr = change.new_isr
        broker_epochs = dict(change.broker_epochs)
        info = self.store.get(topic)
        entry = (self.store.partition_entry(str(info.topic_id), partition)
                 if info is not None else None)
        if info is None or entry is None or info.topic_id != change.topic_id:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        rec = entry.record
        if rec.leader != self.node_id:
            raise NotLeaderOrFollowerError(
                f"{topic}-{partition} is led by {rec.leader}, not {self.node_id}")
        if leader_epoch != rec.leader_epoch:
            raise FencedLeaderEpochError(
                f"{topic}-{partition}: leader epoch {leader_epoch}, current {rec.leader_epoch}")
        if partition_epoch != rec.partition_epoch:
            raise StalePartitionStateError(
                f"{topic}-{partition}: partition epoch {partition_epoch}, current"
                f" {rec.partition_epoch}")
        isr = tuple(int(r) for r in new_isr)
        if not isr or self.node_id not in isr:
            raise KafkaError(f"{topic}-{partition}: the ISR {list(isr)} must contain the"
                             f" leader {self.node_id}")
        if any(r not in rec.replicas for r in isr) or len(set(isr)) != len(isr):
            raise IneligibleReplicaError(
                f"{topic}-{partition}: ISR {list(isr)} names brokers that are not replicas"
                f" {list(rec.replicas)}")
        brokers = self.store.brokers()
        added = [r for r in isr if r not in rec.isr]
        dirs = list(rec.directories) + [""] * (len(rec.replicas) - len(rec.directories))
        for r in added:
            b = brokers.get(r)
            if b is None or not usable(brokers, r):
                raise IneligibleReplicaError(
                    f"{topic}-{partition}: broker {r} is not registered, fenced or shutting"
                    " down: it cannot join the ISR")
            if broker_epochs.get(r, -1) not in (-1, b.epoch):
                raise IneligibleReplicaError(
                    f"{topic}-{partition}: broker {r} fetched at broker epoch"
                    f" {broker_epochs[r]}, but is registered at epoch {b.epoch}")
            dirs[rec.replicas.index(r)] = b.directory
        new = replace(rec, isr=isr, partition_epoch=rec.partition_epoch + 1,
                      directories=tuple(dirs) if any(dirs) else rec.directories)
        epoch = self._epoch()
        if epoch <= 0:
            raise NotLeaderOrFollowerError(f"broker {self.node_id} is not registered")
        fence = Compare.create_revision(self.store.keys.broker(self.node_id), "==", epoch)
        try:
            await self.store.compare_and_set_partition(str(info.topic_id), new,
                                                       entry.mod_revision, extra=[fence])
        except EtcdError as e:
            if not self._etcd_down:
                self._etcd_down = True
                log.warning("etcd unreachable (%s): %s-%d keeps its ISR %s; ISR changes are"
                            " refused until etcd answers", e, topic, partition, list(rec.isr))
            raise
        if self._etcd_down:
            self._etcd_down = False
            log.info("etcd reachable again: ISR changes resume")
        log.info("%s-%d: ISR %s -> %s (partition epoch %d)", topic, partition, list(rec.isr),
                 list(isr), new.partition_epoch)
        return PartitionState(replicas=new.replicas, isr=new.isr, leader=new.leader,
                              leader_epoch=new.leader_epoch,
                              partition_epoch=new.partition_epoch,
                              leader_recovery_state=new.leader_recovery_state)

    def _epoch(self) -> int:
        return self._broker_epoch()
