"""Deterministic, fully populated kio request instances for schema-wide tests."""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid

from kio.static.primitive import Records

from yak.protocol.kio_compat import ErrorCode


def sample_request(cls: type, nulls: bool) -> object:
    """An instance with every field set (arrays of two), or with every nullable field None:
    exercises each field, nested struct and tagged field of the schema."""
    values = {}
    for f in dataclasses.fields(cls):
        optional = "None" in str(f.type) and "tag" not in f.metadata
        if nulls and optional:
            values[f.name] = None
            continue
        values[f.name] = _value(f)
    return cls(**values)


def _value(f: dataclasses.Field) -> object:  # type: ignore[type-arg]
    kafka_type = f.metadata.get("kafka_type")
    origin = typing.get_origin(f.type)
    args = [a for a in typing.get_args(f.type) if a is not type(None)]
    inner = args[0] if origin in (types.UnionType, typing.Union) and args else f.type
    if typing.get_origin(inner) is tuple:
        elem = typing.get_args(inner)[0]
        if dataclasses.is_dataclass(elem):
            return (sample_request(elem, False), sample_request(elem, True))
        return (_scalar(kafka_type), _scalar(kafka_type))
    if dataclasses.is_dataclass(inner):
        return sample_request(inner, False)
    return _scalar(kafka_type)


def _scalar(kafka_type: str | None) -> object:
    return {
        "string": "ab", "bytes": b"xy", "records": Records(b"xyz"), "bool": True,
        "uuid": uuid.UUID(int=7), "error_code": ErrorCode.none, "float64": 1.5,
        "timedelta_i32": datetime.timedelta(milliseconds=5),
        "timedelta_i64": datetime.timedelta(milliseconds=5),
        "datetime_i64": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    }.get(kafka_type or "", 1)
