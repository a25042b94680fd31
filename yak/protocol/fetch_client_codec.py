"""The asking side of Fetch (v12-v16): a follower's request encoder and response decoder.

A follower fetches from its leader in a loop, one request per round trip, so both ends of
that loop are hand-written like the leader's response encoder (`fetch_codec`): the request
is packed with `struct` into one bytearray, and the response's record sets come back as
zero-copy `memoryview` slices of the received frame, which the follower appends to its log
as they are (kio would copy each into a `bytes` first). Both are compared with kio's
codecs in tests/protocol/test_fetch_client_codec.py.

Only the flexible versions are spoken: v12 brought `last_fetched_epoch` and the
`diverging_epoch` answer (the follower's truncation protocol), v13 topic ids, v15 the
replica's broker epoch (KIP-903: `replica_state` instead of `replica_id`).
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from yak.protocol.fetch_codec import (
    EpochEndOffset,
    FetchPartitionResult,
    FetchTopicResult,
    LeaderIdAndEpoch,
    SnapshotId,
)
from yak.protocol.primitives import (
    read_array_len,
    read_bytes,
    read_string,
    read_tagged_fields,
    skip_tagged_fields,
    write_string,
    write_uvarint,
)

__all__ = ["FetchDecodeError", "FetchRequestPartition", "FetchRequestTopic",
           "decode_fetch_response", "encode_fetch_request", "MIN_VERSION", "MAX_VERSION"]

API_KEY = 1
MIN_VERSION = 12
MAX_VERSION = 16
FIRST_TOPIC_ID = 13
FIRST_REPLICA_STATE = 15

_HEAD = struct.Struct(">hhi")  # api key, version, correlation id
_CORRELATION_AT = 8  # after the size, the api key and the version
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_REPLICA_ID = struct.Struct(">i")
_LIMITS = struct.Struct(">iiibii")  # max wait, min bytes, max bytes, isolation, session id/epoch
_PARTITION = struct.Struct(">iiqiqiB")  # + empty tagged fields
_REPLICA_STATE = struct.Struct(">BBBiqB")  # 1 field, tag 1, size 13: id, epoch, no tags
_TOP = struct.Struct(">ihi")
_PART = struct.Struct(">ihqqq")
# The same, then a null aborted list (compact length 0) and the preferred read replica.
_PART_NULL_ABORTED = struct.Struct(">ihqqqBi")
_TOPIC_IDS: dict[bytes, uuid.UUID] = {}  # raw topic id -> its UUID (`_topic_id`)
_TOPIC_IDS_MAX = 4096
_EPOCH_END = struct.Struct(">iq")
_LEADER = struct.Struct(">ii")
_SNAPSHOT = struct.Struct(">qi")
_NO_SESSION_EPOCH = -1  # KIP-227 FINAL_EPOCH with session 0: a full fetch, no session


class FetchDecodeError(ValueError):
    """A Fetch response that does not parse: the connection it came on is closed."""


@dataclass(slots=True)
class FetchRequestPartition:
    partition: int
    fetch_offset: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1
    partition_max_bytes: int = 1 << 20


@dataclass(slots=True)
class FetchRequestTopic:
    topic_id: uuid.UUID
    name: str
    partitions: list[FetchRequestPartition]


def encode_fetch_request(
    version: int, correlation_id: int, client_id: str | None, replica_id: int,
    replica_epoch: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
    topics: Sequence[FetchRequestTopic], isolation_level: int = 0, rack_id: str = "",
) -> bytearray:
    """A complete Fetch request frame (size, header v2, body), ready for the socket."""
    out = bytearray(_request_head(version, client_id, replica_id, max_wait_ms, min_bytes,
                                  max_bytes, isolation_level))
    _I32.pack_into(out, _CORRELATION_AT, correlation_id)
    n = len(topics) + 1
    if n < 0x80:
        out.append(n)
    else:
        write_uvarint(out, n)
    by_id = version >= FIRST_TOPIC_ID
    pack = _PARTITION.pack
    for t in topics:
        if by_id:
            out += t.topic_id.bytes
        else:
            write_string(out, t.name, True)
        parts = t.partitions
        n = len(parts) + 1
        if n < 0x80:
            out.append(n)
        else:
            write_uvarint(out, n)
        for p in parts:
            out += pack(p.partition, p.current_leader_epoch, p.fetch_offset,
                        p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes, 0)
        out.append(0)  # topic tagged fields
    out.append(1)  # forgotten_topics_data: empty
    if rack_id:
        write_string(out, rack_id, True)
    else:
        out.append(1)  # an empty compact string
    if version >= FIRST_REPLICA_STATE and replica_id >= 0:
        out += _REPLICA_STATE.pack(1, 1, 13, replica_id, replica_epoch, 0)
    else:
        out.append(0)
    _I32.pack_into(out, 0, len(out) - 4)
    return out


@functools.lru_cache(maxsize=64)
def _request_head(version: int, client_id: str | None, replica_id: int, max_wait_ms: int,
                  min_bytes: int, max_bytes: int, isolation_level: int) -> bytes:
    """A request's bytes up to its topics, with a zero size and correlation id: the same
    for every fetch of one fetcher, so built once (the caller packs those two in)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not spoken here ({MIN_VERSION}-{MAX_VERSION})")
    out = bytearray(4)
    out += _HEAD.pack(API_KEY, version, 0)
    if client_id is None:
        out += b"\xff\xff"
    else:
        cid = client_id.encode()
        out += _I16.pack(len(cid))
        out += cid
    out.append(0)  # header tagged fields
    if version < FIRST_REPLICA_STATE:
        out += _REPLICA_ID.pack(replica_id)
    out += _LIMITS.pack(max_wait_ms, min_bytes, max_bytes, isolation_level, 0,
                        _NO_SESSION_EPOCH)
    return bytes(out)


