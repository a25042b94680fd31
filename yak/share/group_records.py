"""A share group's membership as records of `__consumer_offsets` (KIP-932), in Kafka's shapes.

Kafka's group coordinator keeps a share group's hard state in the group's
`__consumer_offsets` partition, so a coordinator that takes the partition over (a restart,
a failover) rebuilds it by replaying the partition. Yak writes three of Kafka's record
types, told apart by the key's version as Kafka does:

- ShareGroupMemberMetadata (key version 10, group + member): rack, client id, client host,
  the subscribed topic names;
- ShareGroupMetadata (key version 11, group): the group epoch (and Kafka 4.1's metadata
  hash, written as 0: Yak does not compare topic metadata by hash);
- ShareGroupCurrentMemberAssignment (key version 14, group + member): member epoch,
  previous member epoch, member state (0, STABLE: a share member never revokes) and the
  assigned partitions by topic id.

A tombstone (no value) of a key deletes it. Kafka's target-assignment records (key
versions 12 and 13) are not written: Yak's assignor is a pure function of the members'
subscriptions and the topics (every member gets every partition), so a new coordinator
computes the same target; ShareGroupStatePartitionMetadata (15, which share partitions
were initialized) is not written either (docs/share-groups.md). Keys are Kafka's
non-flexible encoding (int16 version, int16-length strings); values are Kafka's flexible
version 0 (int16 version, compact strings and arrays, empty tagged fields), so Kafka's
own tools read them.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from yak.protocol.primitives import read_uvarint, write_uvarint

__all__ = [
    "CURRENT_ASSIGNMENT",
    "GROUP_METADATA",
    "MEMBER_METADATA",
    "SHARE_KEY_VERSIONS",
    "CurrentAssignment",
    "MemberMetadata",
    "ShareGroupKey",
    "decode_current_assignment",
    "decode_group_epoch",
    "decode_key",
    "decode_member_metadata",
    "encode_current_assignment",
    "encode_group_epoch",
    "encode_key",
    "encode_member_metadata",
]

MEMBER_METADATA = 10
GROUP_METADATA = 11
CURRENT_ASSIGNMENT = 14
# every key version Kafka gives share-group records (10-15): a replay keeps these for
# the share groups and skips the ones it does not read (12, 13, 15)
SHARE_KEY_VERSIONS = frozenset(range(10, 16))
STABLE = 0  # Kafka's MemberState.STABLE


@dataclass(frozen=True, slots=True)
class ShareGroupKey:
    version: int
    group_id: str
    member_id: str = ""  # "" for the group's own record (version 11)


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int
    partitions: dict[uuid.UUID, tuple[int, ...]]


# ---------------------------------------------------------------- keys

def _str16(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def encode_key(version: int, group_id: str, member_id: str = "") -> bytes:
    out = struct.pack(">h", version) + _str16(group_id)
    return out if version == GROUP_METADATA else out + _str16(member_id)


def decode_key(buf: bytes) -> ShareGroupKey | None:
    """The key of a share-group record; None for any other key version."""
    if len(buf) < 2:
        return None
    version = struct.unpack_from(">h", buf)[0]
    if version not in SHARE_KEY_VERSIONS:
        return None
    pos = 2
    group, pos = _read_str16(buf, pos)
    member = ""
    if version in (MEMBER_METADATA, CURRENT_ASSIGNMENT, 13):
        member, pos = _read_str16(buf, pos)
    return ShareGroupKey(version, group, member)


def _read_str16(buf: bytes, pos: int) -> tuple[str, int]:
    if pos + 2 > len(buf):
        raise ValueError("truncated share-group key")
    n = struct.unpack_from(">h", buf, pos)[0]
    if n < 0 or pos + 2 + n > len(buf):
        raise ValueError("bad string length in a share-group key")
    return buf[pos + 2:pos + 2 + n].decode(), pos + 2 + n


# ---------------------------------------------------------------- flexible values

def _compact_str(out: bytearray, s: str | None) -> None:
    if s is None:
        out.append(0)
        return
    b = s.encode()
    write_uvarint(out, len(b) + 1)
    out += b


class _Reader:
    """Kafka's flexible encoding, version 0 of a coordinator value."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 2
        if len(buf) < 2:
            raise ValueError("truncated share-group value")

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise ValueError("truncated share-group value")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def i8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def uvarint(self) -> int:
        n, self.pos = read_uvarint(self.buf, self.pos)
        return n

    def compact_str(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1).decode()

    def count(self) -> int:
        n = self.uvarint()
        if n == 0:
            raise ValueError("null array in a share-group value")
        return n - 1

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def tags(self) -> None:
        for _ in range(self.uvarint()):  # tagged fields: none read, all skipped
            self.uvarint()
            self._take(self.uvarint())


def encode_member_metadata(m: MemberMetadata) -> bytes:
    out = bytearray(b"\x00\x00")
    _compact_str(out, m.rack_id)
    _compact_str(out, m.client_id)
    _compact_str(out, m.client_host)
    write_uvarint(out, len(m.subscribed) + 1)
    for name in m.subscribed:
        _compact_str(out, name)
    out.append(0)  # no tagged fields
    return bytes(out)


def decode_member_metadata(buf: bytes) -> MemberMetadata:
    r = _Reader(buf)
    rack = r.compact_str()
    client_id = r.compact_str() or ""
    client_host = r.compact_str() or ""
    subscribed = tuple(r.compact_str() or "" for _ in range(r.count()))
    r.tags()
    return MemberMetadata(rack, client_id, client_host, subscribed)


def encode_group_epoch(epoch: int) -> bytes:
    return struct.pack(">hiq", 0, epoch, 0) + b"\x00"


def decode_group_epoch(buf: bytes) -> int:
    """The epoch (the metadata hash after it, if any, is not read)."""
    return _Reader(buf).i32()


def encode_current_assignment(a: CurrentAssignment) -> bytes:
    out = bytearray(struct.pack(">hiib", 0, a.member_epoch, a.previous_member_epoch, a.state))
    write_uvarint(out, len(a.partitions) + 1)
    for tid, parts in sorted(a.partitions.items(), key=lambda kv: str(kv[0])):
        out += tid.bytes
        write_uvarint(out, len(parts) + 1)
        for p in parts:
            out += struct.pack(">i", p)
        out.append(0)
    out.append(0)
    return bytes(out)


def decode_current_assignment(buf: bytes) -> CurrentAssignment:
    r = _Reader(buf)
    epoch, previous, state = r.i32(), r.i32(), r.i8()
    parts: dict[uuid.UUID, tuple[int, ...]] = {}
    for _ in range(r.count()):
        tid = r.uuid()
        parts[tid] = tuple(r.i32() for _ in range(r.count()))
        r.tags()
    r.tags()
    return CurrentAssignment(epoch, previous, state, parts)

