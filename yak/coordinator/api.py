"""The coordinator runtime's contracts, in the shapes of Kafka's `coordinator-common`.

- `CoordinatorShard` (Kafka's CoordinatorShard): the state machine of one internal-topic
  partition. The loader feeds it every record of the partition (`replay`) and every
  transaction marker (`replay_end_transaction`); the runtime tells it when it is loaded
  and unloaded.
- `CoordinatorResult` (Kafka's CoordinatorResult): what a write operation returns: the
  records to append (one batch, atomic) and the response, or `apply`, which makes the
  change to the in-memory state once the records are committed and returns the response.
  Yak's coordinators apply after the write (write-then-apply, as they always have), so a
  failed write leaves the state untouched and needs no snapshot to roll back to.
- `PartitionWriter` (Kafka's PartitionWriter / CoordinatorPartitionWriter): append one
  batch to a partition the broker leads at a given epoch (refused otherwise), then wait
  until it is committed (the high watermark passed it: acks=all).
- `CoordinatorLoader` (Kafka's CoordinatorLoader): replay a partition to its log end into
  a shard, all at once (`load`); a `ChunkedCoordinatorLoader` also one chunk per step
  (`replay_chunks`, which the runtime uses so that a big partition's load yields to the
  event loop between chunks).

`yak/coordinator/partition_writer.py` and `loader.py` implement the last two on the
partition layer; `memory.py` in lists, for the state machines' unit tests.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, runtime_checkable

__all__ = [
    "NO_PRODUCER",
    "ChunkedCoordinatorLoader",
    "CoordinatorLoader",
    "CoordinatorResult",
    "CoordinatorShard",
    "PartitionWriter",
    "Record",
]

T = TypeVar("T")

Record = tuple[bytes, bytes | None]
"""(key, value); a None value is a tombstone that compaction will eventually drop."""

NO_PRODUCER = -1
"""The producer id `replay` is given for a record outside any transaction."""


class CoordinatorShard(Protocol):
    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes,
               value: bytes | None) -> None:
        """One record of the partition, in log order (`producer_id` is NO_PRODUCER unless
        the record is part of a transaction, whose marker follows later)."""
        ...

    def replay_end_transaction(self, producer_id: int, producer_epoch: int,
                               commit: bool) -> None:
        """A COMMIT/ABORT marker of `producer_id` in the partition, in log order."""
        ...


@dataclass(slots=True)
class CoordinatorResult(Generic[T]):
    """A write operation's outcome: `records` appended as one batch (a transactional one
    of `producer` = (id, epoch) if given); once they are committed, `apply()` (if any)
    changes the state and its value is the response, else `response` is. `on_appended`
    runs right after the local append, before the wait for the in-sync replicas: state a
    later record of the same partition must find (a TxnOffsetCommit's pending offsets,
    which its marker completes) is staged there, as Kafka does."""

    records: Sequence[Record]
    response: T | None = None
    apply: Callable[[], T] | None = None
    producer: tuple[int, int] | None = None
    on_appended: Callable[[], None] | None = None


class PartitionWriter(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def num_partitions(self) -> int: ...

    def exists(self) -> bool:
        """Does the internal topic exist (it is created on first use)?"""
        ...

    async def ensure_topic(self) -> None:
        """Create the topic if it does not exist yet (concurrent callers share one try)."""
        ...

    def leader_epoch(self, partition: int) -> int | None:
        """The leader epoch of `partition` if this broker leads it, else None."""
        ...

    def append(self, partition: int, epoch: int, records: Sequence[Record],
               producer: tuple[int, int] | None = None) -> object:
        """Write one batch to the leader's log, now (no await: callers rely on appends
        happening in call order). Raises NotLeaderOrFollowerError unless this broker
        leads `partition` at `epoch`, or another KafkaError; returns a handle for
        `wait_committed`."""
        ...

    async def wait_committed(self, appended: object) -> None:
        """Until the high watermark passes the batch (acks=all); raises a KafkaError if
        it will not (leadership lost, timeout, a failed fsync)."""
        ...

    async def wait_high_watermark(self, partition: int, epoch: int, offset: int) -> bool:
        """Until the high watermark reaches `offset`: True; False as soon as this broker
        no longer leads `partition` at `epoch`."""
        ...

    def recovered_uncleanly(self, partition: int) -> bool:
        """Was `partition`'s log loaded after an unclean shutdown of this broker?"""
        ...

    def crashed_leading(self, partition: int, epoch: int) -> bool:
        """Was this broker leading `partition` at `epoch` when it stopped uncleanly (its
        log holds records of that very term)?"""
        ...


class CoordinatorLoader(Protocol):
    def load(self, partition: int, shard: CoordinatorShard) -> int:
        """Replay every record of `partition` up to its log end into `shard` (the log
        end, not the high watermark: a new leader's high watermark can lag a record
        every in-sync replica has). Returns the log end offset it read to."""
        ...


@runtime_checkable
class ChunkedCoordinatorLoader(CoordinatorLoader, Protocol):
    """A loader that can also replay a partition in steps (the runtime replays a plain
    `CoordinatorLoader`'s partition in one step)."""

    def replay_chunks(self, partition: int, shard: CoordinatorShard) -> Generator[None, None, int]:
        """`load`, one chunk per step: each `next()` replays the next chunk and yields if
        there is more; the generator returns the log end offset once the replay reached
        it, in the same step as its last check of the log end (so a record appended
        between two steps is replayed too)."""
        ...
