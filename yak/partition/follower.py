"""The follower side of the ReplicaManager: what the replica fetchers
(yak/cluster/replica_fetcher.py) do to the partitions this broker follows (Kafka's
ReplicaManager calls from `ReplicaFetcherThread`: `appendRecordsToFollowerOrFutureReplica`,
`truncate`, `truncateFullyAndStartAt`).

Every call names the leader epoch the fetcher works under: a fetch answered under an older
leadership is dropped (NOT_LEADER_OR_FOLLOWER), so a late response never writes into a
log whose leadership moved on. Truncation runs on the event loop on purpose: no
leadership change or append may interleave with it, and it is rare (after a leader
change).

`FollowerPath` is a part of `ReplicaManager` (a class it extends, like `FetchPath`): the
fetchers keep calling the ReplicaManager, and it reads the ReplicaManager's partitions.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from yak.errors import CorruptRecordError, NotLeaderOrFollowerError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from yak.partition.partition import LogAppendInfo, Partition
    from yak.partition.purgatory import FetchPurgatory

__all__ = ["FollowerPath"]

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")


class FollowerPath:
    """The replica fetchers' operations on the ReplicaManager (see the module's docstring)."""

    # The ReplicaManager's, read here.
    _partitions: dict[tuple[str, int], Partition]
    fetch_purgatory: FetchPurgatory

    def follower_partition(self, topic: str, partition: int, leader_epoch: int) -> Partition:
        """The partition a replica fetcher works on, if this broker still follows it at
        `leader_epoch` (a fetch answered under an older leadership is dropped)."""
        p = self._partitions.get((topic, partition))
        if p is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} is not hosted here")
        if p.is_leader or p.leader_epoch != leader_epoch:
            raise NotLeaderOrFollowerError(
                f"{topic}-{partition} is no longer followed here at epoch {leader_epoch}")
        return p

    def append_as_follower(
        self, topic: str, partition: int, leader_epoch: int, records: memoryview,
        leader_high_watermark: int, leader_log_start_offset: int,
    ) -> LogAppendInfo | None:
        """Append batches fetched from the leader (offsets and epochs as they are; the
        producers' state follows them, so a new leader knows their sequences), then
        take the leader's high watermark and log start offset. A trailing partial batch
        is left for the next fetch. Returns None when there was nothing to append;
        raises KafkaError (not followed at this epoch any more, corrupt data)."""
        p = self.follower_partition(topic, partition, leader_epoch)
        info = None
        n = _whole_batches(records)
        if n:
            info = p.append_as_follower(records[:n] if n != len(records) else records)
        p.update_high_watermark_as_follower(leader_high_watermark, leader_log_start_offset)
        return info

    def truncate(self, topic: str, partition: int, leader_epoch: int, offset: int) -> int:
        """Truncate a follower's log at `offset` (diverging epochs); returns its new log
        end offset. Runs on the event loop on purpose: no leadership change or append
        may interleave with a truncation, and it is rare (after a leader change)."""
        p = self.follower_partition(topic, partition, leader_epoch)
        if offset < p.log_end_offset:
            log.info("%s-%d: truncating from %d to %d (diverged from the leader at epoch %d)",
                     topic, partition, p.log_end_offset, offset, leader_epoch)
            p.truncate_to(offset)
            self.fetch_purgatory.notify(topic, partition)
        return p.log_end_offset

    def truncate_fully_and_start_at(self, topic: str, partition: int, leader_epoch: int,
                                    offset: int) -> None:
        """Empty a follower's log and start it at `offset` (the leader's log starts after
        ours ends, or our log is ahead of a leader that has nothing in common with it)."""
        p = self.follower_partition(topic, partition, leader_epoch)
        log.info("%s-%d: restarting the log at %d (was %d..%d) to follow the leader",
                 topic, partition, offset, p.log_start_offset, p.log_end_offset)
        p.truncate_fully_and_start_at(offset)
        self.fetch_purgatory.notify(topic, partition)


def _whole_batches(records: memoryview) -> int:
    """Bytes of the whole batches at the start of `records` (a fetch may end in a partial
    batch when a byte limit cut it). Reads one length field per batch."""
    n = len(records)
    pos = 0
    while n - pos >= 12:
        size = _I32.unpack_from(records, pos + 8)[0] + 12
        if size < 12 + 49:
            raise CorruptRecordError(f"batch length {size - 12} at byte {pos}")
        if pos + size > n:
            break
        pos += size
    return pos
