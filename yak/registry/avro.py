"""AVRO schemas: parsed and validated by fastavro; Avro's schema-resolution rules for compatibility.

fastavro parses (names, namespaces, defaults checked against their types) but has no
"can a reader with schema R read data written with schema W" check, so that is written
here, following the Avro specification's "Schema Resolution" section (the rules Java's
`SchemaCompatibility` applies and Confluent reports): matching names, promotions
int->long->float->double and string<->bytes, union branches, reader fields without a
writer field need a default, enum symbols, fixed sizes.
"""

from __future__ import annotations

import json
from typing import Any

from fastavro.schema import parse_schema

from yak.registry.errors import invalid_schema

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
_INTERNAL = ("__fastavro_parsed", "__named_schemas")


class AvroSchema:
    """One parsed Avro schema plus the named types it can see (its own and its references')."""

    schema_type = "AVRO"

    def __init__(self, text: str, references: list[AvroSchema] | None = None) -> None:
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise invalid_schema(f"not JSON: {e}") from None
        named: dict[str, Any] = {}
        for ref in references or ():
            named.update(ref.named)
        try:
            parsed = parse_schema(obj, named, _write_hint=False)
        except Exception as e:  # fastavro raises SchemaParseException, UnknownType, ...
            raise invalid_schema(f"{type(e).__name__}: {e}") from None
        self.text = text
        self.obj = obj
        self.parsed = parsed
        self.named = named

    def canonical(self) -> str:
        """The schema as stored and returned (Confluent stores Avro's compact form)."""
        return json.dumps(self.obj, separators=(",", ":"), ensure_ascii=False)

    def normalized(self) -> str:
        """`normalize=true`: full names, attributes in a fixed order."""
        return json.dumps(_strip(self.parsed), separators=(",", ":"), sort_keys=True,
                          ensure_ascii=False)

    def can_read(self, writer: AvroSchema) -> list[str]:
        """Why data written with `writer` cannot be read with this schema (empty: it can)."""
        return _Resolver(self.named, writer.named).check(self.parsed, writer.parsed, "")


def _strip(s: Any) -> Any:
    if isinstance(s, dict):
        return {k: _strip(v) for k, v in s.items() if k not in _INTERNAL}
    if isinstance(s, list):
        return [_strip(v) for v in s]
    return s


def _kind(s: Any) -> str:
    if isinstance(s, list):
        return "union"
    if isinstance(s, dict):
        return str(s["type"])
    return str(s)


def _describe(s: Any) -> str:
    if isinstance(s, dict) and "name" in s:
        return f"{s['type']} {s['name']}"
    return _kind(s)


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


class _Resolver:
    def __init__(self, reader_named: dict[str, Any], writer_named: dict[str, Any]) -> None:
        self.rn = reader_named
        self.wn = writer_named
        self.seen: set[tuple[str, str]] = set()

    def _resolve(self, s: Any, named: dict[str, Any]) -> Any:
        while isinstance(s, str) and s not in PRIMITIVES and s in named:
            s = named[s]
        return s

    def check(self, r: Any, w: Any, path: str) -> list[str]:
        r = self._resolve(r, self.rn)
        w = self._resolve(w, self.wn)
        rk, wk = _kind(r), _kind(w)
        if wk == "union":
            out: list[str] = []
            for i, branch in enumerate(w):
                out += self.check(r, branch, f"{path}/{i}")
            return out
        if rk == "union":
            for branch in r:
                if not self.check(branch, w, path):
                    return []
            return [f"MISSING_UNION_BRANCH at '{path or '/'}': the reader's union has no branch "
                    f"for the writer's {_describe(w)}"]
        if rk != wk:
            if rk in _PROMOTIONS.get(wk, ()):
                return []
            return [f"TYPE_MISMATCH at '{path or '/'}': the reader's {_describe(r)} cannot read "
                    f"the writer's {_describe(w)}"]
        if rk in ("record", "enum", "fixed") and not self._names_match(r, w):
            return [f"NAME_MISMATCH at '{path or '/'}': the reader's {rk} {r['name']} does not "
                    f"match the writer's {w['name']}"]
        if rk == "record":
            key = (r["name"], w["name"])
            if key in self.seen:  # recursive type: already being checked further up
                return []
            self.seen.add(key)
            return self._record(r, w, path)
        if rk == "enum":
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            if missing and "default" not in r:
                return [f"MISSING_ENUM_SYMBOLS at '{path or '/'}': the reader's enum {r['name']} "
                        f"lacks {', '.join(missing)} and has no default"]
            return []
        if rk == "fixed":
            if r["size"] != w["size"]:
                return [f"FIXED_SIZE_MISMATCH at '{path or '/'}': the reader's fixed {r['name']} "
                        f"has size {r['size']}, the writer's {w['size']}"]
            return []
        if rk == "array":
            return self.check(r["items"], w["items"], f"{path}/items")
        if rk == "map":
            return self.check(r["values"], w["values"], f"{path}/values")
        return []

    def _names_match(self, r: dict[str, Any], w: dict[str, Any]) -> bool:
        # The specification compares unqualified names; aliases of the reader also match.
        if _short(r["name"]) == _short(w["name"]):
            return True
        return any(_short(a) == _short(w["name"]) for a in r.get("aliases", ()))

    def _record(self, r: dict[str, Any], w: dict[str, Any], path: str) -> list[str]:
        out: list[str] = []
        wfields = {f["name"]: f for f in w["fields"]}
        for i, rf in enumerate(r["fields"]):
            wf = wfields.get(rf["name"])
            if wf is None:
                for alias in rf.get("aliases", ()):
                    wf = wfields.get(alias)
                    if wf is not None:
                        break
            if wf is None:
                if "default" not in rf:
                    out.append(
                        f"READER_FIELD_MISSING_DEFAULT_VALUE at '{path}/fields/{i}': the field "
                        f"'{rf['name']}' has no default value and is missing in the writer's "
                        f"record {w['name']}"
                    )
                continue
            out += self.check(rf["type"], wf["type"], f"{path}/fields/{i}/type")
        return out