@dataclass(slots=True)
class FetchResponse:
    correlation_id: int
    throttle_time_ms: int
    error_code: int
    session_id: int
    topics: list[FetchTopicResult]


def decode_fetch_response(version: int, frame: memoryview) -> FetchResponse:
    """A Fetch response frame without its 4-byte size (header v1, then the body). Each
    partition's records are one zero-copy slice of `frame` in `records` (or empty)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not spoken here ({MIN_VERSION}-{MAX_VERSION})")
    err = FetchDecodeError
    end = len(frame)
    try:
        if end < 4:
            raise err("truncated response header")
        (correlation_id,) = _I32.unpack_from(frame, 0)
        pos = skip_tagged_fields(frame, 4, end, err)
        if end - pos < _TOP.size:
            raise err("truncated Fetch response")
        throttle, error_code, session_id = _TOP.unpack_from(frame, pos)
        pos += _TOP.size
        n_topics, pos = read_array_len(frame, pos, end, True, 2, err)
        by_id = version >= FIRST_TOPIC_ID
        topics: list[FetchTopicResult] = []
        for _ in range(n_topics):
            if by_id:
                if end - pos < 16:
                    raise err("truncated topic id")
                raw = bytes(frame[pos:pos + 16])
                topic_id = _TOPIC_IDS.get(raw)
                if topic_id is None:
                    topic_id = _topic_id(raw)
                t = FetchTopicResult("", topic_id)
                pos += 16
            else:
                name, pos = read_string(frame, pos, end, True, err, nullable=False)
                t = FetchTopicResult(name or "")
            n_parts, pos = read_array_len(frame, pos, end, True, _PART.size, err)
            parts = t.partitions
            for _ in range(n_parts):
                # The common shape read inline (a follower's fetch loop decodes one
                # response per round trip): a null aborted list (read_uncommitted) and
                # the preferred replica in one unpack, one-byte compact lengths, no tags.
                if end - pos < _PART_NULL_ABORTED.size:
                    raise err("truncated partition")
                if frame[pos + _PART.size] == 0:
                    index, code, hw, lso, log_start, _, preferred = \
                        _PART_NULL_ABORTED.unpack_from(frame, pos)
                    pos += _PART_NULL_ABORTED.size
                    aborted = None
                else:
                    index, code, hw, lso, log_start, preferred, aborted, pos = \
                        _partition_aborted(frame, pos, end)
                # The records' compact length (N + 1): up to three bytes (2 MiB) inline.
                n = -1
                if end - pos >= 3:
                    b = frame[pos]
                    if b < 0x80:
                        n, pos = b - 1, pos + 1
                    else:
                        b2 = frame[pos + 1]
                        if b2 < 0x80:
                            n, pos = (b & 0x7F | b2 << 7) - 1, pos + 2
                        elif (b3 := frame[pos + 2]) < 0x80:
                            n, pos = (b & 0x7F | (b2 & 0x7F) << 7 | b3 << 14) - 1, pos + 3
                        else:
                            n = -2  # longer: the general reader
                else:
                    n = -2
                if n >= 0:
                    if n > end - pos:
                        raise err(f"bytes of {n} overrun the {end - pos} left")
                    records = frame[pos:pos + n]
                    pos += n
                elif n == -1:
                    records = None
                else:
                    records, pos = read_bytes(frame, pos, end, True, err)
                p = FetchPartitionResult(index, code, hw, lso, log_start, aborted, preferred)
                if records is not None and len(records):
                    p.records = [records]
                    p.records_size = len(records)
                if pos < end and frame[pos] == 0:
                    pos += 1
                else:
                    tags, pos = read_tagged_fields(frame, pos, end, err)
                    _partition_tags(p, tags)
                parts.append(p)
            if pos < end and frame[pos] == 0:
                pos += 1
            else:
                pos = skip_tagged_fields(frame, pos, end, err)
            topics.append(t)
        pos = skip_tagged_fields(frame, pos, end, err)
    except struct.error as e:
        raise err(f"truncated Fetch response: {e}") from None
    return FetchResponse(correlation_id, throttle, error_code, session_id, topics)


def _topic_id(raw: bytes) -> uuid.UUID:
    """The UUID of a topic id's 16 bytes, kept: a follower's every response names the
    same few topics, and parsing one is a Python-level constructor."""
    topic_id = uuid.UUID(bytes=raw)
    if len(_TOPIC_IDS) >= _TOPIC_IDS_MAX:
        _TOPIC_IDS.clear()
    _TOPIC_IDS[raw] = topic_id
    return topic_id


def _partition_aborted(frame: memoryview, pos: int, end: int
                       ) -> tuple[int, int, int, int, int, int, list[tuple[int, int]] | None,
                                  int]:
    """A partition's fixed fields, aborted transactions and preferred read replica, where
    the aborted list is not null (read_committed) or its length takes more than a byte."""
    err = FetchDecodeError
    index, code, hw, lso, log_start = _PART.unpack_from(frame, pos)
    pos += _PART.size
    n_aborted, pos = read_array_len(frame, pos, end, True, 17, err, nullable=True)
    aborted = None
    if n_aborted >= 0:
        aborted = []
        for _ in range(n_aborted):
            pid, first = struct.unpack_from(">qq", frame, pos)
            pos = skip_tagged_fields(frame, pos + 16, end, err)
            aborted.append((pid, first))
    if end - pos < 4:
        raise err("truncated preferred read replica")
    (preferred,) = _I32.unpack_from(frame, pos)
    return index, code, hw, lso, log_start, preferred, aborted, pos + 4


def _partition_tags(p: FetchPartitionResult, tags: dict[int, memoryview]) -> None:
    d = tags.get(0)
    if d is not None:
        p.diverging_epoch = EpochEndOffset(*_EPOCH_END.unpack_from(d, 0))
    c = tags.get(1)
    if c is not None:
        p.current_leader = LeaderIdAndEpoch(*_LEADER.unpack_from(c, 0))
    s = tags.get(2)
    if s is not None:
        p.snapshot_id = SnapshotId(*_SNAPSHOT.unpack_from(s, 0))
