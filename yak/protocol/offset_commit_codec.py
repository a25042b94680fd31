"""Hand-written OffsetCommit response encoder (v2-v9).

The commit path's hottest step was kio's pure-Python encoder (about 40% of the broker's
CPU per commit); the layout is tiny and fixed (throttle, topics of (partition, error)),
so it is packed here and compared with kio's own encoding for every version in
tests/protocol/test_offset_commit_codec.py.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from yak.protocol.primitives import write_length, write_string

__all__ = ["MIN_VERSION", "MAX_VERSION", "FIRST_FLEXIBLE", "encode_offset_commit_response"]

MIN_VERSION = 2
MAX_VERSION = 9
FIRST_FLEXIBLE = 8

_I32 = struct.Struct(">i")
_PART = struct.Struct(">ih")  # partition index, error code
_PART_FLEX = struct.Struct(">ihB")  # + empty tagged fields


def encode_offset_commit_response(
    version: int, by_topic: Mapping[str, Sequence[tuple[int, int]]], throttle_ms: int = 0
) -> bytes:
    """Body of an OffsetCommit response (no size or response header): topics of
    (partition index, error code); error codes may be ints or kio `ErrorCode` members."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"unsupported OffsetCommit version {version}")
    flexible = version >= FIRST_FLEXIBLE
    out = bytearray()
    if version >= 3:
        out += _I32.pack(throttle_ms)
    write_length(out, len(by_topic), flexible)
    for topic, parts in by_topic.items():
        write_string(out, topic, flexible)
        write_length(out, len(parts), flexible)
        if flexible:
            for p, code in parts:
                out += _PART_FLEX.pack(p, code, 0)
            out.append(0)  # topic tagged fields
        else:
            for p, code in parts:
                out += _PART.pack(p, code)
    if flexible:
        out.append(0)  # top-level tagged fields
    return bytes(out)
