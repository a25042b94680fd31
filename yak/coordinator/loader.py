"""`CoordinatorLoader` on the partition layer (Kafka's CoordinatorLoaderImpl).

Reads a partition of an internal topic from its log start to its log end (not the high
watermark: a new leader's high watermark lags what the old leader acknowledged, and a
decision every in-sync replica has, such as a PrepareCommit, may lie above it; issue 16)
and replays it into a shard: every keyed record of a data batch with its producer (a
transactional batch's, else NO_PRODUCER), every control batch as one transaction marker.
The shard, not the loader, decides what a transaction's records mean before their marker.

It reads 256 KiB at a time (`_READ_CHUNK`), and `replay_chunks` yields after each chunk, so
the runtime can let the event loop serve other requests between two (see
`CoordinatorRuntime.schedule_load`). The reads are of the partition layer's page-cached
segments, on the loop as a Fetch's are; the decoding is the cost that yielding spreads.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

from yak.coordinator.api import NO_PRODUCER, CoordinatorShard
from yak.partition import FetchIsolation
from yak.protocol import control_records
from yak.protocol import records as batches

if TYPE_CHECKING:
    from yak.partition import ReplicaManager

__all__ = ["ReplicaLoader", "replay_batches"]

_READ_CHUNK = 64 << 10


class ReplicaLoader:
    def __init__(self, replicas: ReplicaManager, topic: str) -> None:
        self._replicas = replicas
        self._topic = topic

    def load(self, partition: int, shard: CoordinatorShard) -> int:
        steps = self.replay_chunks(partition, shard)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return int(done.value)

    def replay_chunks(self, partition: int, shard: CoordinatorShard) -> Generator[None, None, int]:
        p = self._replicas.get_partition(self._topic, partition)
        if p is None:
            return 0
        offset = p.log_start_offset
        while True:
            end = p.log_end_offset  # again each step: the log may grow during the load
            if offset >= end:
                return end
            info = p.read(offset, _READ_CHUNK, FetchIsolation.LOG_END, True)
            data = b"".join(bytes(b) for b in info.buffers)
            if not data:
                return end
            nxt = replay_batches(data, offset, shard)
            if nxt <= offset:
                return end
            offset = nxt
            if offset < p.log_end_offset:
                yield  # more to read: let the loop run first


def replay_batches(data: bytes, from_offset: int, shard: CoordinatorShard) -> int:
    """Replay the batches in `data` (records below `from_offset` skipped); returns the
    offset after the last batch."""
    nxt = from_offset
    for pos, h in batches.iter_batches(data):
        nxt = h.next_offset
        if h.next_offset <= from_offset:
            continue
        batch = batches.batch_bytes(data, pos, h)
        if h.is_control:
            for r in batches.decode_records(batch):
                kind = control_records.decode_control_type(r.key)
                if kind in (control_records.COMMIT, control_records.ABORT):
                    shard.replay_end_transaction(h.producer_id, h.producer_epoch,
                                                 kind == control_records.COMMIT)
            continue
        pid = h.producer_id if h.is_transactional else NO_PRODUCER
        for r in batches.decode_records(batch):
            if r.key is None or r.offset is None or r.offset < from_offset:
                continue
            shard.replay(r.offset, pid, h.producer_epoch, r.key, r.value)
    return nxt
