"""Hand-written ShareFetch response encoder (KIP-932, v1-v2): a list of buffers for
`writelines`, like `fetch_codec` does for Fetch.

Every share consumer's round trip ends in one of these, and most of it is record data
read from the log. kio would build a dataclass per partition and per acquired range,
then copy every partition's records into one `bytes` (after the handler had already
joined them once); here the framing fields are packed with `struct` into short
`bytearray`s and the read's batch views go into the output list as they are, so the
only copy of the records is the kernel's. Byte for byte the same as kio's encoder:
tests/protocol/test_share_fetch_codec.py compares both for every version served.

v1 and v2 have the same response layout (v2 changed the request: renew
acknowledgements, KIP-1222); both are flexible. `node_endpoints` is an ordinary field
here (not tagged as in Fetch), and a partition's `current_leader` an ordinary struct.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from yak.protocol.fetch_codec import NodeEndpoint
from yak.protocol.primitives import write_string, write_uvarint

__all__ = ["SharePartitionData", "ShareTopicData", "NodeEndpoint",
           "encode_share_fetch_response", "MIN_VERSION", "MAX_VERSION"]

MIN_VERSION = 1
MAX_VERSION = 2

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART = struct.Struct(">ih")  # partition index, error code
_LEADER = struct.Struct(">iiB")  # leader id, leader epoch, empty tagged fields
_ACQUIRED = struct.Struct(">qqhB")  # first, last, delivery count, empty tagged fields


@dataclass(slots=True)
class SharePartitionData:
    """One partition of a ShareFetch response (Kafka's PartitionData)."""

    partition_index: int
    error_code: int = 0
    error_message: str | None = None
    acknowledge_error_code: int = 0
    acknowledge_error_message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    records: Sequence[Any] = ()
    """Buffers whose concatenation is the partition's record batches (empty: none)."""
    records_size: int = 0
    """Total bytes in `records`."""
    acquired: Sequence[Any] = ()
    """AcquiredRecords: objects with `first_offset`, `last_offset`, `delivery_count`
    (yak.share.partition.AcquiredRange)."""


@dataclass(slots=True)
class ShareTopicData:
    topic_id: uuid.UUID
    partitions: list[SharePartitionData] = field(default_factory=list)


def encode_share_fetch_response(
    version: int,
    topics: Sequence[ShareTopicData],
    *,
    acquisition_lock_timeout_ms: int,
    throttle_ms: int = 0,
    error_code: int = 0,
    error_message: str | None = None,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> tuple[list[Any], int]:
    """Body of a ShareFetch response (no size or response header): (buffers, total size).
    The response header is v1 (flexible) for every version."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"unsupported ShareFetch version {version}")
    out: list[Any] = []
    size = 0
    head = bytearray(_I32.pack(throttle_ms))
    head += _I16.pack(error_code)
    write_string(head, error_message, True)
    head += _I32.pack(acquisition_lock_timeout_ms)
    _length(head, len(topics))
    for t in topics:
        head += t.topic_id.bytes
        parts = t.partitions
        _length(head, len(parts))
        for p in parts:
            head += _PART.pack(p.partition_index, p.error_code)
            write_string(head, p.error_message, True)
            head += _I16.pack(p.acknowledge_error_code)
            write_string(head, p.acknowledge_error_message, True)
            head += _LEADER.pack(p.leader_id, p.leader_epoch, 0)
            records_size = p.records_size
            if records_size:
                write_uvarint(head, records_size + 1)
                out.append(head)
                size += len(head) + records_size
                out.extend(p.records)
                head = bytearray()
            else:
                head.append(1)  # empty records, never null
            acquired = p.acquired
            _length(head, len(acquired))
            for a in acquired:
                head += _ACQUIRED.pack(a.first_offset, a.last_offset, a.delivery_count, 0)
            head.append(0)  # partition tagged fields
        head.append(0)  # topic tagged fields
    _length(head, len(node_endpoints))
    for e in node_endpoints:
        head += _I32.pack(e.node_id)
        write_string(head, e.host, True)
        head += _I32.pack(e.port)
        write_string(head, e.rack, True)
        head.append(0)
    head.append(0)  # top-level tagged fields
    out.append(head)
    return out, size + len(head)


def _length(head: bytearray, n: int) -> None:
    """A compact array length (N+1), one byte inline below 127."""
    if n < 0x7F:
        head.append(n + 1)
    else:
        write_uvarint(head, n + 1)
