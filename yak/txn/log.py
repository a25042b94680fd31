"""The transaction coordinator's only windows onto the rest of the cluster.

`yak.txn` must not import the broker (nor the partition layer), so whoever hosts the
coordinator hands it three small interfaces:

- `TransactionLog`: the partitions of the compacted internal topic
  `__transaction_state`. `append` writes one record with acks=all and returns once it
  is committed (or raises a `KafkaError`); it must refuse (NOT_LEADER_OR_FOLLOWER)
  when this broker no longer leads the partition at `coordinator_epoch`, which is what
  fences a deposed coordinator's late writes. `replay` reads a partition from its
  start when this broker becomes its leader.
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

from collections.abc import Collection, Iterable, Mapping
from typing import Protocol

from yak.errors import ErrorCode
from yak.txn.state import TopicPartition

__all__ = ["TransactionLog", "MarkerWriter", "ProducerIdSource", "Record"]

Record = tuple[bytes, bytes | None]
"""(key, value); a None value is a tombstone (an expired transactional id)."""


class TransactionLog(Protocol):
    @property
    def num_partitions(self) -> int: ...

    async def append(self, partition: int, record: Record, coordinator_epoch: int) -> None:
        """Append one record (acks=all) and return once committed; raise a KafkaError
        (NOT_LEADER_OR_FOLLOWER if not the leader at `coordinator_epoch`) otherwise."""
        ...

    async def replay(self, partition: int) -> Iterable[Record]:
        """Every record of the partition up to its log end, oldest first. The log end,
        not the high watermark: a new leader's high watermark can lag a record every
        in-sync replica has (an acknowledged PrepareCommit), as Kafka's loader knows."""
        ...

    async def wait_loaded_committed(self, partition: int, coordinator_epoch: int) -> bool:
        """Until the partition's high watermark covers the log end the last `replay` read
        (every loaded record is committed): True then; False as soon as this broker no
        longer leads the partition at `coordinator_epoch`."""
        ...


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
