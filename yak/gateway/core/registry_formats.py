"""The REST proxy's `avro`, `jsonschema` and `protobuf` embedded formats, plugged into the
gateway core's one encoding point (`yak.gateway.core.formats`).

Why here and not in `yak.registry`: a format is the gateway's view of the registry. It
speaks the gateway core's vocabulary (`Encoded`, `SchemaSpec`, `GatewayError` with a
`Reason`) and uses only the registry's public service (`SchemaRegistry`, `serde`,
`RegistryError`). So the gateway, the edge that composes the two (`yak.gateway.app`),
imports the registry, and the registry imports nothing of the gateway: the schema
registry stays a service of its own (issue 22; `tests/test_house.py` keeps it so).
Moving the gateway's error vocabulary down into a package both import would have made
the registry depend on the gateway's vocabulary all the same.

Produce: `value_schema` (registered under the topic's subject, `<topic>-value` or
`<topic>-key`, as Confluent's REST proxy does) or `value_schema_id`; values in the schema
type's JSON form (Avro's JSON encoding for Avro). The schema is looked up once per batch;
each value becomes Confluent's framing: magic byte 0, the 4-byte id, the payload.
Consume: a consumer created with one of these formats gets each value decoded with the
schema its id names (looked up once per id, then cached).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from yak.gateway.core.errors import GatewayError, Reason, RecordDecodeError
from yak.gateway.core.formats import Encoded, SchemaSpec
from yak.registry import serde
from yak.registry.errors import RegistryError
from yak.registry.service import SchemaRegistry


class RegistryFormat:
    """One schema type's format; `name` is the X of application/vnd.kafka.X.v2+json."""

    def __init__(self, registry: SchemaRegistry, name: str, schema_type: str) -> None:
        self.registry = registry
        self.name = name
        self.schema_type = schema_type

    async def _schema(self, topic: str, is_key: bool, spec: SchemaSpec | None) -> tuple[int, Any]:
        what = "key" if is_key else "value"
        reg = self.registry
        try:
            await reg.ensure_started()
            if spec is not None and spec.schema_id is not None:
                sv = reg.by_id(spec.schema_id)
            elif spec is not None and spec.schema is not None:
                sv = await reg.register_via_leader(f"{topic}-{what}", self.schema_type,
                                                   spec.schema)
            else:
                raise GatewayError(Reason.INVALID_PAYLOAD,
                                   f"the {self.name} format needs {what}_schema or "
                                   f"{what}_schema_id")
            if sv.schema_type != self.schema_type:
                raise GatewayError(Reason.INVALID_PAYLOAD,
                                   f"schema {sv.id} is {sv.schema_type}, not {self.schema_type}")
            return sv.id, reg.parsed(sv)
        except RegistryError as e:
            raise GatewayError(Reason.INVALID_PAYLOAD, f"{what} schema: {e.message}") from None

    async def encode(self, topic: str, is_key: bool, items: Sequence[Any],
                     schema: SchemaSpec | None) -> Encoded:
        if all(item is None for item in items) and (schema is None or (
                schema.schema is None and schema.schema_id is None)):
            return Encoded([None] * len(items))
        schema_id, parsed = await self._schema(topic, is_key, schema)
        out: list[bytes | None] = []
        for i, item in enumerate(items):
            if item is None:
                out.append(None)
                continue
            try:
                out.append(serde.frame(schema_id, serde.encode_json_datum(parsed, item)))
            except Exception as e:  # fastavro/jsonschema/protobuf each raise their own
                raise GatewayError(Reason.INVALID_PAYLOAD,
                                   f"record {i}: {'key' if is_key else 'value'} does not match "
                                   f"schema {schema_id}: {e}") from None
        return Encoded(out, schema_id)

    async def decode(self, topic: str, is_key: bool,
                     items: Sequence[bytes | None]) -> list[Any]:
        reg = self.registry
        out: list[Any] = []
        for i, data in enumerate(items):
            if data is None:
                out.append(None)
                continue
            try:
                await reg.ensure_started()
                view = memoryview(data)
                schema_id = serde.schema_id_of(view)
                parsed = reg.parsed(reg.by_id(schema_id))
                out.append(serde.decode_payload(parsed, view[5:]))
            except RegistryError as e:
                raise RecordDecodeError(i, f"not decodable: {e.message}") from None
            except Exception as e:
                raise RecordDecodeError(i, f"not valid {self.name} ({e})") from None
        return out


def register_formats(core: Any, registry: SchemaRegistry) -> None:
    """Register the three formats on `core` (a GatewayCore); `create_app` calls this."""
    for name, kind in (("avro", "AVRO"), ("jsonschema", "JSON"), ("protobuf", "PROTOBUF")):
        core.formats.register(RegistryFormat(registry, name, kind))
