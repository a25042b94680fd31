"""Hand-written Fetch response encoder (v4-v18): a list of buffers for `writelines`; and
the request decoder (`decode_fetch_request`, v4-v18, at the end of this module).

A Fetch response is mostly record data read from segment files. kio would copy every
partition's records into one `bytes` before the socket copies them again; here the
small framing fields are packed with `struct` into short `bytearray`s and the record
buffers from storage are placed in the output list as they are, so the only copy is
the kernel's. Compared byte for byte with kio's encoder in
tests/protocol/test_fetch_codec.py for every version and every field combination.

A partition's records are never encoded as null: Kafka answers an error partition
(OFFSET_OUT_OF_RANGE, NOT_LEADER_OR_FOLLOWER, ...) with empty records, and librdkafka
refuses a null record set ("invalid MessageSetSize -1") without ever looking at the
error code, so a consumer whose offset fell out of range never reset it.

v12+ tagged fields follow Kafka: a partition's `diverging_epoch` (tag 0),
`current_leader` (tag 1) and `snapshot_id` (tag 2), and the response's
`node_endpoints` (tag 0, v16+), each written only when set to something other than
Kafka's default.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from yak.protocol.primitives import (
    read_array_len,
    read_string,
    read_tagged_fields,
    skip_tagged_fields,
    write_length,
    write_string,
    write_uvarint,
)

__all__ = ["FetchPartitionResult", "FetchTopicResult", "EpochEndOffset", "LeaderIdAndEpoch",
           "SnapshotId", "NodeEndpoint", "encode_fetch_response", "MIN_VERSION",
           "MAX_VERSION", "FetchRequestData", "FetchRequestError", "decode_fetch_request"]

MIN_VERSION = 4
MAX_VERSION = 18
FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13
FIRST_NODE_ENDPOINTS = 16

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_TOP = struct.Struct(">ihi")  # throttle, error, session id (v7+)
_PART_V4 = struct.Struct(">ihqq")  # index, error, hw, lso
_PART_V5 = struct.Struct(">ihqqq")  # + log start offset
# v12+ with a null aborted list (compact: 0) and the preferred read replica.
_PART_FLEX_NULL = struct.Struct(">ihqqqBi")
_I32_I32 = struct.Struct(">ii")  # preferred read replica, records size (v11)
_NULL_ARRAY = b"\xff\xff\xff\xff"
_ABORTED = struct.Struct(">qq")
_ABORTED_FLEX = struct.Struct(">qqB")  # + empty tagged fields
# Tagged structs as (tag, size) prefix + fields + their own empty tagged-field section.
_DIVERGING = struct.Struct(">BBiqB")  # tag 0, 13 bytes: epoch, end offset
_LEADER = struct.Struct(">BBiiB")  # tag 1, 9 bytes: leader id, leader epoch
_SNAPSHOT = struct.Struct(">BBqiB")  # tag 2, 13 bytes: end offset, epoch
_NO_ID = uuid.UUID(int=0)


class EpochEndOffset(NamedTuple):
    """The largest epoch and its end offset where a follower's log diverges (KIP-595)."""

    epoch: int
    end_offset: int


class LeaderIdAndEpoch(NamedTuple):
    """The partition's current leader, sent with NOT_LEADER_OR_FOLLOWER and
    FENCED_LEADER_EPOCH so a client need not refresh metadata first (KIP-951)."""

    leader_id: int
    leader_epoch: int


class SnapshotId(NamedTuple):
    end_offset: int
    epoch: int


class NodeEndpoint(NamedTuple):
    """A broker named by a `current_leader` (v16+ top-level tagged field)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class FetchPartitionResult:
    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None
    """None is null (read_uncommitted), a list (even empty) is read_committed's answer."""
    preferred_read_replica: int = -1
    records: Sequence[Any] | None = ()
    """Buffers whose concatenation is the partition's record batches. Empty for an error
    partition; None is accepted and also sent as empty (see the module docstring)."""
    records_size: int = 0
    """Total bytes in `records` (0 when they are empty or None)."""
    diverging_epoch: EpochEndOffset | None = None
    current_leader: LeaderIdAndEpoch | None = None
    snapshot_id: SnapshotId | None = None


