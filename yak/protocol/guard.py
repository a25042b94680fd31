"""Bounds check of a request body before kio's native reader sees it.

kio 0.6.5's Rust reader reserves an array's announced length up front: a 5-byte body
announcing 2^31 elements makes it request ~100 GB, and a failed allocation aborts the
whole broker process (Rust's alloc-failure handler, not a Python exception). Found by
fuzzing every advertised API (tests/broker/test_hostile.py).

So every request decoded with kio is first walked here, following kio's own schema
dataclasses (the same field classification kio uses), without building anything: each
array count must fit in the bytes that remain (every element takes at least one byte),
each string/bytes length must fit, and tagged-field sections are bounded. The walk is
pure Python but only touches counts and lengths, so a typical request costs a few
microseconds; Produce, the one large request, has its own bounded decoder.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from yak.protocol.primitives import read_tagged_fields, read_uvarint

__all__ = ["GuardError", "check"]

_FIXED = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8,
    "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# step kinds
_PRIM, _PRIM_ARRAY, _ENTITY, _ENTITY_ARRAY = range(4)


class GuardError(ValueError):
    """The body announces more than it holds: refuse it before any allocation."""


def _uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    return read_uvarint(buf, pos, end, GuardError)


@functools.cache
def _plan(cls: type) -> tuple[tuple[tuple[int, Any, bool], ...], dict[int, tuple[int, Any, bool]], bool]:
    steps = []
    tags: dict[int, tuple[int, Any, bool]] = {}
    for f in dataclasses.fields(cls):
        fc = classify_field(f)
        tag = get_field_tag(f)
        optional = False if tag is not None else is_optional(f)
        if isinstance(fc, PrimitiveField):
            step = (_PRIM, get_schema_field_type(f), optional)
        elif isinstance(fc, PrimitiveTupleField):
            step = (_PRIM_ARRAY, get_schema_field_type(f), optional)
        elif isinstance(fc, EntityField):
            step = (_ENTITY, fc.type_, optional)
        elif isinstance(fc, EntityTupleField):
            step = (_ENTITY_ARRAY, fc.type_, optional)
        else:  # pragma: no cover - kio has no other field class
            raise TypeError(f"unknown field class {fc!r}")
        if tag is None:
            steps.append(step)
        else:
            tags[int(tag)] = step
    return tuple(steps), tags, bool(cls.__flexible__)


def check(cls: type, buf: Any, pos: int = 0, end: int | None = None) -> int:
    """Walk one `cls` entity at `pos`; returns the position after it or raises GuardError."""
    return _walk(cls, buf, pos, len(buf) if end is None else end)


def _walk(cls: type, buf: Any, pos: int, end: int) -> int:
    steps, tags, flexible = _plan(cls)
    for step in steps:
        pos = _field(step, flexible, buf, pos, end)
    if flexible:
        if pos < end and buf[pos] == 0:  # no tagged fields: nearly always
            return pos + 1
        # Bounded like every tagged-field section (count capped, sizes checked); the
        # fields kio knows are then walked inside their own bytes.
        fields, pos = read_tagged_fields(buf, pos, end, GuardError)
        for tag, value in fields.items():
            step = tags.get(tag)
            if step is not None:
                _field(step, flexible, value, 0, len(value))
    return pos


def _length(buf: Any, pos: int, end: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A string/bytes/array length: -1 means null."""
    if flexible:
        n, pos = _uvarint(buf, pos, end)
        return n - 1, pos
    size = 4 if wide else 2
    if pos + size > end:
        raise GuardError("truncated length")
    (n,) = (_I32 if wide else _I16).unpack_from(buf, pos)
    return n, pos + size


def _field(step: tuple[int, Any, bool], flexible: bool, buf: Any, pos: int, end: int) -> int:
    kind, what, optional = step
    if kind == _PRIM:
        return _primitive(what, flexible, buf, pos, end)
    if kind == _ENTITY:
        if optional:
            if pos >= end:
                raise GuardError("truncated nullable struct marker")
            marker = buf[pos]
            pos += 1
            if marker == 0xFF:  # -1: null
                return pos
        return _walk(what, buf, pos, end)
    count, pos = _length(buf, pos, end, flexible, wide=True)
    if count < 0:
        if count == -1:
            return pos
        raise GuardError("negative array length")
    if count > end - pos:
        raise GuardError(f"array of {count} in {end - pos} bytes")
    if kind == _PRIM_ARRAY:
        fixed = _FIXED.get(what)
        if fixed is not None:
            if count * fixed > end - pos:
                raise GuardError("array overruns the body")
            return pos + count * fixed
        for _ in range(count):
            pos = _primitive(what, flexible, buf, pos, end)
        return pos
    for _ in range(count):
        pos = _walk(what, buf, pos, end)
    return pos


def _primitive(kafka_type: str, flexible: bool, buf: Any, pos: int, end: int) -> int:
    fixed = _FIXED.get(kafka_type)
    if fixed is not None:
        if pos + fixed > end:
            raise GuardError(f"truncated {kafka_type}")
        return pos + fixed
    if kafka_type in ("string", "bytes", "records"):
        n, pos = _length(buf, pos, end, flexible, wide=kafka_type != "string")
        if n < -1:
            raise GuardError(f"negative {kafka_type} length")
        if n > end - pos:
            raise GuardError(f"{kafka_type} of {n} in {end - pos} bytes")
        return pos + max(n, 0)
    raise GuardError(f"unknown kafka type {kafka_type}")
