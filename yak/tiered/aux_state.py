"""What a follower needs from the remote log to start its local log where its leader's
starts (Kafka's `ReplicaFetcherTierStateMachine.buildRemoteLogAuxState`, KIP-405).

A follower that falls below its leader's local log start (the leader answered its Fetch
OFFSET_MOVED_TO_TIERED_STORAGE, or OFFSET_OUT_OF_RANGE below its local start) does not copy
the remote part: it restarts its log right after the remote segment that holds the
offset before the leader's local start, and takes from that segment's uploaded files the
two things the skipped records would have given it:

- the producer snapshot taken at the segment's end (the producers' last sequences and
  epochs, open transactions), so idempotent producers carry on and duplicates are still
  recognised once the follower leads;
- the leader epochs the segment spans (its uploaded leader-epoch checkpoint), so the
  follower's first Fetch names the epoch of the record before its log start, which the
  leader checks as for any follower.

Both objects are checked against the sizes and CRC32Cs the manifest records; a store
failure or a mismatch is `RemoteStorageError` (the follower backs off and asks again),
never a guess. This module reads the bucket only: the partition layer
(`yak.partition.follower`) applies the result to the log.
"""

from __future__ import annotations

from dataclasses import dataclass

from yak.tiered.metadata import ManifestStore, RemoteLogSegmentMetadata, partition_dir
from yak.tiered.reader import RemoteCorruptionError, RemoteSegmentReader
from yak.tiered.remote_metadata import RemoteLogMetadata

__all__ = ["RemoteAuxState", "parse_epoch_checkpoint", "remote_aux_state"]


@dataclass(frozen=True)
class RemoteAuxState:
    """Where the follower's local log starts (`next_offset`: the segment's end + 1), the
    leader epochs in that segment (epoch, first offset), and the producer snapshot taken
    at `next_offset` (Yak's snapshot file bytes; None if the segment was uploaded without
    one)."""

    next_offset: int
    epochs: list[tuple[int, int]]
    producer_snapshot: bytes | None
    segment: RemoteLogSegmentMetadata

    def epoch_before(self) -> int:
        """The leader epoch of the record at `next_offset - 1` (-1 if none is known)."""
        epoch = -1
        for e, start in self.epochs:
            if start < self.next_offset:
                epoch = e
        return epoch


def parse_epoch_checkpoint(data: bytes) -> list[tuple[int, int]]:
    """Kafka's leader-epoch checkpoint text (`0`, a count, then `epoch offset` lines), as
    `yak.tiered.segments` uploads it. ValueError if it is not that."""
    lines = data.decode("ascii").split("\n")
    if len(lines) < 2 or lines[0].strip() != "0":
        raise ValueError("not a version-0 leader-epoch checkpoint")
    count = int(lines[1])
    out = []
    for line in lines[2:2 + count]:
        e, o = line.split()
        out.append((int(e), int(o)))
    if len(out) != count:
        raise ValueError(f"leader-epoch checkpoint names {count} entries, holds {len(out)}")
    return out


async def remote_aux_state(manifests: RemoteLogMetadata | ManifestStore,
                           reader: RemoteSegmentReader, topic: str, topic_id: str, partition: int,
                           leader_local_start: int) -> RemoteAuxState | None:
    """From the committed metadata (the metadata store's, else the bucket's newest
    manifest): the remote segment holding `leader_local_start - 1` and
    its producer snapshot and leader epochs. None if no remote segment holds that offset
    (nothing to restore: the follower starts empty at the leader's local start)."""
    if leader_local_start <= 0:
        return None
    m = await manifests.load(topic, topic_id, partition)
    seg = m.find(leader_local_start - 1)
    if seg is None:
        return None
    d = partition_dir(topic, topic_id, partition)
    epochs = list(seg.leader_epochs)
    if "leader-epoch-checkpoint" in seg.files:
        data = await reader.small_object(seg, d, "leader-epoch-checkpoint")
        try:
            epochs = parse_epoch_checkpoint(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise RemoteCorruptionError(
                f"{seg.object_key(d, 'leader-epoch-checkpoint')}: {e}") from e
    snapshot = None
    if "snapshot" in seg.files:
        snapshot = await reader.small_object(seg, d, "snapshot")
    return RemoteAuxState(seg.end_offset + 1, epochs, snapshot, seg)
