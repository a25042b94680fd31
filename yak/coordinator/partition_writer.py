"""`PartitionWriter` on the partition layer (Kafka's CoordinatorPartitionWriter).

One writer per internal topic (`__consumer_offsets`, `__transaction_state`). An append is
one RecordBatch (a transactional one for a TxnOffsetCommit) written on the coordinator's
behalf (`AppendOrigin.COORDINATOR`, which may write internal topics) with
`ReplicaManager.append_local`, then `wait_committed` is the acks=all step
(`ReplicaManager.wait_for_acks`: the high watermark passes the batch, and an fsync on a
`write.caching=false` topic), bounded by the coordinator's commit timeout. An append is
refused (NOT_LEADER_OR_FOLLOWER) unless this broker leads the partition at the epoch the
shard was loaded with, so a deposed coordinator's late write never lands.

The topic is created on first use (the first FindCoordinator, or a write), as Kafka
does, so a broker that never sees a group or a transaction lists no internal topic;
creating it is a callable the composition hands in (this layer never imports the
broker or the cluster).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from yak.coordinator.api import Record
from yak.errors import NotLeaderOrFollowerError, error_for_code
from yak.partition import AppendOrigin, LogAppendInfo, PartitionAppendResult
from yak.protocol import records as batches

if TYPE_CHECKING:
    from yak.partition import ReplicaManager

__all__ = ["ReplicaPartitionWriter"]

log = logging.getLogger(__name__)


class ReplicaPartitionWriter:
    def __init__(
        self,
        replicas: ReplicaManager,
        topic: str,
        topic_partitions: Callable[[str], int | None],
        create_topic: Callable[[str, int, Mapping[str, str]], Awaitable[object]],
        default_partitions: int,
        topic_configs: Mapping[str, str],
        timeout_ms: int,
    ) -> None:
        self._replicas = replicas
        self._topic = topic
        self._topic_partitions = topic_partitions
        self._create_topic = create_topic
        self._configs = dict(topic_configs)
        self._timeout_ms = timeout_ms
        self._default_partitions = default_partitions
        self._creating: asyncio.Future[None] | None = None

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def num_partitions(self) -> int:
        # The topic's own count once it exists (in a cluster the metadata arrives after
        # the writer is built); the configured default until then.
        existing = self._topic_partitions(self._topic)
        return existing if existing is not None else self._default_partitions

    def exists(self) -> bool:
        return self._topic_partitions(self._topic) is not None

    async def ensure_topic(self) -> None:
        if self.exists():
            return
        if self._creating is None:
            self._creating = asyncio.get_running_loop().create_future()
            try:
                log.info("creating %s with %d partitions", self._topic,
                         self._default_partitions)
                await self._create_topic(self._topic, self._default_partitions, self._configs)
                self._creating.set_result(None)
            except BaseException as e:
                if self.exists():
                    self._creating.set_result(None)  # another broker created it: fine
                else:
                    self._creating.set_exception(e)
            fut, self._creating = self._creating, None
        else:
            fut = self._creating
        await asyncio.shield(fut)

    def leader_epoch(self, partition: int) -> int | None:
        p = self._replicas.get_partition(self._topic, partition)
        if p is None or not p.is_leader:
            return None
        return p.leader_epoch

    def recovered_uncleanly(self, partition: int) -> bool:
        p = self._replicas.get_partition(self._topic, partition)
        return p is not None and p.recovered_uncleanly

    def crashed_leading(self, partition: int, epoch: int) -> bool:
        p = self._replicas.get_partition(self._topic, partition)
        return p is not None and p.recovered_uncleanly and p.latest_epoch == epoch

    def append(self, partition: int, epoch: int, records: Sequence[Record],
               producer: tuple[int, int] | None = None) -> PartitionAppendResult:
        if self.leader_epoch(partition) != epoch:
            raise NotLeaderOrFollowerError(
                f"{self._topic}-{partition} is not led here at epoch {epoch}")
        recs = [batches.Record(k, v) for k, v in records]
        if producer is None:
            batch = batches.build_batch(recs)
        else:  # part of the producer's transaction (Kafka writes no sequence here)
            batch = batches.build_batch(recs, producer_id=producer[0],
                                        producer_epoch=producer[1], transactional=True)
        result = self._replicas.append_local(self._topic, partition, memoryview(batch), -1,
                                             AppendOrigin.COORDINATOR)
        if result.error:
            raise error_for_code(result.error, result.error_message or "")
        return result

    async def wait_committed(self, appended: object) -> None:
        assert isinstance(appended, PartitionAppendResult)
        await self._replicas.wait_for_acks([appended], self._timeout_ms)
        if appended.error:
            raise error_for_code(appended.error, appended.error_message or "")

    async def wait_high_watermark(self, partition: int, epoch: int, offset: int) -> bool:
        """Through the acks=all wait itself (the partition layer's one way to wait for
        the high watermark), one second at a time so a leadership change is noticed."""
        while True:
            if self.leader_epoch(partition) != epoch:
                return False
            p = self._replicas.get_partition(self._topic, partition)
            if p is None:
                return False
            if p.high_watermark >= offset or offset <= 0:
                return True
            probe = PartitionAppendResult(self._topic, partition, 0, None, LogAppendInfo(
                offset - 1, offset - 1, -1, p.log_start_offset, 0, 0))
            await self._replicas.wait_for_acks([probe], 1000)
