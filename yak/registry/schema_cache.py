"""Parsed schemas, once per id, and finding a schema by its content.

Parsing (fastavro, jsonschema, protoc) is the registry's costly step, so each stored
schema is parsed once and kept by id. Registering or looking up a schema compares
content: `compat.identity` of the parsed schema (normalized on request) with the same
references. The plain-content index is rebuilt only when the state has changed.
"""

from __future__ import annotations

import contextlib
from typing import Any

from yak.registry import compat
from yak.registry.errors import RegistryError
from yak.registry.state import Reference, RegistryState, SchemaVersion


class SchemaCache:
    """The parsed form of the schemas in `state`, and lookups by content."""

    def __init__(self, state: RegistryState) -> None:
        self.state = state
        self._parsed: dict[int, Any] = {}
        self._index: dict[tuple[str, str, tuple[Any, ...]], int] = {}
        self._indexed_changes = -1

    def parsed(self, sv: SchemaVersion, _depth: int = 0) -> Any:
        cached = self._parsed.get(sv.id)
        if cached is not None:
            return cached
        schema = compat.parse(sv.schema_type, sv.schema, self.resolve(sv.references, _depth + 1))
        self._parsed[sv.id] = schema
        return schema

    def remember(self, schema_id: int, parsed: Any) -> None:
        """Keep `parsed` as the parsed form of `schema_id` unless one is already kept."""
        self._parsed.setdefault(schema_id, parsed)

    def resolve(self, refs: list[Reference], depth: int = 0) -> list[tuple[str, Any]]:
        if depth > 32:
            raise RegistryError(422, 42201, "Invalid schema: references nest too deep")
        out = []
        for ref in refs:
            sv = self.state.subjects.get(ref.subject, {}).get(ref.version)
            if sv is None:
                raise RegistryError(422, 42201, f"Invalid schema: reference {ref.name!r} names "
                                    f"subject '{ref.subject}' version {ref.version}, which "
                                    "does not exist")
            out.append((ref.name, self.parsed(sv, depth)))
        return out

    def _content_index(self) -> dict[tuple[str, str, tuple[Any, ...]], int]:
        if self._indexed_changes != self.state.changes:
            index: dict[tuple[str, str, tuple[Any, ...]], int] = {}
            for schema_id, sv in sorted(self.state.by_id.items()):
                try:
                    ident = compat.identity(self.parsed(sv))
                except RegistryError:
                    continue
                refs = tuple((r.name, r.subject, r.version) for r in sv.references)
                index.setdefault((sv.schema_type, ident, refs), schema_id)
            self._index = index
            self._indexed_changes = self.state.changes
        return self._index

    def find_id(self, schema_type: str, parsed: Any, refs: list[Reference],
                normalize: bool) -> int | None:
        """The id of a stored schema with this content and references, if any."""
        rkey = tuple((r.name, r.subject, r.version) for r in refs)
        if not normalize:
            return self._content_index().get((schema_type, compat.identity(parsed), rkey))
        want = compat.identity(parsed, normalize=True)
        for schema_id, sv in sorted(self.state.by_id.items()):
            if sv.schema_type != schema_type or tuple(
                    (r.name, r.subject, r.version) for r in sv.references) != rkey:
                continue
            with contextlib.suppress(RegistryError):
                if compat.identity(self.parsed(sv), normalize=True) == want:
                    return schema_id
        return None

    def find_version(self, subject: str, kind: str, parsed: Any, refs: list[Reference],
                     normalize: bool, deleted: bool = False) -> SchemaVersion | None:
        """The subject's latest version with this content and references, if any (soft
        deleted ones too with `deleted`)."""
        want = compat.identity(parsed, normalize)
        rkey = tuple((r.name, r.subject, r.version) for r in refs)
        for sv in reversed(self.state.versions(subject, deleted)):
            if sv.schema_type != kind or tuple(
                    (r.name, r.subject, r.version) for r in sv.references) != rkey:
                continue
            with contextlib.suppress(RegistryError):
                if compat.identity(self.parsed(sv), normalize) == want:
                    return sv
        return None
