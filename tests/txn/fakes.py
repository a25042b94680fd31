"""In-memory fakes of the coordinator's own interfaces (the runtime's writer and loader,
MarkerWriter, ProducerIdSource) for unit tests: they keep records in lists and let a
test decide when a marker write or a log append completes, fails, or hangs."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from yak.coordinator import NO_PRODUCER, CoordinatorShard, Record
from yak.errors import ErrorCode, KafkaError, NotLeaderOrFollowerError
from yak.txn.state import TopicPartition


class MemoryTransactionLog:
    """The coordinator runtime's `PartitionWriter` and `CoordinatorLoader` over lists.
    `leader_epochs[p]` plays the partition's leader epoch: an append at another
    coordinator epoch is refused, as the real writer refuses it, and an append whose
    partition moved to another epoch while it waited fails as the real acks=all wait
    does. `hold` (when set) holds an append before it reaches the list; `uncommitted`
    holds the high watermark below what a load read."""

    def __init__(self, num_partitions: int = 4) -> None:
        self.parts: list[list[Record]] = [[] for _ in range(num_partitions)]
        self.leader_epochs: dict[int, int] = {}
        self.fail_next: list[KafkaError] = []
        self.hold: asyncio.Event | None = None  # when set, appends wait for it
        self.appends = 0
        # when set, what a replay loaded is not committed until it is set (a new leader's
        # high watermark below its log end)
        self.uncommitted: asyncio.Event | None = None

    @property
    def topic(self) -> str:
        return "__transaction_state"

    @property
    def num_partitions(self) -> int:
        return len(self.parts)

    def exists(self) -> bool:
        return True

    async def ensure_topic(self) -> None:
        return None

    def leader_epoch(self, partition: int) -> int | None:
        """Led here only once a test says at which epoch (`leader_epochs`)."""
        return self.leader_epochs.get(partition)

    def recovered_uncleanly(self, partition: int) -> bool:
        return False

    def crashed_leading(self, partition: int, epoch: int) -> bool:
        return False

    def append(self, partition: int, epoch: int, records: Sequence[Record],
               producer: tuple[int, int] | None = None) -> object:
        if self.hold is None:
            self._check(partition, epoch)
            self._write(partition, records)
            return None
        return (partition, epoch, list(records))  # written once `hold` is set

    async def wait_committed(self, appended: object) -> None:
        if appended is None:
            return
        assert isinstance(appended, tuple)
        partition, epoch, records = appended
        if self.hold is not None:
            await self.hold.wait()
        self._check(partition, epoch)
        self._write(partition, records)

    def _check(self, partition: int, epoch: int) -> None:
        if self.fail_next:
            raise self.fail_next.pop(0)
        if self.leader_epochs.get(partition, epoch) != epoch:
            raise NotLeaderOrFollowerError(f"epoch {epoch} is not the leader's")

    def _write(self, partition: int, records: Sequence[Record]) -> None:
        self.parts[partition].extend(records)
        self.appends += 1

    async def wait_high_watermark(self, partition: int, epoch: int, offset: int) -> bool:
        if self.uncommitted is not None:
            await self.uncommitted.wait()
        return self.leader_epochs.get(partition, epoch) == epoch

    def load(self, partition: int, shard: CoordinatorShard) -> int:
        part = list(self.parts[partition])
        for offset, (key, value) in enumerate(part):
            shard.replay(offset, NO_PRODUCER, -1, key, value)
        return len(part)


@dataclass
class MarkerCall:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
    future: asyncio.Future[Mapping[TopicPartition, ErrorCode]] | None = None


@dataclass
class FakeMarkerWriter:
    """Auto mode answers NONE for every partition at once (after `errors` scripted per
    partition are used up); manual mode parks each call until the test answers it."""

    manual: bool = False
    errors: dict[TopicPartition, list[ErrorCode]] = field(default_factory=dict)
    calls: list[MarkerCall] = field(default_factory=list)
    written: list[tuple[TopicPartition, int, int, bool, int]] = field(default_factory=list)

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Collection[TopicPartition],
    ) -> Mapping[TopicPartition, ErrorCode]:
        call = MarkerCall(
            producer_id, producer_epoch, coordinator_epoch, commit, frozenset(partitions)
        )
        self.calls.append(call)
        if self.manual:
            call.future = asyncio.get_running_loop().create_future()
            result = await call.future
        else:
            result = {}
            for tp in partitions:
                queue = self.errors.get(tp)
                result[tp] = queue.pop(0) if queue else ErrorCode.none
        for tp, err in result.items():
            if err is ErrorCode.none:
                self.written.append((tp, producer_id, producer_epoch, commit, coordinator_epoch))
        return result

    def pending(self) -> list[MarkerCall]:
        return [c for c in self.calls if c.future is not None and not c.future.done()]

    def answer(self, call: MarkerCall, error: ErrorCode = ErrorCode.none) -> None:
        assert call.future is not None
        call.future.set_result({tp: error for tp in call.partitions})


class CountingProducerIds:
    def __init__(self, start: int = 1000) -> None:
        self._next = itertools.count(start)
        self.fail_next: KafkaError | None = None

    async def __call__(self) -> int:
        if self.fail_next is not None:
            err, self.fail_next = self.fail_next, None
            raise err
        return next(self._next)
