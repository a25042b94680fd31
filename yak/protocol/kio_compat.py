"""Thin helpers around kio, the library that knows every Kafka schema.

kio is exact but strict: its dataclasses change shape between versions, its
reader refuses writable buffers, and its encoder wants Python types (`ErrorCode`
members, `timedelta`) where the wire has plain ints. Handlers go through these
helpers so each of those sharp edges is dealt with in one place instead of in
every handler.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
from types import ModuleType
from typing import Any, Literal, TypeVar

from kio.index import load_entity_module
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from typing_extensions import Buffer

from yak.protocol.framing import response_frame_head
from yak.protocol.primitives import skip_tagged_fields

__all__ = [
    "ErrorCode",
    "api_name",
    "api_key_for",
    "known_versions",
    "schema_module",
    "request_class",
    "response_class",
    "build",
    "ms_to_timedelta",
    "timedelta_to_ms",
    "ms_to_datetime",
    "error_code",
    "decode",
    "encode",
    "encode_request",
    "encode_response",
    "request_header_version",
    "response_header_version",
]

T = TypeVar("T")

_API_KEYS: dict[str, int] = {name: key for key, name in api_key_map.items()}


def api_name(api_key: int) -> str | None:
    """kio's snake_case API name ("produce", "api_versions") or None if unknown."""
    return api_key_map.get(api_key)


def api_key_for(name: str) -> int:
    return _API_KEYS[name]


@functools.cache
def known_versions(api_key: int) -> tuple[int, ...]:
    """Versions kio has a schema for: a handler can never advertise more than this."""
    name = api_key_map.get(api_key)
    if name is None:
        return ()
    return tuple(sorted(schema_name_map.get(name, {})))


@functools.cache
def schema_module(
    api_name: str, version: int, kind: Literal["request", "response"]
) -> ModuleType:
    """The kio module of one version (holds the payload class and its nested entities).

    Handlers use it to reach nested classes of the exact version they answer, e.g.
    `schema_module("metadata", 12, "response").MetadataResponseTopic`.
    """
    entity_type = EntityType.request if kind == "request" else EntityType.response
    return load_entity_module(api_name, version, entity_type)


@functools.cache
def _payload_class(api_key: int, version: int, kind: str) -> type:
    name = api_key_map[api_key]
    entity_type = EntityType.request if kind == "request" else EntityType.response
    path = schema_name_map[name][version][entity_type]
    module = schema_module(name, version, kind)  # type: ignore[arg-type]
    return getattr(module, path.split(":", 1)[1])


def request_class(api_key: int, version: int) -> type:
    """Raises KeyError if kio has no such API key or version."""
    return _payload_class(api_key, version, "request")


def response_class(api_key: int, version: int) -> type:
    return _payload_class(api_key, version, "response")


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type[T], **fields: Any) -> T:
    """Instantiate a kio dataclass, silently dropping fields this version does not have.

    One handler serves many versions; passing every field it knows and letting the
    schema keep what it has avoids a thicket of `if version >= n` branches.
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in fields.items() if k in names})


def has_field(cls: type, name: str) -> bool:
    return name in _field_names(cls)


def ms_to_timedelta(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def timedelta_to_ms(td: datetime.timedelta | int) -> int:
    if isinstance(td, int):
        return td
    return int(td.total_seconds() * 1000)


def ms_to_datetime(ms: int) -> datetime.datetime | None:
    """kio models "no timestamp" (-1 on the wire) as None."""
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def error_code(code: int | ErrorCode) -> ErrorCode:
    """kio's encoder crashes on a raw int: always hand it an ErrorCode member."""
    return code if isinstance(code, ErrorCode) else ErrorCode(code)


# ---------------------------------------------------------------- headers

def request_header_version(api_key: int, version: int) -> int:
    """1 for classic requests, 2 for flexible ones (tagged fields after client_id)."""
    cls = request_class(api_key, version)
    return 2 if cls.__flexible__ else 1


def response_header_version(api_key: int, version: int) -> int:
    """0 or 1. ApiVersions always answers with header v0 (clients parse it before they
    know which versions the broker has), which kio records in `__header_schema__`."""
    cls = response_class(api_key, version)
    return int(cls.__header_schema__.__version__)


# ---------------------------------------------------------------- payloads

def decode(cls: type[T], buf: Buffer, offset: int = 0) -> tuple[T, int]:
    """Decode one entity; kio's native reader only accepts read-only buffers."""
    mv = memoryview(buf)
    if not mv.readonly:
        mv = mv.toreadonly()
    return entity_reader(cls)(mv, offset)


def encode(obj: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(obj))(out, obj)
    return out.getvalue()


def encode_response(correlation_id: int, response: Any) -> bytes:
    """A complete frame: 4-byte size, response header (v0 or v1), body."""
    body = encode(response)
    flexible_header = response.__header_schema__.__version__ >= 1
    return response_frame_head(len(body), correlation_id, flexible_header) + body


def encode_request(request: Any, correlation_id: int, client_id: str | None = "yak") -> bytes:
    """A complete request frame; used by tests and by broker-to-broker clients."""
    api_key = int(request.__api_key__)
    version = int(request.__version__)
    head = struct.pack(">hhi", api_key, version, correlation_id)
    if client_id is None:
        head += struct.pack(">h", -1)
    else:
        cid = client_id.encode()
        head += struct.pack(">h", len(cid)) + cid
    if request.__header_schema__.__version__ >= 2:
        head += b"\x00"
    body = encode(request)
    return struct.pack(">i", len(head) + len(body)) + head + body


def decode_response(api_key: int, version: int, frame: Buffer) -> tuple[int, Any]:
    """Parse a response frame (without its 4-byte size): (correlation_id, response)."""
    mv = memoryview(frame)
    if not mv.readonly:
        mv = mv.toreadonly()
    (correlation_id,) = struct.unpack_from(">i", mv, 0)
    pos = 4
    if response_header_version(api_key, version) >= 1:
        pos = skip_tagged_fields(mv, pos)
    obj, _ = decode(response_class(api_key, version), mv, pos)
    return correlation_id, obj

