"""Kafka's wire primitives that more than one hand-written codec reads.

One bounds-checked reader serves the request-header parser, the zero-copy Produce
decoder and the pre-decode guard, each raising its own error class so that callers
keep telling "malformed Produce" from "hostile body" apart.
"""

from __future__ import annotations

from typing import Any


def read_uvarint(
    buf: Any, pos: int, end: int | None = None, error: type[Exception] = ValueError
) -> tuple[int, int]:
    """Unsigned varint at `pos` -> (value, position after it). At most 5 bytes (a uint32);
    `end` bounds the read (default: the buffer's end)."""
    if end is None:
        end = len(buf)
    result = 0
    shift = 0
    for _ in range(5):
        if pos >= end:
            raise error("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    raise error("varint longer than 5 bytes")
