"""Which broker coordinates a group or a transactional id, and coordinator partitions
loaded and unloaded with leadership.

A group's coordinator is the leader of its `__consumer_offsets` partition, a transactional
id's the leader of its `__transaction_state` partition (Kafka's rule: the coordinator's
state is that partition's log, so it lives where the log is written). FindCoordinator asks
`CoordinatorLocator`; on one broker it is always this broker.

In a cluster the publisher (`node.py`) calls `partition_changed` for every partition of
the two topics this broker hosts: becoming leader loads the partition into its
coordinator (the transaction coordinator at the leader epoch, which fences a deposed
coordinator's writes), losing leadership drops it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from yak.cluster.inter_broker import InterBrokerClient, remote_verify
from yak.errors import ErrorCode, KafkaError
from yak.group.records import OFFSETS_TOPIC
from yak.partition.state import NO_LEADER, PartitionState
from yak.txn.coordinator import produce_verification_error
from yak.txn.records import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from yak.cluster.cluster_topics import ClusterTopicManager
    from yak.coordinator import PartitionWriter
    from yak.group.coordinator import GroupCoordinator
    from yak.txn.coordinator import TransactionCoordinator

__all__ = ["CoordinatorLocator"]

log = logging.getLogger(__name__)


class CoordinatorLocator:
    def __init__(
        self,
        node_id: int,
        topics: ClusterTopicManager,
        groups: GroupCoordinator,
        offsets_log: PartitionWriter,
        txn_host: TransactionCoordinator | None,
        txn_coordinator: TransactionCoordinator | None,
        txn_log: PartitionWriter | None,
        cluster: bool,
    ) -> None:
        self.node_id = node_id
        self.topics = topics
        self.groups = groups
        self.offsets_log = offsets_log
        self.txn_host = txn_host
        self.txn_coordinator = txn_coordinator
        self.txn_log = txn_log
        self.cluster = cluster
        self.inter_broker: InterBrokerClient | None = None  # a cluster's, set by compose
        self._offsets_creating: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ FindCoordinator

    async def group(self, group_id: str) -> tuple[ErrorCode, int]:
        """(error, coordinator node id) for a group."""
        if not self.cluster:
            if not self.groups.loaded:
                return ErrorCode.coordinator_load_in_progress, self.node_id
            try:  # Kafka creates __consumer_offsets on the first FindCoordinator
                await self.groups.ensure_ready(group_id)
            except (KafkaError, OSError) as e:
                log.warning("cannot create %s: %s", OFFSETS_TOPIC, e)
                return ErrorCode.coordinator_not_available, -1
            return ErrorCode.none, self.node_id
        if self.topics.get(OFFSETS_TOPIC) is None:
            # Kafka creates __consumer_offsets on the first FindCoordinator.
            try:
                await self._create_offsets_topic()
            except (KafkaError, OSError) as e:
                log.warning("cannot create %s: %s", OFFSETS_TOPIC, e)
                return ErrorCode.coordinator_not_available, -1
        p = self.groups.partition_for(group_id)
        leader = self._leader(OFFSETS_TOPIC, p)
        if leader == NO_LEADER:
            return ErrorCode.coordinator_not_available, -1
        if leader != self.node_id:
            return ErrorCode.none, leader
        if self.groups.partition_loading(p):
            return ErrorCode.coordinator_load_in_progress, -1
        if not self.groups.owns(p):
            return ErrorCode.coordinator_not_available, -1  # being handed over: ask again
        return ErrorCode.none, self.node_id

    async def _create_offsets_topic(self) -> None:
        """One creation for concurrent callers (another broker may win: that is fine)."""
        if self._offsets_creating is None:
            self._offsets_creating = asyncio.get_running_loop().create_future()
            try:
                await self.offsets_log.ensure_topic()
                self._offsets_creating.set_result(None)
            except BaseException as e:
                if self.topics.get(OFFSETS_TOPIC) is not None:
                    self._offsets_creating.set_result(None)  # someone else created it
                else:
                    self._offsets_creating.set_exception(e)
            fut, self._offsets_creating = self._offsets_creating, None
        else:
            fut = self._offsets_creating
        await asyncio.shield(fut)

    async def transaction(self, transactional_id: str) -> tuple[ErrorCode, int]:
        """(error, coordinator node id) for a transactional id."""
        host, coord = self.txn_host, self.txn_coordinator
        if host is None or coord is None:
            return ErrorCode.coordinator_not_available, -1
        code = await host.ensure_ready(transactional_id)
        if code is not ErrorCode.none:
            return code, -1
        if not self.cluster:
            return coord.coordinator_error(transactional_id), self.node_id
        leader = self._leader(TRANSACTION_STATE_TOPIC, coord.partition_for(transactional_id))
        if leader == NO_LEADER:
            return ErrorCode.coordinator_not_available, -1
        if leader != self.node_id:
            return ErrorCode.none, leader
        code = coord.coordinator_error(transactional_id)
        if code is ErrorCode.not_coordinator:
            code = ErrorCode.coordinator_not_available  # not loaded yet here: ask again
        return code, self.node_id

    def remote_transaction_coordinator(self, transactional_id: str) -> int | None:
        """The broker coordinating `transactional_id` if it is another one (a cluster),
        else None: then the local coordinator answers (or refuses) it."""
        coord = self.txn_coordinator
        if not self.cluster or coord is None or self.txn_log is None \
                or not self.txn_log.exists():
            return None
        leader = self._leader(TRANSACTION_STATE_TOPIC, coord.partition_for(transactional_id))
        return None if leader in (NO_LEADER, self.node_id) else leader

    async def verify_remote(self, coordinator: int, transactional_id: str, producer_id: int,
                            producer_epoch: int, topic: str, partition: int) -> ErrorCode:
        """KIP-890 verification of one partition by the coordinator on broker
        `coordinator` (TxnOffsetCommit's check of the group's offsets partition)."""
        if self.inter_broker is None:
            return ErrorCode.not_coordinator
        codes = await remote_verify(self.inter_broker, coordinator, transactional_id,
                                    producer_id, producer_epoch, [(topic, partition)])
        return codes[(topic, partition)]

    async def verify_transaction(self, transactional_id: str, producer_id: int,
                                 producer_epoch: int,
                                 partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The partition layer's `TxnVerifier` (KIP-890 part 1): is each partition in the
        producer's ongoing transaction? Asks the local coordinator (no await), or the
        coordinator on another broker in one AddPartitionsToTxn v4 verify_only; answers
        Produce's error code per partition (0: verified)."""
        remote = self.remote_transaction_coordinator(transactional_id)
        codes: Mapping[tuple[str, int], ErrorCode]
        if remote is not None:
            if self.inter_broker is None:
                codes = dict.fromkeys(partitions, ErrorCode.not_coordinator)
            else:
                codes = await remote_verify(self.inter_broker, remote, transactional_id,
                                            producer_id, producer_epoch, partitions)
        elif self.txn_coordinator is None:
            codes = dict.fromkeys(partitions, ErrorCode.invalid_txn_state)
        else:
            codes = self.txn_coordinator.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions)
        return {tp: int(produce_verification_error(code)) for tp, code in codes.items()}

    def leader_of(self, topic: str, partition: int) -> int:
        return self._leader(topic, partition)

    def _leader(self, topic: str, partition: int) -> int:
        try:
            states = self.topics.partition_states(topic)
        except KafkaError:
            return NO_LEADER
        return states[partition].leader if partition < len(states) else NO_LEADER

    # ------------------------------------------------------------------ leadership

    def partition_changed(self, topic: str, partition: int, state: PartitionState | None,
                          leads: bool) -> None:
        """The publisher's hook: load a coordinator partition this broker now leads,
        drop one it no longer leads."""
        if topic == OFFSETS_TOPIC:
            if leads and state is not None:
                self.groups.on_election(partition, state.leader_epoch)
            else:
                self.groups.on_resignation(
                    partition, None if state is None else state.leader_epoch)
        elif topic == TRANSACTION_STATE_TOPIC and self.txn_coordinator is not None:
            # The coordinator runtime loads the shard at a new leader epoch (an ISR
            # change is the same term: nothing to do) and aborts what was Ongoing only if
            # this coordinator itself crashed in this leader term.
            self.txn_coordinator.on_partition_change(
                partition, None if state is None else state.leader_epoch, leads)
