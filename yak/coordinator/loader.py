"""`CoordinatorLoader` on the partition layer (Kafka's CoordinatorLoaderImpl).

Reads a partition of an internal topic from its log start to its log end (not the high
watermark: a new leader's high watermark lags what the old leader acknowledged, and a
decision every in-sync replica has, such as a PrepareCommit, may lie above it; issue 16)
and replays it into a shard: every keyed record of a data batch with its producer (a
transactional batch's, else NO_PRODUCER), every control batch as one transaction marker.
The shard, not the loader, decides what a transaction's records mean before their marker.

It reads 1 MiB at a time, on the event loop, as the coordinators always loaded (the
runtime's load is one synchronous step; see `CoordinatorRuntime.schedule_load`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yak.coordinator.api import NO_PRODUCER, CoordinatorShard
from yak.partition import FetchIsolation
from yak.protocol import control_records
from yak.protocol import records as batches

if TYPE_CHECKING:
    from yak.partition import ReplicaManager

__all__ = ["ReplicaLoader", "replay_batches"]

_READ_CHUNK = 1 << 20


class ReplicaLoader:
    def __init__(self, replicas: ReplicaManager, topic: str) -> None:
        self._replicas = replicas
        self._topic = topic

    def load(self, partition: int, shard: CoordinatorShard) -> int:
        p = self._replicas.get_partition(self._topic, partition)
        if p is None:
            return 0
        offset = p.log_start_offset
        end = p.log_end_offset
        while offset < end:
            info = p.read(offset, _READ_CHUNK, FetchIsolation.LOG_END, True)
            data = b"".join(bytes(b) for b in info.buffers)
            if not data:
                break
            nxt = replay_batches(data, offset, shard)
            if nxt <= offset:
                break
            offset = nxt
        return end


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
