"""Partition reassignment (KIP-455): AlterPartitionReassignments and
ListPartitionReassignments, and the controller's completion of a move.

A reassignment lives in the partition record itself (`records.PartitionRecord`:
`replicas`, `addingReplicas`, `removingReplicas`, as KRaft stores it), so it survives
controller and broker restarts with nothing else to recover: whoever reads the record
knows the move.

- Starting a move to `target` (any broker may write it, as every topic change is written,
  with a compare on the partition key's mod_revision): the replica set becomes the target
  followed by the original replicas not in it (KRaft's merged order, so the preferred
  replica is the target's first), `adding` = target - original, `removing` = original -
  target. The ISR and the leader are unchanged. Every broker's publisher (`node.py`) then
  hosts what the record assigns it: an adding replica creates its log and follows the
  leader, and the leader adds it to the ISR once it has caught up (the ordinary ISR rules,
  `yak/partition/isr_maintenance.py`), so nothing a write with acks=all was acknowledged
  for is ever only on a replica that is going away.
- Completing it (`complete`, run by the controller on every change of the record): once
  every target replica is in the ISR, replicas = target, the removing replicas leave the
  ISR, and if the leader is being removed the first usable target replica in the ISR
  leads (a new leader epoch). The removed brokers see that they are no longer replicas
  and stop their fetchers and delete their logs (`node.py: _remove`).
- A cancellation (null target) reverts to the original replicas (replicas - adding): the
  adding replicas leave the ISR and stop, refused if that would leave no ISR member
  (Kafka's rule). A second reassignment of a moving partition replaces the target,
  computed against the original replicas, as Kafka did before KRaft.

Errors as Kafka's: INVALID_REPLICA_ASSIGNMENT (empty, duplicate, negative or unregistered
broker), INVALID_REPLICATION_FACTOR (a change of size with
`allow_replication_factor_change` false), NO_REASSIGNMENT_IN_PROGRESS (cancelling a
partition that is not moving), UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from yak.cluster.etcd_store import BrokerInfo, EtcdMetadataStore
from yak.cluster.metadata import StalePartitionStateError
from yak.cluster.records import NO_LEADER, PartitionRecord
from yak.errors import (
    ErrorCode,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    KafkaError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)

__all__ = [
    "NoReassignmentInProgressError",
    "OngoingReassignment",
    "PartitionReassignments",
    "cancel",
    "complete",
    "reassigning",
    "start",
]

log = logging.getLogger(__name__)

# Attempts at one partition's compare-and-set while its leader changes the ISR beside us.
_CAS_ATTEMPTS = 10


class NoReassignmentInProgressError(KafkaError):
    """A cancellation of a partition that is not being reassigned."""

    code = ErrorCode.no_reassignment_in_progress


def reassigning(rec: PartitionRecord) -> bool:
    return bool(rec.adding_replicas or rec.removing_replicas)


def original_replicas(rec: PartitionRecord) -> tuple[int, ...]:
    """The replicas before the move (what a cancellation reverts to)."""
    return tuple(r for r in rec.replicas if r not in rec.adding_replicas)


def target_replicas(rec: PartitionRecord) -> tuple[int, ...]:
    return tuple(r for r in rec.replicas if r not in rec.removing_replicas)


def _directories(rec: PartitionRecord, replicas: Sequence[int]) -> tuple[str, ...]:
    """`directories` follows `replicas` order; a replica new to the set is unknown ("")."""
    known = dict(zip(rec.replicas, rec.directories, strict=False))
    dirs = tuple(known.get(r, "") for r in replicas)
    return dirs if any(dirs) else ()


def _rebuild(rec: PartitionRecord, replicas: Sequence[int], isr: Sequence[int],
             adding: Sequence[int], removing: Sequence[int],
             brokers: Mapping[int, BrokerInfo]) -> PartitionRecord:
    """The record with a new replica set; the leader moves (new leader epoch) only if it is
    no longer an ISR member: to the first usable ISR member in replica order, else none."""
    # Imported here: the controller imports this module for `complete`.
    from yak.cluster.quorum_controller import usable

    leader = rec.leader
    if leader not in isr:
        leader = next((r for r in replicas if r in isr and usable(dict(brokers), r)),
                      NO_LEADER)
    return replace(
        rec,
        replicas=tuple(replicas),
        isr=tuple(isr),
        leader=leader,
        leader_epoch=rec.leader_epoch + 1 if leader != rec.leader else rec.leader_epoch,
        partition_epoch=rec.partition_epoch + 1,
        adding_replicas=tuple(adding),
        removing_replicas=tuple(removing),
        directories=_directories(rec, replicas),
    )


def _validate(target: Sequence[int], brokers: Mapping[int, BrokerInfo]) -> None:
    if not target:
        raise InvalidReplicaAssignmentError("The replica list is empty.")
    if len(set(target)) != len(target):
        raise InvalidReplicaAssignmentError(
            f"The replica list {list(target)} contains a duplicate broker.")
    unknown = [r for r in target if r < 0 or r not in brokers]
    if unknown:
        raise InvalidReplicaAssignmentError(
            f"The replica list {list(target)} includes broker(s) {unknown}, but no such"
            " broker is registered.")


def start(rec: PartitionRecord, target: Sequence[int], brokers: Mapping[int, BrokerInfo],
          allow_replication_factor_change: bool = True) -> PartitionRecord | None:
    """The record that starts (or replaces) a move to `target`; None if nothing changes.
    A move that needs no catching up (a reorder, or only removals of replicas while the
    target is in the ISR) is completed at once."""
    target = tuple(int(r) for r in target)
    _validate(target, brokers)
    original = original_replicas(rec)
    if not allow_replication_factor_change and len(target) != len(original):
        raise InvalidReplicationFactorError(
            f"The replication factor is changed from {len(original)} to {len(target)}, but"
            " allowReplicationFactorChange is false.")
    if target == original and not reassigning(rec):
        return None
    if target == original:
        return cancel(rec, brokers)
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    replicas = target + removing
    isr = tuple(r for r in rec.isr if r in replicas)
    if not isr:
        raise InvalidReplicaAssignmentError(
            f"Moving to {list(target)} would leave the partition with no in-sync replica.")
    new = _rebuild(rec, replicas, isr, adding, removing, brokers)
    return complete(new, brokers) or new


def cancel(rec: PartitionRecord, brokers: Mapping[int, BrokerInfo]) -> PartitionRecord:
    """The record that reverts a move to the original replicas."""
    if not reassigning(rec):
        raise NoReassignmentInProgressError(
            f"No reassignment of partition {rec.partition_id} is in progress.")
    original = original_replicas(rec)
    isr = tuple(r for r in rec.isr if r in original)
    if not isr:
        raise InvalidReplicaAssignmentError(
            "Unable to revert the partition assignment: none of the original replicas"
            f" {list(original)} is in the ISR, so the partition would have no leader.")
    return _rebuild(rec, original, isr, (), (), brokers)


def complete(rec: PartitionRecord, brokers: Mapping[int, BrokerInfo]) -> PartitionRecord | None:
    """The finished move once every target replica is in the ISR, else None."""
    if not reassigning(rec):
        return None
    target = target_replicas(rec)
    if any(r not in rec.isr for r in target):
        return None
    isr = tuple(r for r in rec.isr if r in target)
    return _rebuild(rec, target, isr, (), (), brokers)


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """One moving partition as ListPartitionReassignments answers it."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


