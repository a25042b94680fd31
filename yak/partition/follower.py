"""The follower side of the ReplicaManager: what the replica fetchers
(yak/cluster/replica_fetcher.py) do to the partitions this broker follows (Kafka's
ReplicaManager calls from `ReplicaFetcherThread`: `appendRecordsToFollowerOrFutureReplica`,
`truncate`, `truncateFullyAndStartAt`, and for tiered topics the tier state machine's
`buildRemoteLogAuxState`: a follower below its leader's local log start restarts after the
remote part with the remote segment's producer snapshot and leader epoch, issue 25).

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
import os
import struct
from typing import TYPE_CHECKING

from yak.errors import CorruptRecordError, NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from yak.storage.checkpoint import write_atomic
from yak.storage.producer_state import SNAPSHOT_SUFFIX

if TYPE_CHECKING:
    from yak.partition.partition import LogAppendInfo, Partition
    from yak.partition.purgatory import FetchPurgatory
    from yak.tiered import RemoteLogManager

__all__ = ["FollowerPath"]

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")


class FollowerPath:
    """The replica fetchers' operations on the ReplicaManager (see the module's docstring)."""

    # The ReplicaManager's, read here.
    _partitions: dict[tuple[str, int], Partition]
    fetch_purgatory: FetchPurgatory
    remote_log: RemoteLogManager | None

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

    def apply_follower_fetch(
        self, topic: str, partition: int, leader_epoch: int, records: memoryview,
        leader_high_watermark: int, leader_log_start_offset: int,
    ) -> Partition:
        """`append_as_follower` for the replica fetcher's steady state: the same append
        and high watermark, but it returns the partition (whose log end the fetcher reads
        next) rather than an append summary, so one answer costs one partition lookup."""
        p = self.follower_partition(topic, partition, leader_epoch)
        if records:
            n = _whole_batches(records)
            if n:
                p.append_as_follower(records[:n] if n != len(records) else records)
        p.update_high_watermark_as_follower(leader_high_watermark, leader_log_start_offset)
        return p

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

    # ------------------------------------------------------------------ tiered (issue 25)

    def tiered_follower(self, topic: str, partition: int) -> bool:
        """Whether a follower below its leader's local log start rebuilds from the remote
        log (a tiered topic on a broker with tiered storage) rather than starting empty."""
        p = self._partitions.get((topic, partition))
        return (p is not None and self.remote_log is not None
                and p.log.config.remote_storage_enable)

    async def build_remote_log_aux_state(
        self, topic: str, partition: int, leader_epoch: int, leader_local_start: int,
        leader_local_start_epoch: int,
    ) -> int:
        """Kafka's `buildRemoteLogAuxState`: restart a follower that fell below its
        leader's local log start (`leader_local_start`, ListOffsets -4, whose record has
        `leader_local_start_epoch`) right after the remote segment holding the offset
        before it, with that segment's producer snapshot and the leader epoch of its last
        record, without copying the remote records. Returns the offset the log now
        starts (and ends) at, from which it fetches.

        The remote objects are read first (awaits: nothing of the log changes meanwhile);
        then, if this broker still follows at `leader_epoch`, the log is truncated and
        restored on the event loop with no await in between, so no append or leadership
        change interleaves (rare, like a truncation). Without tiered storage here, or
        with no remote segment before the leader's local start, the log simply restarts
        empty there. KafkaError: the store failed (retriable), or not followed any more.
        """
        p = self.follower_partition(topic, partition, leader_epoch)
        rl = self.remote_log
        state = None
        if rl is not None and p.log.config.remote_storage_enable:
            topic_id = p.topic_id
            state = await rl.follower_aux_state(topic, str(topic_id), partition,
                                                leader_local_start)
            p = self.follower_partition(topic, partition, leader_epoch)  # after the await
            if p.topic_id != topic_id:  # the topic was deleted and created again meanwhile
                raise NotLeaderOrFollowerError(f"{topic}-{partition} is another topic now")
        if state is None:
            self.truncate_fully_and_start_at(topic, partition, leader_epoch,
                                             leader_local_start)
            return leader_local_start
        start = state.next_offset
        log_ = p.log
        log.info("%s-%d: restarting the log at %d (was %d..%d) after remote segment %s"
                 " (%d..%d), with its producer snapshot and leader epochs; the leader's"
                 " local log starts at %d", topic, partition, start, log_.log_start_offset,
                 log_.log_end_offset, state.segment.segment_id, state.segment.base_offset,
                 state.segment.end_offset, leader_local_start)
        p.truncate_fully_and_start_at(start)
        epoch = state.epoch_before()
        # Storage keeps epochs from the log start on (as local retention leaves them), so
        # the epoch of the record before the start is kept as starting there. Not when it
        # is older than every epoch the leader still has (an epoch began exactly at the
        # leader's local start): the leader could not match it and would refuse the
        # follower's fetches; with no epoch the first fetch is checked by offset alone.
        restore_epoch = epoch >= 0 and (start > leader_local_start
                                        or leader_local_start_epoch <= epoch)
        with log_.lock:  # the maintenance thread's retention and snapshots take it too
            if restore_epoch:
                log_.leader_epoch_cache.assign(epoch, start)
            if state.producer_snapshot is not None:
                ps = log_.producer_state
                write_atomic(os.path.join(log_.directory, f"{start:020d}{SNAPSHOT_SUFFIX}"),
                             state.producer_snapshot)  # fsynced: no local record could rebuild it
                if ps.load_snapshot(start) != start:
                    log.warning("%s-%d: the remote producer snapshot at %d did not load;"
                                " producer state starts empty", topic, partition, start)
        self.fetch_purgatory.notify(topic, partition)
        return start


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
