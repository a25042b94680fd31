"""ISR changes: what a partition leader asks of whoever stores partition state.

Kafka's leader never edits the ISR itself: it sends AlterPartition to the controller with
the partition epoch it knows, and the controller accepts the change only if that epoch is
still the current one (a leader that missed a newer decision is refused). Yak keeps that
shape. The partition layer decides *when* the ISR should change (a follower fell behind
for `replica.lag.time.max.ms`, or caught up with the high watermark and the current
epoch) and hands an `IsrChange` to an `AlterPartitionManager`; the implementation is
below the broker but above this layer:

`yak.cluster.alter_partition.StoreAlterPartitionManager`, for every broker (a single one
is a one-node cluster): a compare-and-set on the partition record in the metadata store
(etcd, or the local store), which also refuses replicas that are not live.

`submit` returns the partition state as stored after the change (partition epoch bumped)
or raises:

- a `yak.errors.KafkaError` when the change was refused for good (a stale partition epoch,
  a fenced leader epoch, an ineligible replica): the leader drops it and waits for the
  newer state to reach it through the metadata;
- anything else when the outcome is unknown or the store is unreachable (etcd down): the
  ISR stays as it is (never shrunk on a guess) and the leader tries again later.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol

from yak.partition.state import PartitionState

__all__ = ["AlterPartitionManager", "IsrChange"]


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One AlterPartition request: the ISR `leader_epoch`'s leader wants, made against
    `partition_epoch`. `broker_epochs` are the broker epochs the leader saw in each new
    ISR member's fetches (KIP-903; -1 unknown), so a store that knows the live brokers can
    refuse a member that has restarted since (its old incarnation caught up, not it)."""

    topic: str
    partition: int
    topic_id: uuid.UUID
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    broker_epochs: tuple[tuple[int, int], ...] = ()

    def broker_epoch(self, broker_id: int) -> int:
        for b, e in self.broker_epochs:
            if b == broker_id:
                return e
        return -1


class AlterPartitionManager(Protocol):
    async def submit(self, change: IsrChange) -> PartitionState:
        """Store `change` if the partition is still at `change.partition_epoch`; return the
        stored state, or raise (KafkaError: refused; anything else: try again later)."""
        ...
