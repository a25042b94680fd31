"""Kafka's record formats for `__consumer_offsets`, and its group-to-partition hash.

Yak writes exactly what Kafka writes (OffsetCommitKey v1 / OffsetCommitValue v3,
GroupMetadataKey v2 / GroupMetadataValue v3) so Kafka's own tooling, e.g.
`kafka-console-consumer --formatter OffsetsMessageFormatter`, could read a Yak log,
and so a group's partition is the one Kafka would pick for it. These are the
non-flexible versions: plain big-endian fields with int16-length strings, which is
also why a group id must fit in 32767 bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

__all__ = [
    "OffsetKey",
    "GroupKey",
    "OffsetValue",
    "MemberValue",
    "GroupValue",
    "encode_offset_key",
    "encode_offset_value",
    "encode_group_key",
    "encode_group_value",
    "decode_key",
    "decode_offset_value",
    "decode_group_value",
    "java_string_hash",
    "partition_for",
    "MAX_STRING_BYTES",
    "OFFSETS_TOPIC",
    "offsets_topic_configs",
]

MAX_STRING_BYTES = 32767
OFFSETS_TOPIC = "__consumer_offsets"


def offsets_topic_configs(segment_bytes: int) -> dict[str, str]:
    """Kafka's configs for `__consumer_offsets` (`offsets.topic.segment.bytes`)."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "segment.bytes": str(segment_bytes),
    }

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # only v1 carried one; kept so old records load


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...] = field(default=())


# ---------------------------------------------------------------- writing


def _str(s: str) -> bytes:
    b = s.encode()
    if len(b) > MAX_STRING_BYTES:
        raise ValueError(f"string of {len(b)} bytes does not fit an int16 length")
    return _I16.pack(len(b)) + b


def _nstr(s: str | None) -> bytes:
    return _I16.pack(-1) if s is None else _str(s)


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(1) + _str(group) + _str(topic) + _I32.pack(partition)


def encode_offset_value(v: OffsetValue) -> bytes:
    return pack_offset_value(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)


_OFFSET_HEAD = struct.Struct(">hqi")


def pack_offset_value(
    offset: int, leader_epoch: int, metadata: str, commit_timestamp: int
) -> bytes:
    """OffsetCommitValue v3 without building an `OffsetValue` (the commit hot path)."""
    return _OFFSET_HEAD.pack(3, offset, leader_epoch) + _str(metadata) + _I64.pack(commit_timestamp)


def encode_group_key(group: str) -> bytes:
    return _I16.pack(2) + _str(group)


def encode_group_value(v: GroupValue) -> bytes:
    parts = [
        _I16.pack(3),
        _str(v.protocol_type),
        _I32.pack(v.generation),
        _nstr(v.protocol),
        _nstr(v.leader),
        _I64.pack(v.current_state_timestamp),
        _I32.pack(len(v.members)),
    ]
    for m in v.members:
        parts += [
            _str(m.member_id),
            _nstr(m.group_instance_id),
            _str(m.client_id),
            _str(m.client_host),
            _I32.pack(m.rebalance_timeout),
            _I32.pack(m.session_timeout),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


# ---------------------------------------------------------------- reading


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def i16(self) -> int:
        (v,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return v

    def i32(self) -> int:
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def i64(self) -> int:
        (v,) = _I64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def nstr(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        end = self.pos + n
        if end > len(self.buf):
            raise ValueError("string overruns the record")
        s = bytes(self.buf[self.pos : end]).decode()
        self.pos = end
        return s

    def str(self) -> str:
        s = self.nstr()
        if s is None:
            raise ValueError("null where a string is required")
        return s

    def bytes(self) -> bytes:
        n = self.i32()
        if n < 0:
            return b""
        end = self.pos + n
        if end > len(self.buf):
            raise ValueError("bytes overrun the record")
        b = bytes(self.buf[self.pos : end])
        self.pos = end
        return b


def is_share_group_key(buf: bytes) -> bool:
    """A share group's record (KIP-932: key versions 10-15), kept for the share layer
    (yak/share/group_records.py reads them)."""
    return len(buf) >= 2 and 10 <= int.from_bytes(buf[:2], "big", signed=True) <= 15


def decode_key(buf: bytes) -> OffsetKey | GroupKey | None:
    """None for key versions Yak does not know (Kafka skips those too)."""
    r = _Reader(buf)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.str(), r.str(), r.i32())
    if version == 2:
        return GroupKey(r.str())
    return None


def decode_offset_value(buf: bytes) -> OffsetValue:
    r = _Reader(buf)
    version = r.i16()
    if version == 0:
        offset, metadata, ts = r.i64(), r.str(), r.i64()
        return OffsetValue(offset, -1, metadata, ts)
    if version == 1:
        offset, metadata, ts, expire = r.i64(), r.str(), r.i64(), r.i64()
        return OffsetValue(offset, -1, metadata, ts, expire)
    if version == 2:
        offset, metadata, ts = r.i64(), r.str(), r.i64()
        return OffsetValue(offset, -1, metadata, ts)
    if version == 3:
        offset, epoch, metadata, ts = r.i64(), r.i32(), r.str(), r.i64()
        return OffsetValue(offset, epoch, metadata, ts)
    raise ValueError(f"unknown OffsetCommitValue version {version}")


def decode_group_value(buf: bytes) -> GroupValue:
    r = _Reader(buf)
    version = r.i16()
    if not 0 <= version <= 3:
        raise ValueError(f"unknown GroupMetadataValue version {version}")
    protocol_type = r.str()
    generation = r.i32()
    protocol = r.nstr()
    leader = r.nstr()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.str()
        instance_id = r.nstr() if version >= 3 else None
        client_id = r.str()
        client_host = r.str()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(
            MemberValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                r.bytes(),
                r.bytes(),
            )
        )
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


# ---------------------------------------------------------------- partitioning


def java_string_hash(s: str) -> int:
    """Java's `String.hashCode()` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(groupId.hashCode) % numPartitions` (abs(MIN_VALUE) is 0 there)."""
    h = java_string_hash(group_id)
    h = 0 if h == -(1 << 31) else abs(h)
    return h % num_partitions
