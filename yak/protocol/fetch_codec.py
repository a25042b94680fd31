"""Hand-written Fetch response encoder (v4-v18): a list of buffers for `writelines`.

A Fetch response is mostly record data read from segment files. kio would copy every
partition's records into one `bytes` before the socket copies them again; here the
small framing fields are packed with `struct` into short `bytearray`s and the record
buffers from storage are placed in the output list as they are, so the only copy is
the kernel's. Compared byte for byte with kio's encoder in
tests/protocol/test_fetch_codec.py for every version.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FetchPartitionResult", "FetchTopicResult", "encode_fetch_response",
           "MIN_VERSION", "MAX_VERSION"]

MIN_VERSION = 4
MAX_VERSION = 18
FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_TOP = struct.Struct(">ihi")  # throttle, error, session id (v7+)
_PART_V4 = struct.Struct(">ihqq")  # index, error, hw, lso
_PART_V5 = struct.Struct(">ihqqq")  # + log start offset
_ABORTED = struct.Struct(">qq")
_NO_ID = uuid.UUID(int=0)


@dataclass(slots=True)
class FetchPartitionResult:
    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    records: Sequence[Any] | None = None
    """Buffers whose concatenation is the partition's record batches (None = null)."""
    records_size: int = 0


@dataclass(slots=True)
class FetchTopicResult:
    name: str
    topic_id: uuid.UUID = _NO_ID
    partitions: list[FetchPartitionResult] = field(default_factory=list)


def _uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def encode_fetch_response(
    version: int,
    topics: Sequence[FetchTopicResult],
    throttle_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
) -> tuple[list[Any], int]:
    """Body of a Fetch response (no size or response header): (buffers, total size)."""
    flexible = version >= FIRST_FLEXIBLE
    by_id = version >= FIRST_TOPIC_ID
    out: list[Any] = []
    size = 0
    head = bytearray()
    if version >= 7:
        head += _TOP.pack(throttle_ms, error_code, session_id)
    else:
        head += _I32.pack(throttle_ms)
    if flexible:
        _uvarint(head, len(topics) + 1)
    else:
        head += _I32.pack(len(topics))
    for t in topics:
        if by_id:
            head += t.topic_id.bytes
        else:
            name = t.name.encode()
            if flexible:
                _uvarint(head, len(name) + 1)
            else:
                head += _I16.pack(len(name))
            head += name
        parts = t.partitions
        if flexible:
            _uvarint(head, len(parts) + 1)
        else:
            head += _I32.pack(len(parts))
        for p in parts:
            if version >= 5:
                head += _PART_V5.pack(
                    p.partition_index, p.error_code, p.high_watermark,
                    p.last_stable_offset, p.log_start_offset,
                )
            else:
                head += _PART_V4.pack(
                    p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset
                )
            aborted = p.aborted_transactions
            if aborted is None:
                if flexible:
                    head.append(0)
                else:
                    head += _I32.pack(-1)
            else:
                if flexible:
                    _uvarint(head, len(aborted) + 1)
                else:
                    head += _I32.pack(len(aborted))
                for pid, first in aborted:
                    head += _ABORTED.pack(pid, first)
                    if flexible:
                        head.append(0)
            if version >= 11:
                head += _I32.pack(p.preferred_read_replica)
            recs = p.records
            if recs is None:
                if flexible:
                    head.append(0)
                else:
                    head += _I32.pack(-1)
            else:
                if flexible:
                    _uvarint(head, p.records_size + 1)
                else:
                    head += _I32.pack(p.records_size)
                if p.records_size:
                    out.append(head)
                    size += len(head)
                    out.extend(recs)
                    size += p.records_size
                    head = bytearray()
            if flexible:
                head.append(0)  # partition tagged fields
        if flexible:
            head.append(0)  # topic tagged fields
    if flexible:
        head.append(0)  # top-level tagged fields
    out.append(head)
    size += len(head)
    return out, size
