"""Schema types and compatibility levels, independent of storage and HTTP.

Each type's `can_read(writer)` answers "can data written with `writer` be read with this
schema" (Avro's resolution rules, JSON Schema's "accepts everything the other accepts",
Confluent's Protobuf difference rules). A level combines those checks:

| level | the new schema must |
|---|---|
| BACKWARD | read data written with the latest registered version |
| FORWARD | be readable by the latest version |
| FULL | both |
| *_TRANSITIVE | the same against every registered version, not just the latest |
| NONE | nothing |
"""

from __future__ import annotations

from typing import Any, Protocol

from yak.registry.avro import AvroSchema
from yak.registry.errors import RegistryError, invalid_schema
from yak.registry.json_schema import JsonSchema
from yak.registry.proto import ProtobufSchema

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE", "NONE")
DEFAULT_LEVEL = "BACKWARD"


class ParsedSchema(Protocol):
    schema_type: str

    def canonical(self) -> str: ...

    def normalized(self) -> str: ...

    def can_read(self, writer: Any) -> list[str]: ...


def parse(schema_type: str | None, text: str, references: list[tuple[str, Any]]) -> Any:
    """Parse and validate; `references` are (name, parsed schema) of the referenced versions."""
    kind = (schema_type or "AVRO").upper()
    if kind not in SCHEMA_TYPES:
        raise RegistryError(422, 42201, f"Invalid schema type {schema_type!r}: use one of "
                            f"{', '.join(SCHEMA_TYPES)}")
    if not isinstance(text, str) or not text.strip():
        raise invalid_schema("the schema is empty")
    for name, ref in references:
        if ref.schema_type != kind:
            raise invalid_schema(f"reference {name!r} is a {ref.schema_type} schema, "
                                 f"not {kind}")
    if kind == "AVRO":
        return AvroSchema(text, [r for _, r in references])
    if kind == "JSON":
        return JsonSchema(text, [r for _, r in references])
    return ProtobufSchema(text, references)


def identity(schema: Any, normalize: bool = False) -> str:
    """What "the same schema" means for ids: the descriptor for Protobuf, the text otherwise."""
    if isinstance(schema, ProtobufSchema):
        return schema.key()
    return schema.normalized() if normalize else schema.canonical()


def check(level: str, new: Any, previous: list[Any]) -> list[str]:
    """Why `new` breaks `level` against `previous` (oldest first); empty when compatible."""
    if level == "NONE" or not previous:
        return []
    targets = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    base = level.removesuffix("_TRANSITIVE")
    errors: list[str] = []
    for old in reversed(targets):
        if base in ("BACKWARD", "FULL"):
            errors += [f"{e} (new schema reading data of the old one)" for e in new.can_read(old)]
        if base in ("FORWARD", "FULL"):
            errors += [f"{e} (old schema reading data of the new one)" for e in old.can_read(new)]
        if errors:
            break
    return errors
