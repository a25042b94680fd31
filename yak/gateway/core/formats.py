"""Record formats: the one place where client data becomes record bytes and back.

A transport that carries data as JSON (REST, WebSocket, the console's API) asks the core
for a format by name; gRPC carries bytes and needs none. Formats work per batch, never
per record, so a format backed by a schema registry looks a schema up once per batch.

Built in: `binary` (base64 strings), `json` (any JSON value, stored as its compact
encoding). More (Avro, JSON Schema, Protobuf) are registered by whoever composes the
gateway: `core.formats.register(fmt)`, no import-time discovery.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from yak.gateway.core.errors import GatewayError, Reason, RecordDecodeError


@dataclass(frozen=True)
class SchemaSpec:
    """What a produce request says about the schema of its keys or values (REST's
    `key_schema`/`key_schema_id`, `value_schema`/`value_schema_id`)."""

    schema: str | None = None
    schema_id: int | None = None


@dataclass
class Encoded:
    data: list[bytes | None]
    schema_id: int | None = None  # the id the registry gave the schema, if any


class RecordFormat(Protocol):
    """An embedded data format. `encode` raises GatewayError(INVALID_PAYLOAD) naming the
    bad item; `decode` raises RecordDecodeError with the index of the first bad item."""

    name: str

    async def encode(self, topic: str, is_key: bool, items: Sequence[Any],
                     schema: SchemaSpec | None) -> Encoded: ...

    async def decode(self, topic: str, is_key: bool,
                     items: Sequence[bytes | None]) -> list[Any]: ...


def _what(is_key: bool) -> str:
    return "key" if is_key else "value"


class BinaryFormat:
    name = "binary"

    async def encode(self, topic: str, is_key: bool, items: Sequence[Any],
                     schema: SchemaSpec | None) -> Encoded:
        out: list[bytes | None] = []
        for data in items:
            if data is None:
                out.append(None)
                continue
            if not isinstance(data, str):
                raise GatewayError(Reason.INVALID_PAYLOAD,
                                   f"binary {_what(is_key)} must be a base64 string")
            try:
                out.append(base64.b64decode(data, validate=True))
            except (binascii.Error, ValueError):
                raise GatewayError(Reason.INVALID_PAYLOAD,
                                   f"{_what(is_key)} is not valid base64") from None
        return Encoded(out)

    async def decode(self, topic: str, is_key: bool,
                     items: Sequence[bytes | None]) -> list[Any]:
        return [b64(data) for data in items]


class JsonFormat:
    name = "json"

    async def encode(self, topic: str, is_key: bool, items: Sequence[Any],
                     schema: SchemaSpec | None) -> Encoded:
        return Encoded([None if d is None else json.dumps(d, separators=(",", ":")).encode()
                        for d in items])

    async def decode(self, topic: str, is_key: bool,
                     items: Sequence[bytes | None]) -> list[Any]:
        out = []
        for i, data in enumerate(items):
            if data is None:
                out.append(None)
                continue
            try:
                out.append(json.loads(data))
            except (ValueError, UnicodeDecodeError):
                raise RecordDecodeError(i, "not JSON; use a binary consumer") from None
        return out


class Formats:
    """The formats this gateway knows, by name."""

    def __init__(self) -> None:
        self._by_name: dict[str, RecordFormat] = {}
        self.register(BinaryFormat())
        self.register(JsonFormat())

    def register(self, fmt: RecordFormat) -> None:
        self._by_name[fmt.name] = fmt

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: str) -> RecordFormat:
        fmt = self._by_name.get(name)
        if fmt is None:
            raise GatewayError(Reason.UNSUPPORTED_FORMAT,
                               f"no {name!r} format in this gateway")
        return fmt


@dataclass
class DecodedBatch:
    """Keys and values of a prefix of `records`; `error` is why the next one failed."""

    keys: list[Any]
    values: list[Any]
    error: RecordDecodeError | None = None


async def decode_records(fmt: RecordFormat, records: Sequence[Any]) -> DecodedBatch:
    """Decode consumed records (anything with topic/partition/offset/key/value), per run
    of one topic; stops before the first record whose key or value cannot be decoded."""
    keys: list[Any] = []
    values: list[Any] = []
    i = 0
    while i < len(records):
        topic = records[i].topic
        j = i
        while j < len(records) and records[j].topic == topic:
            j += 1
        run = records[i:j]
        error: RecordDecodeError | None = None
        while True:  # shrink the run to the prefix before the first bad key or value
            try:
                ks = await fmt.decode(topic, True, [r.key for r in run])
                vs = await fmt.decode(topic, False, [r.value for r in run])
                break
            except RecordDecodeError as e:
                bad = run[e.index]
                where = f"{bad.topic}-{bad.partition}@{bad.offset}"
                error = RecordDecodeError(i + e.index, f"record at {where} is {e.message}")
                run = run[:e.index]
        keys.extend(ks)
        values.extend(vs)
        if error is not None:
            return DecodedBatch(keys, values, error)
        i = j
    return DecodedBatch(keys, values)


# -- byte <-> JSON text helpers for transports that show raw bytes ---------------------


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def text_or_b64(data: bytes | None, force_b64: bool = False) -> tuple[str | None, bool]:
    """UTF-8 text when the bytes are valid UTF-8 (and not `force_b64`), else base64;
    the flag says which."""
    if data is None:
        return None, False
    if not force_b64:
        try:
            return data.decode("utf-8"), False
        except UnicodeDecodeError:
            pass
    return base64.b64encode(data).decode(), True


def from_text(value: Any) -> bytes | None:
    """A JSON value as record bytes: strings as UTF-8, anything else as compact JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()


def from_b64(value: str | None) -> bytes | None:
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise GatewayError(Reason.INVALID_PAYLOAD, "not valid base64") from None