@dataclass(slots=True)
class FetchTopicResult:
    name: str
    topic_id: uuid.UUID = _NO_ID
    partitions: list[FetchPartitionResult] = field(default_factory=list)


def encode_fetch_response(
    version: int,
    topics: Sequence[FetchTopicResult],
    throttle_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> tuple[list[Any], int]:
    """Body of a Fetch response (no size or response header): (buffers, total size).

    The flexible versions (what librdkafka and the Java client send) are encoded here,
    the classic ones by `_encode_classic`. One-byte compact lengths are written inline
    (`append(n + 1)` below 127), longer ones by `write_uvarint`: on this path a function
    call per length costs a tenth of the encoder's time."""
    if version < FIRST_FLEXIBLE:
        if version < MIN_VERSION:
            raise ValueError(f"unsupported Fetch version {version}")
        return _encode_classic(version, topics, throttle_ms, error_code, session_id)
    if version > MAX_VERSION:
        raise ValueError(f"unsupported Fetch version {version}")
    by_id = version >= FIRST_TOPIC_ID
    out: list[Any] = []
    size = 0
    head = bytearray(_TOP.pack(throttle_ms, error_code, session_id))
    write_uvarint(head, len(topics) + 1)
    for t in topics:
        if by_id:
            head += t.topic_id.bytes
        else:
            write_string(head, t.name, True)
        parts = t.partitions
        n = len(parts)
        if n < 0x7F:
            head.append(n + 1)
        else:
            write_uvarint(head, n + 1)
        for p in parts:
            aborted = p.aborted_transactions
            if aborted is None:  # read_uncommitted (every follower): one pack
                head += _PART_FLEX_NULL.pack(p.partition_index, p.error_code, p.high_watermark,
                                             p.last_stable_offset, p.log_start_offset, 0,
                                             p.preferred_read_replica)
            else:
                head += _PART_V5.pack(p.partition_index, p.error_code, p.high_watermark,
                                      p.last_stable_offset, p.log_start_offset)
                write_uvarint(head, len(aborted) + 1)
                for pid, first in aborted:
                    head += _ABORTED_FLEX.pack(pid, first, 0)
                head += _I32.pack(p.preferred_read_replica)
            records_size = p.records_size
            if records_size:
                n = records_size + 1  # the compact length, as an unsigned varint, inline
                while n > 0x7F:
                    head.append((n & 0x7F) | 0x80)
                    n >>= 7
                head.append(n)
                out.append(head)
                size += len(head) + records_size
                out.extend(p.records)  # type: ignore[arg-type]
                head = bytearray()
            else:
                head.append(1)  # empty, never null (see the module docstring)
            if p.diverging_epoch is None and p.current_leader is None \
                    and p.snapshot_id is None:
                head.append(0)  # partition tagged fields
            else:
                _partition_tags(head, p)
        head.append(0)  # topic tagged fields
    if node_endpoints and version >= FIRST_NODE_ENDPOINTS:
        _node_endpoints(head, node_endpoints)
    else:
        head.append(0)  # top-level tagged fields
    out.append(head)
    return out, size + len(head)


def _encode_classic(
    version: int, topics: Sequence[FetchTopicResult], throttle_ms: int, error_code: int,
    session_id: int,
) -> tuple[list[Any], int]:
    out: list[Any] = []
    size = 0
    if version >= 7:
        head = bytearray(_TOP.pack(throttle_ms, error_code, session_id))
    else:
        head = bytearray(_I32.pack(throttle_ms))
    head += _I32.pack(len(topics))
    part = _PART_V5 if version >= 5 else _PART_V4
    for t in topics:
        name = t.name.encode()
        head += _I16.pack(len(name))
        head += name
        parts = t.partitions
        head += _I32.pack(len(parts))
        for p in parts:
            if version >= 5:
                head += part.pack(p.partition_index, p.error_code, p.high_watermark,
                                  p.last_stable_offset, p.log_start_offset)
            else:
                head += part.pack(p.partition_index, p.error_code, p.high_watermark,
                                  p.last_stable_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                head += _NULL_ARRAY
            else:
                head += _I32.pack(len(aborted))
                for pid, first in aborted:
                    head += _ABORTED.pack(pid, first)
            records_size = p.records_size
            if version >= 11:
                head += _I32_I32.pack(p.preferred_read_replica, records_size)
            else:
                head += _I32.pack(records_size)  # empty, never null
            if records_size:
                out.append(head)
                size += len(head) + records_size
                out.extend(p.records)  # type: ignore[arg-type]
                head = bytearray()
    out.append(head)
    return out, size + len(head)


def _partition_tags(head: bytearray, p: FetchPartitionResult) -> None:
    """Only fields that differ from Kafka's default (-1, -1) are written, as Kafka does."""
    tags = []
    d = p.diverging_epoch
    if d is not None and d != (-1, -1):
        tags.append(_DIVERGING.pack(0, 13, d.epoch, d.end_offset, 0))
    c = p.current_leader
    if c is not None and c != (-1, -1):
        tags.append(_LEADER.pack(1, 9, c.leader_id, c.leader_epoch, 0))
    s = p.snapshot_id
    if s is not None and s != (-1, -1):
        tags.append(_SNAPSHOT.pack(2, 13, s.end_offset, s.epoch, 0))
    head.append(len(tags))
    for t in tags:
        head += t


def _node_endpoints(head: bytearray, endpoints: Sequence[NodeEndpoint]) -> None:
    value = bytearray()
    write_length(value, len(endpoints), True)
    for e in endpoints:
        value += _I32.pack(e.node_id)
        write_string(value, e.host, True)
        value += _I32.pack(e.port)
        write_string(value, e.rack, True)
        value.append(0)
    head.append(1)  # one tagged field: node_endpoints, tag 0
    head.append(0)
    write_uvarint(head, len(value))
    head += value


# ---------------------------------------------------------------- request decoding

# Fetch requests come from every consumer and, in a cluster, from every follower once per
# round trip, so they are decoded here by hand like Produce's (kio's generic reader plus the
# guard walk cost ~12 us per request, this a few). Every count is bounded by the bytes left
# (`primitives.read_array_len`), so a hostile request fails here instead of in an
# allocation, as the guard ensures for kio-decoded requests.

_REQ_TOP_V4 = struct.Struct(">iiiib")  # replica id, max wait, min bytes, max bytes, isolation
_REQ_TOP_V15 = struct.Struct(">iiib")  # v15+: the replica id moved to replica_state
_SESSION = struct.Struct(">ii")
_I64 = struct.Struct(">q")
_REPLICA_STATE = struct.Struct(">iq")
# A partition's fixed fields by version: partition, [current leader epoch (v9+)],
# fetch offset, [last fetched epoch (v12+)], [log start offset (v5+)], partition max bytes.
_REQ_PART_V12 = struct.Struct(">iiqiqi")
_REQ_PART_V9 = struct.Struct(">iiqqi")
_REQ_PART_V5 = struct.Struct(">iqqi")
_REQ_PART_V4 = struct.Struct(">iqi")


class FetchRequestError(ValueError):
    """A Fetch request that does not parse: the connection is closed, never answered."""


@dataclass(slots=True)
class FetchRequestPartitionData:
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


@dataclass(slots=True)
class FetchRequestTopicData:
    topic: str | None
    topic_id: uuid.UUID | None
    partitions: list[FetchRequestPartitionData]


@dataclass(slots=True)
class FetchRequestData:
    """What the Fetch handler reads of a request (the fields of kio's FetchRequest it
    uses, with `max_wait` in milliseconds)."""

    replica_id: int
    replica_epoch: int
    max_wait: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchRequestTopicData]
    forgotten: list[tuple[str | None, uuid.UUID | None, list[int]]]
    rack_id: str


# A follower's usual request, v15-16: one topic (by id) of one partition, no forgotten
# topics, no rack, and the request's one tagged field, replica_state. Read by one unpack;
# the bytes the general reader would check are compared here (see `_follower_request`).
_FOLLOWER_ONE = struct.Struct(">iiibiiB16sBiiqiqiBBBBBBBiqB")


def decode_fetch_request(version: int, body: memoryview) -> FetchRequestData:
    """A Fetch request body (after the request header), versions MIN_VERSION-MAX_VERSION."""
    if len(body) == _FOLLOWER_ONE.size and 15 <= version <= 16:
        request = _follower_request(body)
        if request is not None:
            return request
    return _decode_fetch_request(version, body)


def _decode_fetch_request(version: int, body: memoryview) -> FetchRequestData:
    """`decode_fetch_request`'s general reader: every version and shape."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise FetchRequestError(f"unsupported Fetch version {version}")
    err = FetchRequestError
    flex = version >= FIRST_FLEXIBLE
    by_id = version >= FIRST_TOPIC_ID
    end = len(body)
    try:
        if version >= 15:
            max_wait, min_bytes, max_bytes, isolation = _REQ_TOP_V15.unpack_from(body, 0)
            replica_id = -1
            pos = _REQ_TOP_V15.size
        else:
            replica_id, max_wait, min_bytes, max_bytes, isolation = \
                _REQ_TOP_V4.unpack_from(body, 0)
            pos = _REQ_TOP_V4.size
        session_id, session_epoch = 0, -1
        if version >= 7:
            session_id, session_epoch = _SESSION.unpack_from(body, pos)
            pos += 8
        # A topic takes at least its name/id and a partition count; a partition 16+ bytes.
        n_topics, pos = read_array_len(body, pos, end, flex, 2, err)
        topics: list[FetchRequestTopicData] = []
        part_min = 16 + (4 if version >= 9 else 0) + (4 if version >= 12 else 0) \
            + (8 if version >= 5 else 0)
        for _ in range(n_topics):
            name = None
            tid = None
            if by_id:
                if end - pos < 16:
                    raise err("truncated topic id")
                tid = _uuid_or_none(body, pos)
                pos += 16
            else:
                name, pos = read_string(body, pos, end, flex, err, nullable=False)
            n_parts, pos = read_array_len(body, pos, end, flex, part_min, err)
            parts = []
            for _ in range(n_parts):
                # One unpack per partition (the version's fixed fields), not one per field.
                if version >= 12:
                    partition, leader_epoch, fetch_offset, last_epoch, log_start, max_part = \
                        _REQ_PART_V12.unpack_from(body, pos)
                    pos += _REQ_PART_V12.size
                    # Tagged fields: almost always none (one zero byte).
                    if pos < end and body[pos] == 0:
                        pos += 1
                    else:
                        pos = skip_tagged_fields(body, pos, end, err)
                else:
                    last_epoch = -1
                    if version >= 9:
                        partition, leader_epoch, fetch_offset, log_start, max_part = \
                            _REQ_PART_V9.unpack_from(body, pos)
                        pos += _REQ_PART_V9.size
                    elif version >= 5:
                        leader_epoch = -1
                        partition, fetch_offset, log_start, max_part = \
                            _REQ_PART_V5.unpack_from(body, pos)
                        pos += _REQ_PART_V5.size
                    else:
                        leader_epoch = log_start = -1
                        partition, fetch_offset, max_part = _REQ_PART_V4.unpack_from(body, pos)
                        pos += _REQ_PART_V4.size
                parts.append(FetchRequestPartitionData(partition, fetch_offset, max_part,
                                                       leader_epoch, last_epoch, log_start))
            if flex:
                if pos < end and body[pos] == 0:
                    pos += 1
                else:
                    pos = skip_tagged_fields(body, pos, end, err)
            topics.append(FetchRequestTopicData(name, tid, parts))
        forgotten: list[tuple[str | None, uuid.UUID | None, list[int]]] = []
        if version >= 7:
            n_forgotten, pos = read_array_len(body, pos, end, flex, 2, err)
            for _ in range(n_forgotten):
                fname = None
                fid = None
                if by_id:
                    if end - pos < 16:
                        raise err("truncated topic id")
                    fid = _uuid_or_none(body, pos)
                    pos += 16
                else:
                    fname, pos = read_string(body, pos, end, flex, err, nullable=False)
                n, pos = read_array_len(body, pos, end, flex, 4, err)
                fparts = [_I32.unpack_from(body, pos + 4 * i)[0] for i in range(n)]
                pos += 4 * n
                if flex:
                    pos = skip_tagged_fields(body, pos, end, err)
                forgotten.append((fname, fid, fparts))
        rack = ""
        if version >= 11:
            rack_s, pos = read_string(body, pos, end, flex, err, nullable=False)
            rack = rack_s or ""
        replica_epoch = -1
        if flex and version >= 15 and end - pos == 4 + _REPLICA_STATE.size \
                and body[pos] == 1 and body[pos + 1] == 1 \
                and body[pos + 2] == _REPLICA_STATE.size + 1:
            # A follower's request ends with exactly one tagged field, replica_state (tag
            # 1, 13 bytes: replica id, broker epoch, the struct's own empty tagged fields):
            # read in place, without the general reader's dict.
            replica_id, replica_epoch = _REPLICA_STATE.unpack_from(body, pos + 3)
            pos = end
        elif flex:
            tags, pos = read_tagged_fields(body, pos, end, err)
            state = tags.get(1)
            if state is not None and version >= 15:
                if len(state) < _REPLICA_STATE.size:
                    raise err("truncated replica_state")
                replica_id, replica_epoch = _REPLICA_STATE.unpack_from(state, 0)
    except struct.error as e:
        raise err(f"truncated Fetch request: {e}") from None
    if pos != end:
        raise err(f"{end - pos} bytes after the Fetch request")
    return FetchRequestData(replica_id, replica_epoch, max_wait, min_bytes, max_bytes, isolation,
                            session_id, session_epoch, topics, forgotten, rack)


def _follower_request(body: memoryview) -> FetchRequestData | None:
    """A follower's one-partition request (`_FOLLOWER_ONE`'s shape), as the general reader
    decodes it, or None when the bytes are another shape of the same length (the general
    reader decides then). Every count and tag the general reader reads is compared; like
    it, the replica_state struct's own tagged-field byte is not looked at."""
    (max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch, n_topics, raw,
     n_parts, partition, leader_epoch, fetch_offset, last_epoch, log_start, max_part,
     part_tags, topic_tags, n_forgotten, rack, n_tags, tag, tag_size, replica_id,
     replica_epoch, _) = _FOLLOWER_ONE.unpack_from(body, 0)
    if (n_topics != 2 or n_parts != 2 or part_tags or topic_tags or n_forgotten != 1
            or rack != 1 or n_tags != 1 or tag != 1 or tag_size != _REPLICA_STATE.size + 1):
        return None
    return FetchRequestData(
        replica_id, replica_epoch, max_wait, min_bytes, max_bytes, isolation, session_id,
        session_epoch, [FetchRequestTopicData(None, _uuid_from_raw(raw), [
            FetchRequestPartitionData(partition, fetch_offset, max_part, leader_epoch,
                                      last_epoch, log_start)])], [], "")


def _uuid_or_none(buf: memoryview, pos: int) -> uuid.UUID | None:
    """A topic id; the all-zero id is "none", as kio reads it. The same few ids come in
    every request (a follower's fetch names the same topics each round trip), so their
    `UUID` objects (immutable) are kept, not built again: a bounded cache, emptied when
    full, so ids a client makes up cannot grow it."""
    return _uuid_from_raw(bytes(buf[pos:pos + 16]))


def _uuid_from_raw(raw: bytes) -> uuid.UUID | None:
    """`_uuid_or_none` of 16 bytes already taken out."""
    tid = _IDS.get(raw)
    if tid is None:
        if raw == _ZERO_ID:
            return None
        if len(_IDS) >= _IDS_MAX:
            _IDS.clear()
        tid = _IDS[raw] = uuid.UUID(bytes=raw)
    return tid


_ZERO_ID = bytes(16)
_IDS: dict[bytes, uuid.UUID] = {}
_IDS_MAX = 4096
