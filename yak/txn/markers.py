"""`MarkerWriter` through the partition layer, with a seam for partitions led elsewhere.

The coordinator asks for one transaction's COMMIT/ABORT markers on a set of partitions.
Partitions led by this broker are appended locally (`ReplicaManager.write_txn_markers`,
acks=all, on the coordinator's behalf). A partition that exists but is led by another
broker goes to `remote`, which the cluster phase (issue 11) sets to a sender of
WriteTxnMarkers requests to that leader (one per broker); until then it is answered
NOT_LEADER_OR_FOLLOWER, which the coordinator retries. A partition whose topic no
longer exists is UNKNOWN_TOPIC_OR_PARTITION, which the coordinator skips.

The same local path serves the WriteTxnMarkers handler (markers sent by another broker's
coordinator, or by an admin tool aborting a hanging transaction). After a marker lands in
a `__consumer_offsets` partition, the group coordinator is told (`on_offsets_marker`) so
the transaction's pending offset commits become visible (COMMIT) or are dropped (ABORT):
Kafka's `GroupCoordinator.onTransactionCompleted`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from yak.errors import ErrorCode
from yak.partition import TxnMarker
from yak.txn.config import OFFSETS_TOPIC
from yak.txn.state import TopicPartition

if TYPE_CHECKING:
    from yak.partition import ReplicaManager

__all__ = ["PartitionMarkerWriter", "RemoteMarkerSender"]

log = logging.getLogger(__name__)

# (markers for partitions led elsewhere) -> an error code per partition
RemoteMarkerSender = Callable[[Sequence[TxnMarker]], Awaitable[Mapping[TopicPartition, ErrorCode]]]
# (producer id, commit, __consumer_offsets partitions that got the marker)
OffsetsMarkerListener = Callable[[int, bool, Collection[int]], None]

MARKER_TIMEOUT_MS = 30_000


class PartitionMarkerWriter:
    def __init__(
        self,
        replicas: ReplicaManager,
        partition_exists: Callable[[TopicPartition], bool],
        on_offsets_marker: OffsetsMarkerListener | None = None,
        remote: RemoteMarkerSender | None = None,
        timeout_ms: int = MARKER_TIMEOUT_MS,
    ) -> None:
        self._replicas = replicas
        self._partition_exists = partition_exists
        self.on_offsets_marker = on_offsets_marker
        self.remote = remote
        self._timeout_ms = timeout_ms

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Collection[TopicPartition],
    ) -> Mapping[TopicPartition, ErrorCode]:
        local: list[TxnMarker] = []
        elsewhere: list[TxnMarker] = []
        out: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            marker = TxnMarker(tp[0], tp[1], producer_id, producer_epoch, coordinator_epoch,
                               commit)
            p = self._replicas.get_partition(tp[0], tp[1])
            if p is not None and p.is_leader:
                local.append(marker)
            elif not self._partition_exists(tp):
                out[tp] = ErrorCode.unknown_topic_or_partition
            else:
                elsewhere.append(marker)
        if local:
            out.update(await self.write_local(local))
        if elsewhere:
            if self.remote is None:
                for m in elsewhere:
                    out[(m.topic, m.partition)] = ErrorCode.not_leader_or_follower
            else:
                out.update(await self.remote(elsewhere))
        return out

    async def write_local(self, markers: Sequence[TxnMarker]) -> dict[TopicPartition, ErrorCode]:
        """Append markers to partitions led here (also the WriteTxnMarkers handler's path)."""
        results = await self._replicas.write_txn_markers(markers, self._timeout_ms)
        out: dict[TopicPartition, ErrorCode] = {}
        offsets: dict[tuple[int, bool], list[int]] = {}
        for m, r in zip(markers, results, strict=True):
            code = ErrorCode(r.error)
            out[(m.topic, m.partition)] = code
            if code is ErrorCode.none and m.topic == OFFSETS_TOPIC:
                offsets.setdefault((m.producer_id, m.commit), []).append(m.partition)
        if self.on_offsets_marker is not None:
            for (pid, commit), parts in offsets.items():
                try:
                    self.on_offsets_marker(pid, commit, parts)
                except Exception:
                    log.exception("completing the offset commits of producer %d failed", pid)
        return out
