"""The coordinator's only window onto `__consumer_offsets`.

`yak.group` must not import the broker, so the broker hands the coordinator this
small interface (`yak/group/offsets_topic.py` implements it on `__consumer_offsets`).
One `append` is one RecordBatch: an OffsetCommit that touches ten partitions is
written atomically, as in Kafka, and survives or disappears as a whole. A TxnOffsetCommit
is appended as a transactional batch of its producer (`producer=(id, epoch)`): replay
applies it only once its COMMIT marker follows, and reports those still waiting for one
(`open_transactions`, filled by the last `replay` of the partition).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

__all__ = ["OffsetsLog", "MemoryOffsetsLog", "Record"]

Record = tuple[bytes, bytes | None]
"""(key, value); a None value is a tombstone that compaction will eventually drop."""


class OffsetsLog(Protocol):
    @property
    def num_partitions(self) -> int: ...

    async def append(
        self, partition: int, records: Sequence[Record], producer: tuple[int, int] | None = None,
        on_appended: Callable[[], None] | None = None,
    ) -> None:
        """Durably (as configured) append one batch (transactional, of `producer` = (id,
        epoch), if given); raises a KafkaError on failure.

        `on_appended` is called once the batch is in the leader's log and before the wait
        for the in-sync replicas: state that a later record of the same log must find (a
        transaction's pending offsets, which its marker completes) is staged there, as
        Kafka stages them when the local append is done, not when replication is."""
        ...

    def replay(self, partition: int) -> Iterable[Record]:
        """Every record of the partition, oldest first (used once, at start-up); records
        of transactions are included once committed, at their marker."""
        ...

    def open_transactions(self, partition: int) -> Mapping[int, Sequence[Record]]:
        """After `replay`: the records of transactions with no marker yet, per producer."""
        ...


class MemoryOffsetsLog:
    """An in-process log for the coordinator's unit tests and the benchmark's in-process
    mode: it keeps records in lists, so a "restart" is a new coordinator replaying it."""

    def __init__(self, num_partitions: int = 4) -> None:
        self._parts: list[list[Record]] = [[] for _ in range(num_partitions)]
        self.fail_next: Exception | None = None

    @property
    def num_partitions(self) -> int:
        return len(self._parts)

    async def append(
        self, partition: int, records: Sequence[Record], producer: tuple[int, int] | None = None,
        on_appended: Callable[[], None] | None = None,
    ) -> None:
        if self.fail_next is not None:
            err, self.fail_next = self.fail_next, None
            raise err
        self._parts[partition].extend(records)
        if on_appended is not None:
            on_appended()

    def replay(self, partition: int) -> Iterable[Record]:
        return list(self._parts[partition])

    def open_transactions(self, partition: int) -> Mapping[int, Sequence[Record]]:
        return {}

    def records(self, partition: int) -> list[Record]:
        return self._parts[partition]
