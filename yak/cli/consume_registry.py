"""`yak consume --registry`: values in Confluent's wire format decoded with the schema
registry (magic byte 0, a 4-byte schema id, then Avro, JSON Schema or Protobuf).

`ValueDecoder` fetches each schema id once over HTTP (with its references, parsed by
`yak.registry`'s parsers) and decodes values to JSON-able objects; what it does with a
value it cannot decode is `--value-format`'s choice (see `consume.py`).
"""

from __future__ import annotations

from typing import Any

from yak.cli.common import fail
from yak.cli.consume_format import Decoded, Record

__all__ = ["VALUE_FORMATS", "ValueDecoder"]

VALUE_FORMATS = ("raw", "schema", "auto")


class ValueDecoder:
    """Confluent wire format -> JSON-able values, each schema id fetched once from the
    registry (with its references). `strict`: a value that cannot be decoded is an error
    (CliError); otherwise it is left raw (None)."""

    def __init__(self, registry: str, timeout: float, strict: bool) -> None:
        self.registry, self.timeout, self.strict = registry, timeout, strict
        self.schemas: dict[int, Any] = {}  # id -> parsed schema, or None: unknown

    def _get(self, path: str) -> Any:
        import httpx

        url = self.registry.rstrip("/") + path
        try:
            r = httpx.get(url, timeout=self.timeout,
                          headers={"accept": "application/vnd.schemaregistry.v1+json"})
        except httpx.HTTPError as e:
            fail(f"schema registry unreachable at {self.registry} ({type(e).__name__}: {e})")
        if r.status_code == 404:
            return None
        try:
            answer = r.json()
        except ValueError:
            answer = None
        if r.status_code >= 400 or not isinstance(answer, dict):
            msg = answer.get("message") if isinstance(answer, dict) else None
            fail(f"schema registry at {self.registry}: {msg or f'HTTP {r.status_code}'}")
        return answer

    def _schema(self, sid: int) -> Any:
        if sid not in self.schemas:
            doc = self._get(f"/schemas/ids/{sid}")
            self.schemas[sid] = None if doc is None else self._parse(sid, doc, 0)
        return self.schemas[sid]

    def _parse(self, sid: int, doc: dict[str, Any], depth: int) -> Any:
        from urllib.parse import quote

        from yak.registry.compat import parse
        from yak.registry.errors import RegistryError

        if depth > 32:
            fail(f"schema {sid}: references nest too deep")
        refs = []
        for ref in doc.get("references") or ():
            sub = self._get(f"/subjects/{quote(ref['subject'], safe='')}/versions/"
                            f"{ref['version']}")
            if sub is None:
                fail(f"schema {sid}: its reference {ref['subject']!r} version"
                     f" {ref['version']} is not in the registry")
            refs.append((ref["name"], self._parse(sid, sub, depth + 1)))
        try:
            return parse(doc.get("schemaType") or "AVRO", doc["schema"], refs)
        except (RegistryError, KeyError) as e:
            fail(f"schema {sid}: {getattr(e, 'message', e)}")

    def __call__(self, rec: Record) -> Decoded | None:
        from yak.registry import serde

        if rec.value is None:
            return None  # a tombstone stays null
        where = f"{rec.topic}/{rec.partition}@{rec.offset}"
        try:
            sid = serde.schema_id_of(rec.value)
        except serde.FramingError:
            return self._refuse(f"value at {where} is not in the schema registry's wire format"
                                " (magic byte 0, schema id); --value-format auto prints it raw")
        schema = self._schema(sid)
        if schema is None:
            return self._refuse(f"value at {where}: schema id {sid} is not in the registry at"
                                f" {self.registry}; --value-format auto prints it raw")
        try:
            return Decoded(sid, serde.decode_payload(schema, memoryview(rec.value)[5:]))
        except Exception as e:  # noqa: BLE001 - fastavro/protobuf/json raise their own
            return self._refuse(f"value at {where} does not decode with schema {sid}"
                                f" ({type(e).__name__}: {e})")

    def _refuse(self, message: str) -> None:
        if self.strict:
            fail(message)
        return None
