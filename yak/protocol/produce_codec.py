"""Zero-copy decoder for Produce requests (v3-v13), the broker's hottest input.

kio would copy every partition's records into a new `bytes`; at 1 MiB per request that
copy and the object churn around it cost more than the append itself. Here the records
stay `memoryview`s into the received frame and everything else is read with `struct`.
Every length and count is checked against the bytes that remain before it is used, so
a hostile count (2^31-1 partitions) fails fast instead of allocating.

The output is deliberately plain (tuples and lists), compared field by field with kio's
decoding in tests/protocol/test_produce_codec.py for every version.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from yak.protocol.primitives import (
    read_array_len,
    read_string,
    read_uvarint,
    skip_tagged_fields,
    write_length,
    write_string,
)

__all__ = ["ProduceRequestData", "ProduceTopic", "decode_produce_request", "MIN_VERSION",
           "MAX_VERSION", "ProduceDecodeError", "ProducePartitionResult",
           "encode_produce_response"]

MIN_VERSION = 3
MAX_VERSION = 13
FIRST_FLEXIBLE = 9
FIRST_TOPIC_ID = 13

_I32 = struct.Struct(">i")
_I32_I32 = struct.Struct(">ii")
_ACKS_TIMEOUT = struct.Struct(">hi")


class ProduceDecodeError(ValueError):
    pass


@dataclass(slots=True)
class ProduceTopic:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[tuple[int, memoryview | None]]


@dataclass(slots=True)
class ProduceRequestData:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopic]


def decode_produce_request(version: int, body: memoryview) -> ProduceRequestData:
    """Decode a Produce request body (after the request header)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ProduceDecodeError(f"unsupported Produce version {version}")
    flexible = version >= FIRST_FLEXIBLE
    by_id = version >= FIRST_TOPIC_ID
    buf = body if isinstance(body, memoryview) else memoryview(body)
    end = len(buf)
    err = ProduceDecodeError
    txn_id, pos = read_string(buf, 0, end, flexible, err)
    if pos + 6 > end:
        raise ProduceDecodeError("truncated acks/timeout")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
    pos += 6
    # A topic is at least a 1-byte name/16-byte id plus a partition count.
    n_topics, pos = read_array_len(buf, pos, end, flexible, 2, err)
    topics: list[ProduceTopic] = []
    for _ in range(n_topics):
        name: str | None = None
        topic_id: uuid.UUID | None = None
        if by_id:
            if pos + 16 > end:
                raise ProduceDecodeError("truncated topic id")
            topic_id = uuid.UUID(bytes=bytes(buf[pos : pos + 16]))
            pos += 16
        else:
            name, pos = read_string(buf, pos, end, flexible, err, nullable=False)
        # A partition is at least its index and a records length.
        n_parts, pos = read_array_len(buf, pos, end, flexible, 5, err)
        parts: list[tuple[int, memoryview | None]] = []
        for _ in range(n_parts):
            # Index and records length read inline: once per partition, the hottest loop.
            if flexible:
                if pos + 4 > end:
                    raise ProduceDecodeError("truncated partition index")
                (index,) = _I32.unpack_from(buf, pos)
                size, pos = read_uvarint(buf, pos + 4, end, err)
                size -= 1
            else:
                if pos + 8 > end:
                    raise ProduceDecodeError("truncated partition index or records length")
                index, size = _I32_I32.unpack_from(buf, pos)
                pos += 8
            records: memoryview | None = None
            if size >= 0:  # negative: null (any negative, as Kafka reads it)
                if size > end - pos:
                    raise ProduceDecodeError("records overrun the frame")
                records = buf[pos : pos + size]
                pos += size
            if flexible:
                pos = skip_tagged_fields(buf, pos, end, err)
            parts.append((index, records))
        if flexible:
            pos = skip_tagged_fields(buf, pos, end, err)
        topics.append(ProduceTopic(name, topic_id, parts))
    if flexible:
        pos = skip_tagged_fields(buf, pos, end, err)
    if pos != end:
        raise ProduceDecodeError(f"{end - pos} trailing bytes after Produce request")
    return ProduceRequestData(txn_id, acks, timeout_ms, topics)


# ---------------------------------------------------------------- response

_I64 = struct.Struct(">q")
_EMPTY_FLEX = b"\x01"  # empty compact array
_EMPTY_CLASSIC = b"\x00\x00\x00\x00"
_NULL_FLEX = b"\x00"  # null compact string
_NULL_STRING_CLASSIC = b"\xff\xff"
_PART_V3 = struct.Struct(">ihqq")  # index, error, base offset, log append time
_PART_V5 = struct.Struct(">ihqqq")  # + log start offset


@dataclass(slots=True)
class ProducePartitionResult:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    # KIP-467 (v8+): (batch index, message) of each record that made the batch fail.
    record_errors: list[tuple[int, str | None]] | tuple[()] = ()


def encode_produce_response(
    version: int,
    topics: list[tuple[str | None, uuid.UUID | None, list[ProducePartitionResult]]],
    throttle_ms: int = 0,
) -> bytearray:
    """Body of a Produce response (no size or header). kio's encoder builds and checks a
    dataclass per partition; at hundreds of requests per second that was a third of the
    handler's CPU, so the few fields are packed here (compared with kio in tests)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"unsupported Produce version {version}")
    flexible = version >= FIRST_FLEXIBLE
    by_id = version >= FIRST_TOPIC_ID
    out = bytearray()
    # Counts below 127 are one compact byte, written inline (see fetch_codec).
    if flexible and len(topics) < 0x7F:
        out.append(len(topics) + 1)
    else:
        write_length(out, len(topics), flexible)
    for name, topic_id, parts in topics:
        if by_id:
            out += (topic_id or uuid.UUID(int=0)).bytes
        else:
            write_string(out, name or "", flexible)
        if flexible and len(parts) < 0x7F:
            out.append(len(parts) + 1)
        else:
            write_length(out, len(parts), flexible)
        for p in parts:
            if version >= 5:
                out += _PART_V5.pack(p.index, p.error_code, p.base_offset, p.log_append_time,
                                     p.log_start_offset)
            else:
                out += _PART_V3.pack(p.index, p.error_code, p.base_offset, p.log_append_time)
            if version >= 8:
                errs = p.record_errors
                if errs:
                    write_length(out, len(errs), flexible)
                    for batch_index, message in errs:
                        out += _I32.pack(batch_index)
                        write_string(out, message, flexible)
                        if flexible:
                            out.append(0)
                else:
                    out += _EMPTY_FLEX if flexible else _EMPTY_CLASSIC
                if p.error_message is None:
                    out += _NULL_FLEX if flexible else _NULL_STRING_CLASSIC
                else:
                    write_string(out, p.error_message, flexible)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    out += _I32.pack(throttle_ms)
    if flexible:
        out.append(0)
    return out  # a bytearray: the connection may write the request quota's throttle in
