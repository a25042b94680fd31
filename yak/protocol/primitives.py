"""Kafka's wire primitives: the one implementation every hand-written codec uses.

Varints (unsigned, and zigzag for signed ints and longs), classic and compact
(KIP-482) strings, byte strings, array lengths, and tagged-field sections, both ways.

Readers take `(buf, pos, end, ...)` and return `(value, position after it)`. Every
count and length they return has been checked against the bytes that remain before
`end`, so a caller never sizes anything from a number the peer merely announced.
Each reader raises the `error` class its caller passes, so a codec keeps its own
error type ("malformed Produce" versus "hostile body") without re-implementing the
loop. Writers append to a `bytearray` the caller owns: one buffer per response, no
intermediate `bytes`.

The hot paths (Produce decode, Fetch encode, the request header) mostly meet
one-byte varints and empty tagged-field sections, so those are tested first and cost
one index and one comparison; longer encodings take the general loop.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

__all__ = [
    "MAX_TAGGED_FIELDS",
    "read_uvarint", "read_uvarlong", "read_varint", "read_varlong",
    "write_uvarint", "write_varint", "write_varlong", "uvarint_bytes",
    "read_string", "read_bytes", "read_array_len",
    "write_string", "write_bytes", "write_length",
    "skip_tagged_fields", "read_tagged_fields", "write_tagged_fields",
]

MAX_TAGGED_FIELDS = 1024
"""Kafka defines a handful of tags per struct; thousands in one section can only be an
attack (each costs a loop turn), so more are refused even when the bytes are there."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


# ---------------------------------------------------------------- varints

def read_uvarint(
    buf: Any, pos: int, end: int | None = None, error: type[Exception] = ValueError
) -> tuple[int, int]:
    """Unsigned varint (a uint32: at most 5 bytes) at `pos` -> (value, position after it).
    `end` bounds the read (default: the buffer's end)."""
    if end is None:
        end = len(buf)
    if pos >= end:
        raise error("truncated varint")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return _read_long_uvarint(buf, pos, end, error, 32)


def read_uvarlong(
    buf: Any, pos: int, end: int | None = None, error: type[Exception] = ValueError
) -> tuple[int, int]:
    """Unsigned varlong (a uint64: at most 10 bytes)."""
    if end is None:
        end = len(buf)
    if pos >= end:
        raise error("truncated varint")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return _read_long_uvarint(buf, pos, end, error, 64)