class PartitionReassignments:
    """The two admin APIs over the metadata image and store (any broker serves them)."""

    def __init__(self, store: EtcdMetadataStore) -> None:
        self.store = store

    async def alter(self, changes: Sequence[tuple[str, int, Sequence[int] | None]],
                    allow_replication_factor_change: bool = True,
                    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """Start, replace or cancel (target None) each partition's move."""
        out: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        for topic, p, target in changes:
            try:
                await self._alter_one(topic, p, target, allow_replication_factor_change)
                out[(topic, p)] = (ErrorCode.none, None)
            except KafkaError as e:
                out[(topic, p)] = (e.code, e.message)
        return out

    async def _alter_one(self, topic: str, p: int, target: Sequence[int] | None,
                         allow_rf_change: bool) -> None:
        for _ in range(_CAS_ATTEMPTS):
            info = self.store.get(topic)
            entry = (self.store.partition_entry(str(info.topic_id), p)
                     if info is not None else None)
            if info is None or entry is None:
                raise UnknownTopicOrPartitionError(
                    f"Topic partition {topic}-{p} does not exist.")
            brokers = self.store.brokers()
            new = (cancel(entry.record, brokers) if target is None
                   else start(entry.record, target, brokers, allow_rf_change))
            if new is None:
                return
            try:
                await self.store.compare_and_set_partition(str(info.topic_id), new,
                                                           entry.mod_revision)
            except StalePartitionStateError:
                # The leader changed the ISR (or the controller the leader) first: catch the
                # image up to that write and decide again on the new record.
                kv = await self.store.client.get(
                    self.store.keys.partition(str(info.topic_id), p))
                if kv is not None:
                    await self.store.wait_for_revision(kv.mod_revision)
                continue
            if target is None:
                log.info("%s-%d: reassignment cancelled, replicas %s", topic, p,
                         list(new.replicas))
            else:
                log.info("%s-%d: reassignment to %s: replicas %s, adding %s, removing %s",
                         topic, p, list(target), list(new.replicas),
                         list(new.adding_replicas), list(new.removing_replicas))
            return
        raise RequestTimedOutError(f"{topic}-{p} kept changing; try again")

    def list(self, wanted: Sequence[tuple[str, Sequence[int]]] | None,
             ) -> list[OngoingReassignment]:
        """Moving partitions, of the topics/partitions named or of all (`wanted` None);
        unknown topics and partitions are left out, as Kafka does."""
        out: list[OngoingReassignment] = []
        names = ([(i.name, list(range(i.partitions))) for i in self.store.topics()]
                 if wanted is None else wanted)
        for topic, partitions in names:
            info = self.store.get(topic)
            if info is None:
                continue
            for p in partitions:
                entry = self.store.partition_entry(str(info.topic_id), int(p))
                if entry is not None and reassigning(entry.record):
                    rec = entry.record
                    out.append(OngoingReassignment(topic, int(p), rec.replicas,
                                                   rec.adding_replicas,
                                                   rec.removing_replicas))
        return out
