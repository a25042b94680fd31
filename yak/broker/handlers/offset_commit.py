"""OffsetCommit: a group's positions, written to `__consumer_offsets` as one batch.

Offsets for topics or partitions that do not exist are refused here (the coordinator
does not know topics); everything else is the coordinator's call (generation, member,
metadata size). v10 (topic ids) is not offered: clients fall back to v9.
"""

from __future__ import annotations

import struct
from typing import Any

from yak.broker.context import RawResponse, RequestContext
from yak.broker.handlers._group import coordinator, topic_partition_error
from yak.group.coordinator import OffsetToCommit
from yak.protocol.kio_compat import ErrorCode

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9


async def handle(ctx: RequestContext, request: Any) -> RawResponse:
    coord = coordinator(ctx)
    slots: list[tuple[str, int, ErrorCode | None]] = []
    to_commit: list[OffsetToCommit] = []
    for t in request.topics:
        for p in t.partitions:
            err = topic_partition_error(ctx, t.name, p.partition_index)
            if coord is None:
                err = ErrorCode.coordinator_not_available
            slots.append((t.name, p.partition_index, err))
            if err is None:
                to_commit.append(
                    OffsetToCommit(
                        t.name,
                        p.partition_index,
                        p.committed_offset,
                        getattr(p, "committed_leader_epoch", -1),
                        p.committed_metadata,
                    )
                )
    codes: list[ErrorCode] = []
    if coord is not None and (to_commit or not slots):
        codes = await coord.commit_offsets(
            request.group_id,
            request.generation_id_or_member_epoch,
            request.member_id,
            getattr(request, "group_instance_id", None),
            to_commit,
        )
    it = iter(codes)
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
    for topic, partition, err in slots:
        by_topic.setdefault(topic, []).append((partition, err if err is not None else next(it)))
    return encode_response(ctx.api_version, by_topic)


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART = struct.Struct(">ih")


_SMALL = [bytes((n,)) for n in range(0x80)]


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_response(version: int, by_topic: dict[str, list[tuple[int, ErrorCode]]]) -> RawResponse:
    """OffsetCommitResponse v2-v9 by hand: the commit path's hottest step was kio's
    pure-Python encoder (about 40% of the broker's CPU per commit); the layout is
    tiny and fixed (throttle, topics of (partition, error)), and tests check every
    version against kio's own encoding."""
    flexible = version >= 8
    out = bytearray()
    if version >= 3:
        out += _I32.pack(0)  # throttle_time_ms
    if flexible:
        out += _uvarint(len(by_topic) + 1)
    else:
        out += _I32.pack(len(by_topic))
    for topic, parts in by_topic.items():
        name = topic.encode()
        if flexible:
            out += _uvarint(len(name) + 1) + name + _uvarint(len(parts) + 1)
            for p, code in parts:
                out += _PART.pack(p, code.value) + b"\x00"
            out += b"\x00"
        else:
            out += _I16.pack(len(name)) + name + _I32.pack(len(parts))
            for p, code in parts:
                out += _PART.pack(p, code.value)
    if flexible:
        out += b"\x00"
    return RawResponse([bytes(out)], len(out), flexible_header=flexible)
