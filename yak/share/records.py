"""The records of `__share_group_state` (KIP-932's share coordinator): ShareSnapshot and
ShareUpdate, in Kafka's shapes, and the pure merge of state batches.

A share partition's durable state is keyed by (group, topic id, partition), Kafka's
`SharePartitionKey`. Two record types share that key, told apart by the key's version
as Kafka does (ShareSnapshotKey is version 0, ShareUpdateKey version 1):

- ShareSnapshot: the whole state: snapshot epoch, state epoch, leader epoch, start offset
  and the state batches from the start offset on;
- ShareUpdate: a change on top of the last snapshot: the new start offset and the state
  batches that changed (later batches overlay earlier ones).

A state batch is (first offset, last offset, delivery state, delivery count), with
Kafka's delivery states: 0 available (not done: a record acquired or released, its
delivery count kept), 2 acknowledged, 4 archived. Offsets from the start offset up to
the last batch that no batch covers are done (acknowledged or archived); above the last
batch the log has not been handed out yet.

Field order and types are Kafka's; the encoding is classic (fixed-width integers, an
int16-length string, an int32 array count), not Kafka's flexible one, so another
Kafka's tools cannot read these bytes (docs/share-groups.md says so).
"""

from __future__ import annotations

import base64
import functools
import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "ARCHIVED",
    "ACKNOWLEDGED",
    "AVAILABLE",
    "SHARE_STATE_TOPIC",
    "ShareKey",
    "ShareState",
    "StateBatch",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_snapshot",
    "encode_update",
    "overlay",
    "partition_for",
]

SHARE_STATE_TOPIC = "__share_group_state"
SNAPSHOT = 0  # ShareSnapshotKey's version
UPDATE = 1  # ShareUpdateKey's version

AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4

StateBatch = tuple[int, int, int, int]
"""(first offset, last offset, delivery state, delivery count)."""

_BATCH = struct.Struct(">qqbh")
_SNAP_HEAD = struct.Struct(">hiiiqi")  # version, snapshot/state/leader epoch, start, count
_UPD_HEAD = struct.Struct(">hiiqi")  # version, snapshot/leader epoch, start, count


@dataclass(frozen=True, slots=True)
class ShareKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """Kafka's `SharePartitionKey.asCoordinatorKey`: group:topicId:partition, the id in
        Kafka's own Uuid string form (URL-safe base64, no padding)."""
        tid = base64.urlsafe_b64encode(self.topic_id.bytes).rstrip(b"=").decode()
        return f"{self.group_id}:{tid}:{self.partition}"


@dataclass(slots=True)
class ShareState:
    """A share partition's state as the coordinator holds it (the last snapshot with the
    updates since applied). `updates` counts the ShareUpdates since that snapshot."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: list[StateBatch]
    snapshot_epoch: int = 0
    updates: int = 0


def partition_for(key: ShareKey, num_partitions: int) -> int:
    """Kafka's `Utils.abs(key.asCoordinatorKey().hashCode()) % partitions`."""
    return _key_hash(key) % num_partitions


@functools.lru_cache(maxsize=8192)
def _key_hash(key: ShareKey) -> int:
    """abs(Java's String.hashCode) of the coordinator key, computed once per key: it is a
    loop per character in Python, and every state write of a share partition asks for
    its key's partition (0.05 s of a 200,000-record share run's profile before)."""
    h = 0
    data = key.coordinator_key().encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return 0 if h == -(1 << 31) else abs(h)


def encode_key(version: int, key: ShareKey) -> bytes:
    group = key.group_id.encode()
    return (struct.pack(">hh", version, len(group)) + group + key.topic_id.bytes
            + struct.pack(">i", key.partition))


def decode_key(data: bytes) -> tuple[int, ShareKey]:
    """(key version, key); ValueError for bytes that are not a share state key."""
    if len(data) < 4:
        raise ValueError("share state key too short")
    version, n = struct.unpack_from(">hh", data)
    if version not in (SNAPSHOT, UPDATE) or n < 0 or len(data) != 4 + n + 16 + 4:
        raise ValueError(f"not a share state key (version {version})")
    group = data[4:4 + n].decode()
    tid = uuid.UUID(bytes=bytes(data[4 + n:4 + n + 16]))
    (partition,) = struct.unpack_from(">i", data, 4 + n + 16)
    return version, ShareKey(group, tid, partition)


def _batches(out: list[bytes], batches: Sequence[StateBatch]) -> bytes:
    out.extend(_BATCH.pack(*b) for b in batches)
    return b"".join(out)


def encode_snapshot(state: ShareState) -> bytes:
    return _batches([_SNAP_HEAD.pack(0, state.snapshot_epoch, state.state_epoch,
                                     state.leader_epoch, state.start_offset,
                                     len(state.batches))], state.batches)


def encode_update(snapshot_epoch: int, leader_epoch: int, start_offset: int,
                  batches: Sequence[StateBatch]) -> bytes:
    return _batches([_UPD_HEAD.pack(0, snapshot_epoch, leader_epoch, start_offset,
                                    len(batches))], batches)


def decode_value(version: int, data: bytes) -> ShareState:
    """A snapshot as its state; an update as a ShareState whose `state_epoch` is -1 (the
    update carries none) and whose batches are the change."""
    if version == SNAPSHOT:
        _v, snap, state_epoch, leader, start, n = _SNAP_HEAD.unpack_from(data)
        pos = _SNAP_HEAD.size
    else:
        _v, snap, leader, start, n = _UPD_HEAD.unpack_from(data)
        state_epoch = -1
        pos = _UPD_HEAD.size
    if n < 0 or len(data) != pos + n * _BATCH.size:
        raise ValueError("share state value length does not match its batch count")
    batches = [_BATCH.unpack_from(data, pos + i * _BATCH.size) for i in range(n)]
    return ShareState(state_epoch, leader, start, batches, snap)


def overlay(base: Sequence[StateBatch], changes: Iterable[StateBatch],
            start_offset: int) -> list[StateBatch]:
    """`base` (sorted, disjoint) with `changes` laid over it in order (a later batch wins
    where they overlap), clipped to offsets from `start_offset` on, adjacent batches with
    the same state and count joined. Per batch, never per offset."""
    out = list(base)
    for first, last, state, count in changes:
        nxt: list[StateBatch] = []
        placed = False
        for b in out:
            if b[1] < first:
                nxt.append(b)
                continue
            if b[0] > last:
                if not placed:
                    nxt.append((first, last, state, count))
                    placed = True
                nxt.append(b)
                continue
            if b[0] < first:
                nxt.append((b[0], first - 1, b[2], b[3]))
            if not placed:
                nxt.append((first, last, state, count))
                placed = True
            if b[1] > last:
                nxt.append((last + 1, b[1], b[2], b[3]))
        if not placed:
            nxt.append((first, last, state, count))
        out = nxt
    clipped: list[StateBatch] = []
    for first, last, state, count in out:
        if last < start_offset:
            continue
        first = max(first, start_offset)
        if clipped:
            p = clipped[-1]
            if p[1] + 1 == first and p[2] == state and p[3] == count:
                clipped[-1] = (p[0], last, state, count)
                continue
        clipped.append((first, last, state, count))
    return clipped
