"""ISR changes on one broker: `LocalAlterPartitionManager`, the single broker's
`yak.partition.isr.AlterPartitionManager`, a compare-and-set on the local metadata store.

On one broker the leader is the whole ISR, so this is only reached if a state with more
replicas was stored (a data directory carried over, tests with in-process brokers); it
applies Kafka's AlterPartition checks all the same: the requester leads the partition at
the leader epoch it names (FENCED_LEADER_EPOCH otherwise), the stored partition epoch is
the one it names (INVALID_UPDATE_VERSION otherwise), and the new ISR holds the leader and
replicas only. A cluster uses `yak.cluster.etcd_alter_partition.EtcdAlterPartitionManager`.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from yak.cluster.metadata import MetadataStore, StalePartitionStateError
from yak.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    KafkaError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from yak.partition.isr import IsrChange
from yak.partition.state import PartitionState

__all__ = ["LocalAlterPartitionManager"]


class _IneligibleReplicaError(KafkaError):
    code = ErrorCode.ineligible_replica


class LocalAlterPartitionManager:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def submit(self, change: IsrChange) -> PartitionState:
        info = self.store.get(change.topic)
        if info is None or info.topic_id != change.topic_id:
            raise UnknownTopicOrPartitionError(
                f"{change.topic}-{change.partition} does not exist")
        states = self.store.partition_states(change.topic)
        if not 0 <= change.partition < len(states):
            raise UnknownTopicOrPartitionError(
                f"{change.topic}-{change.partition} does not exist")
        current = states[change.partition]
        if current.leader != change.leader_id:
            raise NotLeaderOrFollowerError(
                f"{change.topic}-{change.partition} is led by {current.leader}")
        if current.leader_epoch != change.leader_epoch:
            raise FencedLeaderEpochError(
                f"{change.topic}-{change.partition}: leader epoch {change.leader_epoch},"
                f" current {current.leader_epoch}")
        if current.partition_epoch != change.partition_epoch:
            raise StalePartitionStateError(
                f"{change.topic}-{change.partition}: partition epoch"
                f" {change.partition_epoch}, current {current.partition_epoch}")
        isr = tuple(change.new_isr)
        if (change.leader_id not in isr or len(set(isr)) != len(isr)
                or any(r not in current.replicas for r in isr)):
            raise _IneligibleReplicaError(
                f"{change.topic}-{change.partition}: ISR {list(isr)} must hold the leader"
                f" and replicas {list(current.replicas)} only")
        new = replace(current, isr=isr, partition_epoch=current.partition_epoch + 1)
        # The local store fsyncs its file: off the event loop.
        await asyncio.to_thread(self.store.set_partition_state, change.topic,
                                change.partition, new, change.partition_epoch)
        return new
