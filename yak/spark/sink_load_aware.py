"""`partitioner=load_aware` for the Spark sink's keyless rows (issue 23).

Why: a row without a key (and without a `partition` column value) may go to any
partition, so it should go where it is acknowledged soonest, as Yak's other producers
(the gateway, `yak produce`) place keyless records with `yak.client.load_aware`
(KIP-794's adaptive partitioning, per leader broker). Without the option the sink keeps
its sticky spread by row index.

Per batch, never per row: a task's keyless rows of one topic are cut into runs of about
`batch_bytes` (the client's `kafka.batch.size`: KIP-794 draws once per batch) by the
running sum of their value sizes, and the partitioner draws one partition per run. The
sink's client is blocking, so its only observation is how long each leader took to
answer: `produce` sends each round's batches leader by leader, times each Produce, and
reports that latency for the runs of the partitions whose last batch it carried (a
failure settles them as failed before the error goes up). The published broker loads
are not read: the sink reaches the cluster over the wire only, like `yak produce`.

Placement is not deterministic, so the state-topic markers (`exactlyOnceMode=markers`,
whose replay must place each row where the first attempt did) keep the row-index spread;
batch writes and transactional streaming writes use this.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from yak.client.load_aware import LoadAwarePartitioner

__all__ = ["LoadAwarePlacement", "value_sizes"]

TopicPartition = tuple[str, int]


def value_sizes(table: pa.Table) -> np.ndarray:
    """Each row's value bytes (0 for a null value), vectorized."""
    value = table.column("value").combine_chunks()
    if not (pa.types.is_binary(value.type) or pa.types.is_string(value.type)
            or pa.types.is_large_binary(value.type) or pa.types.is_large_string(value.type)):
        return np.zeros(len(value), np.int64)
    return pc.binary_length(value).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


class LoadAwarePlacement:
    """One write task's load-aware placement (module docstring)."""

    def __init__(self, batch_bytes: int, partitioner: LoadAwarePartitioner | None = None
                 ) -> None:
        self.batch_bytes = max(1, batch_bytes)
        # sticky_s: runs are cut here by bytes; each call is a new run, so a new draw.
        self.partitioner = partitioner or LoadAwarePartitioner(sticky_bytes=1, sticky_s=0.0)
        self._leaders: dict[str, dict[int, int]] = {}  # topic -> partition -> leader
        self._runs: dict[TopicPartition, int] = {}  # runs placed and not yet settled

    def leaders(self, client: Any, topic: str) -> dict[int, int]:
        if topic not in self._leaders:
            self._leaders[topic] = {p.partition: p.leader
                                    for p in client.partitions_for(topic, auto_create=True)}
        return self._leaders[topic]

    def place(self, client: Any, topic: str, sizes: np.ndarray) -> np.ndarray:
        """A partition for each of these keyless rows of `topic` (their value sizes)."""
        leaders = self.leaders(client, topic)
        if not len(sizes):
            return np.zeros(0, np.int64)
        run = np.cumsum(sizes + 1) // self.batch_bytes  # +1: empty values count too
        starts = np.concatenate(([0], np.nonzero(np.diff(run))[0] + 1))
        ends = np.concatenate((starts[1:], [len(sizes)]))
        out = np.empty(len(sizes), np.int64)
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            p = self.partitioner.partition(topic, leaders, int(sizes[a:b].sum()))
            out[a:b] = p
            self._runs[(topic, p)] = self._runs.get((topic, p), 0) + 1
        return out

    def produce(self, client: Any, round_: dict[TopicPartition, bytes],
                last: set[TopicPartition], **kwargs: Any) -> None:
        """Send one round (one batch per partition) leader by leader, timing each; the
        runs of the partitions in `last` (their final batch) are settled with it."""
        import time

        by_leader: dict[int, dict[TopicPartition, bytes]] = {}
        for tp, data in round_.items():
            leader = self._leaders.get(tp[0], {}).get(tp[1], -1)
            by_leader.setdefault(leader, {})[tp] = data
        for leader, part in sorted(by_leader.items()):
            t0 = time.monotonic()
            try:
                client.produce(part, **kwargs)
            except Exception:
                self.settle_failed()
                raise
            took = time.monotonic() - t0
            for tp in part:
                if tp in last:
                    for _ in range(self._runs.pop(tp, 0)):
                        self.partitioner.acked(leader, took)

    def settle_failed(self) -> None:
        """Every run not yet settled counts as failed (no longer in flight)."""
        for (topic, p), n in self._runs.items():
            leader = self._leaders.get(topic, {}).get(p, -1)
            for _ in range(n):
                self.partitioner.failed(leader)
        self._runs.clear()
