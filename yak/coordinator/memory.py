"""`PartitionWriter` and `CoordinatorLoader` in lists, for the state machines' unit tests.

The group and transaction coordinators' unit tests drive them by method calls on a
`ManualClock`; this keeps each partition's records (and transaction markers) in a list,
so a "restart" is a new coordinator replaying the same lists. It plays a leader: every
partition is led here at `leader_epochs[p]` (0 unless a test moves it), and an append at
another epoch is refused as the real writer refuses it. Tests can make the next appends
fail (`fail_next`), load in steps of `chunk_records` entries, hold commits (`hold`: appended, not yet committed) and hold a loaded
partition's high watermark (`uncommitted`). The runtime's own tests, and the
coordinators' integration tests, use the real partition layer instead
(`partition_writer.py`, `loader.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Sequence
from dataclasses import dataclass

from yak.coordinator.api import NO_PRODUCER, CoordinatorShard, Record
from yak.errors import NotLeaderOrFollowerError

__all__ = ["MemoryCoordinatorLog"]


@dataclass(frozen=True, slots=True)
class _Entry:
    offset: int
    producer_id: int
    producer_epoch: int
    key: bytes | None  # None: a transaction marker
    value: bytes | None
    commit: bool = False


class MemoryCoordinatorLog:
    def __init__(self, num_partitions: int = 4, topic: str = "__memory") -> None:
        self._topic = topic
        self._parts: list[list[_Entry]] = [[] for _ in range(num_partitions)]
        self.leader_epochs: dict[int, int] = {}
        self.fail_next: list[BaseException] = []
        self.hold: asyncio.Event | None = None
        self.uncommitted: asyncio.Event | None = None
        self.appends = 0
        self.crashed: set[int] = set()
        self.chunk_records = 1 << 30  # entries replayed per load step

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def num_partitions(self) -> int:
        return len(self._parts)

    def exists(self) -> bool:
        return True

    async def ensure_topic(self) -> None:
        return None

    def leader_epoch(self, partition: int) -> int | None:
        return self.leader_epochs.get(partition, 0)

    def recovered_uncleanly(self, partition: int) -> bool:
        return partition in self.crashed

    def crashed_leading(self, partition: int, epoch: int) -> bool:
        return partition in self.crashed

    def append(self, partition: int, epoch: int, records: Sequence[Record],
               producer: tuple[int, int] | None = None) -> object:
        if self.fail_next:
            raise self.fail_next.pop(0)
        if self.leader_epoch(partition) != epoch:
            raise NotLeaderOrFollowerError(f"epoch {epoch} is not the leader's")
        part = self._parts[partition]
        pid, pepoch = producer if producer is not None else (NO_PRODUCER, -1)
        for key, value in records:
            part.append(_Entry(len(part), pid, pepoch, key, value))
        self.appends += 1
        return len(part)

    async def wait_committed(self, appended: object) -> None:
        if self.hold is not None:
            await self.hold.wait()

    async def wait_high_watermark(self, partition: int, epoch: int, offset: int) -> bool:
        if self.uncommitted is not None:
            await self.uncommitted.wait()
        return self.leader_epoch(partition) == epoch

    def write_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker lands in the partition (the marker writer's job)."""
        part = self._parts[partition]
        part.append(_Entry(len(part), producer_id, 0, None, None, commit))

    def load(self, partition: int, shard: CoordinatorShard) -> int:
        steps = self.replay_chunks(partition, shard)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return int(done.value)

    def replay_chunks(self, partition: int, shard: CoordinatorShard) -> Generator[None, None, int]:
        """`chunk_records` entries per step (tests make it small to load in steps)."""
        part = self._parts[partition]
        i = 0
        while i < len(part):
            for e in part[i:i + self.chunk_records]:
                if e.key is None:
                    shard.replay_end_transaction(e.producer_id, e.producer_epoch, e.commit)
                else:
                    shard.replay(e.offset, e.producer_id, e.producer_epoch, e.key, e.value)
            i += self.chunk_records
            if i < len(part):
                yield
        return len(part)

    def records(self, partition: int) -> list[Record]:
        """The partition's data records, in order (markers left out)."""
        return [(e.key, e.value) for e in self._parts[partition] if e.key is not None]

    @property
    def parts(self) -> list[list[Record]]:
        return [self.records(p) for p in range(len(self._parts))]