def _read_long_uvarint(
    buf: Any, pos: int, end: int, error: type[Exception], bits: int
) -> tuple[int, int]:
    max_bytes = (bits + 6) // 7
    result = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise error("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result >> bits:
                # Kafka's reader would silently drop these bits; refuse them instead.
                raise error(f"varint overflows {bits} bits")
            return result, pos
        shift += 7
    raise error(f"varint longer than {max_bytes} bytes")


def read_varint(
    buf: Any, pos: int, end: int | None = None, error: type[Exception] = ValueError
) -> tuple[int, int]:
    """Zigzag varint (an int32), as in record fields and Kafka's `ByteUtils.readVarint`."""
    z, pos = read_uvarint(buf, pos, end, error)
    return (z >> 1) ^ -(z & 1), pos


def read_varlong(
    buf: Any, pos: int, end: int | None = None, error: type[Exception] = ValueError
) -> tuple[int, int]:
    """Zigzag varlong (an int64)."""
    z, pos = read_uvarlong(buf, pos, end, error)
    return (z >> 1) ^ -(z & 1), pos


def write_uvarint(out: bytearray, n: int) -> None:
    """Append an unsigned varint (any non-negative int below 2^64)."""
    if n < 0x80:
        if n < 0:
            raise ValueError(f"unsigned varint of a negative number {n}")
        out.append(n)
        return
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def write_varint(out: bytearray, n: int) -> None:
    """Append a zigzag varint; `n` must fit an int32."""
    if not _INT32_MIN <= n <= _INT32_MAX:
        raise ValueError(f"{n} does not fit an int32 varint")
    write_uvarint(out, (n << 1) ^ (n >> 31))


def write_varlong(out: bytearray, n: int) -> None:
    """Append a zigzag varlong; `n` must fit an int64."""
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise ValueError(f"{n} does not fit an int64 varlong")
    write_uvarint(out, (n << 1) ^ (n >> 63))


_SMALL = [bytes((n,)) for n in range(0x80)]


def uvarint_bytes(n: int) -> bytes:
    """An unsigned varint as `bytes` (one shared object for values below 128)."""
    if 0 <= n < 0x80:
        return _SMALL[n]
    out = bytearray()
    write_uvarint(out, n)
    return bytes(out)


# ---------------------------------------------------------------- strings, bytes, arrays

# Each reader reads its own length prefix inline (compact: uvarint N+1, one byte in the
# usual case; classic: int16 for strings, int32 for bytes and arrays): on the Produce path
# a shared helper's extra call cost more than the rest of the read. As in Kafka's
# generated readers, any negative classic length means null.

def read_string(
    buf: Any, pos: int, end: int, flexible: bool, error: type[Exception] = ValueError,
    nullable: bool = True,
) -> tuple[str | None, int]:
    """A (compact) string decoded as UTF-8; None for null when `nullable`."""
    if flexible:
        if pos < end and buf[pos] < 0x80:
            n = buf[pos] - 1
            pos += 1
        else:
            n, pos = read_uvarint(buf, pos, end, error)
            n -= 1
    else:
        if pos + 2 > end:
            raise error("truncated string length")
        (n,) = _I16.unpack_from(buf, pos)
        pos += 2
    if n < 0:
        if nullable:
            return None, pos
        raise error("null string where one is required")
    if n > end - pos:
        raise error(f"string of {n} bytes overruns the {end - pos} left")
    try:
        return str(buf[pos : pos + n], "utf-8"), pos + n
    except UnicodeDecodeError:
        raise error("string is not UTF-8") from None


def read_bytes(
    buf: memoryview, pos: int, end: int, flexible: bool, error: type[Exception] = ValueError
) -> tuple[memoryview | None, int]:
    """(Compact) bytes or records as a zero-copy slice of `buf`; None for null."""
    if flexible:
        if pos < end and buf[pos] < 0x80:
            n = buf[pos] - 1
            pos += 1
        else:
            n, pos = read_uvarint(buf, pos, end, error)
            n -= 1
    else:
        if pos + 4 > end:
            raise error("truncated bytes length")
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
    if n < 0:
        return None, pos
    if n > end - pos:
        raise error(f"bytes of {n} overrun the {end - pos} left")
    return buf[pos : pos + n], pos + n


def read_array_len(
    buf: Any, pos: int, end: int, flexible: bool, min_item: int = 1,
    error: type[Exception] = ValueError, nullable: bool = False,
) -> tuple[int, int]:
    """A (compact) array's element count, -1 for null when `nullable`. Refused unless
    `count * min_item` bytes remain: an element takes at least `min_item` bytes, so an
    announced 2^31 elements fails here instead of in an allocation."""
    if flexible:
        if pos < end and buf[pos] < 0x80:
            n = buf[pos] - 1
            pos += 1
        else:
            n, pos = read_uvarint(buf, pos, end, error)
            n -= 1
    else:
        if pos + 4 > end:
            raise error("truncated array length")
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
    if n < 0:
        if nullable:
            return -1, pos
        raise error("null array where one is required")
    if n * min_item > end - pos:
        raise error(f"array of {n} elements in {end - pos} bytes")
    return n, pos


def write_length(out: bytearray, n: int, flexible: bool) -> None:
    """Length of an array, bytes or records field (-1 = null): compact uvarint N+1 or
    classic int32. (Strings have an int16 length: use `write_string`.)"""
    if n < -1:
        raise ValueError(f"negative length {n}")
    if not flexible:
        out += _I32.pack(n)
    elif n < 0x7F:
        out.append(n + 1)
    else:
        write_uvarint(out, n + 1)


def write_string(out: bytearray, s: str | None, flexible: bool) -> None:
    """A (compact) nullable string, UTF-8."""
    if s is None:
        if flexible:
            out.append(0)
        else:
            out += b"\xff\xff"
        return
    b = s.encode()
    if flexible:
        if len(b) < 0x7F:
            out.append(len(b) + 1)
        else:
            write_uvarint(out, len(b) + 1)
    else:
        if len(b) > 0x7FFF:
            raise ValueError(f"string of {len(b)} bytes does not fit an int16 length")
        out += _I16.pack(len(b))
    out += b


def write_bytes(out: bytearray, b: bytes | memoryview | None, flexible: bool) -> None:
    """(Compact) nullable bytes: length then content."""
    if b is None:
        write_length(out, -1, flexible)
        return
    write_length(out, len(b), flexible)
    out += b


# ---------------------------------------------------------------- tagged fields (KIP-482)

def skip_tagged_fields(
    buf: Any, pos: int, end: int | None = None, error: type[Exception] = ValueError
) -> int:
    """Skip a tagged-field section -> position after it. The count is capped at
    `MAX_TAGGED_FIELDS` and by the bytes left (each field takes at least 2), and every
    field's size is checked before it is skipped."""
    if end is None:
        end = len(buf)
    if pos < end and buf[pos] == 0:  # no tagged fields: nearly every section
        return pos + 1
    count, pos = read_uvarint(buf, pos, end, error)
    _check_tag_count(count, end - pos, error)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos, end, error)
        size, pos = read_uvarint(buf, pos, end, error)
        if size > end - pos:
            raise error("tagged field overruns the buffer")
        pos += size
    return pos


def read_tagged_fields(
    buf: memoryview, pos: int, end: int | None = None, error: type[Exception] = ValueError
) -> tuple[dict[int, memoryview], int]:
    """A tagged-field section as {tag: zero-copy slice of its bytes}, bounded as in
    `skip_tagged_fields`. Kafka writes tags in ascending order but its readers do not
    insist, so neither does this one (a repeated tag: the last one wins)."""
    if end is None:
        end = len(buf)
    count, pos = read_uvarint(buf, pos, end, error)
    fields: dict[int, memoryview] = {}
    if not count:
        return fields, pos
    _check_tag_count(count, end - pos, error)
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos, end, error)
        size, pos = read_uvarint(buf, pos, end, error)
        if size > end - pos:
            raise error("tagged field overruns the buffer")
        fields[tag] = buf[pos : pos + size]
        pos += size
    return fields, pos


def _check_tag_count(count: int, left: int, error: type[Exception]) -> None:
    if count > MAX_TAGGED_FIELDS:
        raise error(f"{count} tagged fields (at most {MAX_TAGGED_FIELDS})")
    if count * 2 > left:
        raise error(f"{count} tagged fields in {left} bytes")


def write_tagged_fields(out: bytearray, fields: Iterable[tuple[int, bytes | bytearray]]) -> None:
    """A tagged-field section from (tag, encoded value) pairs in ascending tag order
    (the caller leaves out fields at their default, as Kafka does)."""
    fields = list(fields)
    write_uvarint(out, len(fields))
    last = -1
    for tag, value in fields:
        if tag <= last:
            raise ValueError(f"tag {tag} after tag {last}: tags must ascend")
        last = tag
        write_uvarint(out, tag)
        write_uvarint(out, len(value))
        out += value
