"""The transaction coordinator's windows onto the rest of the cluster.

`yak.txn` must not import the broker, so whoever hosts the coordinator hands it:

- a `PartitionWriter` and a `CoordinatorLoader` for `__transaction_state` (the coordinator
  runtime's, `yak.coordinator`): a write is one record appended with acks=all, refused
  (NOT_LEADER_OR_FOLLOWER) when this broker no longer leads the partition at the epoch
  its shard was loaded at, which is what fences a deposed coordinator's late writes; a
  load replays a partition from its start to its log end when this broker becomes its
  leader.
- `MarkerWriter`: writes one transaction's COMMIT/ABORT control batches to a set of
  data partitions, wherever their leaders are (locally or by WriteTxnMarkers to
  another broker). One call is one attempt; it reports a Kafka error code per
  partition and the coordinator's marker channel (`marker_channel.py`) decides what to
  retry (Kafka's TransactionMarkerRequestCompletionHandler policy lives there, so it is
  unit tested against fakes).
- `ProducerIdSource`: allocates producer ids that are never reused (the broker's
  persisted id blocks today, the controller in a cluster).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from yak.errors import ErrorCode
from yak.txn.state import TopicPartition

__all__ = ["MarkerWriter", "ProducerIdSource", "Record"]

Record = tuple[bytes, bytes | None]
"""(key, value); a None value is a tombstone (an expired transactional id)."""


class MarkerWriter(Protocol):
    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Collection[TopicPartition],
    ) -> Mapping[TopicPartition, ErrorCode]:
        """Try once to append the marker to each partition; an error code per partition
        (NONE when the marker is in that partition's log, committed)."""
        ...


class ProducerIdSource(Protocol):
    async def __call__(self) -> int:
        """A producer id never handed out before (raises a KafkaError if it cannot)."""
        ...
