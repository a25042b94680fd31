"""JSON schemas: validated against their draft's meta-schema by `jsonschema`; compatibility rules.

`jsonschema` validates schemas and instances but cannot say whether one schema accepts
everything another accepts, which is what compatibility is: BACKWARD means every document
valid under the old schema is valid under the new one. `_Cover` checks that structurally
for the keywords schemas are made of (type, properties/required/additionalProperties,
items, enum/const, numeric and length bounds, pattern, anyOf/oneOf/allOf, local `$ref`s),
reporting Confluent's difference names (TYPE_NARROWED, REQUIRED_ATTRIBUTE_ADDED,
PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL, ...). Anything it cannot prove (a changed pattern,
say) counts as incompatible, as in Confluent's JSON Schema rules.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema.exceptions import SchemaError
from jsonschema.validators import Draft7Validator, validator_for

from yak.registry.errors import invalid_schema

_ANY = {"null", "boolean", "object", "array", "number", "string", "integer"}


class JsonSchema:
    schema_type = "JSON"

    def __init__(self, text: str, references: list[JsonSchema] | None = None) -> None:
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise invalid_schema(f"not JSON: {e}") from None
        if not isinstance(obj, dict | bool):
            raise invalid_schema("a JSON schema is an object or a boolean")
        try:
            validator_for(obj, default=Draft7Validator).check_schema(obj)
        except SchemaError as e:
            where = "/".join(str(p) for p in e.path)
            raise invalid_schema(f"{e.message}" + (f" at '{where}'" if where else "")) from None
        self.text = text
        self.obj = obj
        self.references = references or []

    def canonical(self) -> str:
        return json.dumps(self.obj, separators=(",", ":"), ensure_ascii=False)

    def normalized(self) -> str:
        return json.dumps(self.obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)

    def can_read(self, writer: JsonSchema) -> list[str]:
        """Why a document valid under `writer` may be invalid under this schema."""
        return _Cover(self.obj, writer.obj).check(self.obj, writer.obj, "#")


def _types(s: dict[str, Any]) -> set[str] | None:
    t = s.get("type")
    if t is None:
        if "enum" in s or "const" in s:
            vals = s["enum"] if "enum" in s else [s["const"]]
            return {_type_of(v) for v in vals}
        return None
    return {t} if isinstance(t, str) else set(t)


def _type_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _is_true(s: Any) -> bool:
    return s is True or s == {}


class _Cover:
    """`check(new, old)`: what old accepts that new does not (each a Confluent difference)."""

    def __init__(self, new_root: Any, old_root: Any) -> None:
        self.roots = {"new": new_root, "old": old_root}
        self.seen: set[tuple[int, int]] = set()

    def _deref(self, s: Any, side: str) -> Any:
        for _ in range(32):
            if not (isinstance(s, dict) and isinstance(s.get("$ref"), str)):
                return s
            ref = s["$ref"]
            if not ref.startswith("#"):
                return s  # a reference to another subject's schema: compared by name only
            node: Any = self.roots[side]
            for part in [p for p in ref[1:].split("/") if p]:
                part = part.replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and part in node:
                    node = node[part]
                else:
                    return s
            s = node
        return s

    def check(self, new: Any, old: Any, path: str) -> list[str]:
        new, old = self._deref(new, "new"), self._deref(old, "old")
        if _is_true(new) or old is False:
            return []
        if new is False:
            return [f"TYPE_NARROWED at '{path}': the new schema accepts nothing"]
        if old is True:
            old = {}
        key = (id(new), id(old))
        if key in self.seen:
            return []
        self.seen.add(key)
        if "$ref" in new or "$ref" in old:
            if new.get("$ref") != old.get("$ref"):
                return [f"TYPE_CHANGED at '{path}': $ref {old.get('$ref')} became "
                        f"{new.get('$ref')}"]
            return []
        # Combinations: every branch the old schema allows must fit the new schema.
        for word in ("anyOf", "oneOf"):
            if word in old:
                out: list[str] = []
                for i, branch in enumerate(old[word]):
                    merged = {k: v for k, v in old.items() if k != word}
                    sub = self._merge(merged, self._deref(branch, "old"))
                    out += self.check(new, sub, f"{path}/{word}/{i}")
                return out
        for word in ("anyOf", "oneOf"):
            if word in new:
                rest = {k: v for k, v in new.items() if k != word}
                if rest and self.check(rest, old, path):
                    return self.check(rest, old, path)
                for branch in new[word]:
                    if not self.check(self._merge(rest, self._deref(branch, "new")), old, path):
                        return []
                return [f"COMBINED_TYPE_SUBSCHEMAS_CHANGED at '{path}': no branch of the new "
                        f"{word} accepts everything the old schema accepts"]
        if "allOf" in new:
            out = []
            rest = {k: v for k, v in new.items() if k != "allOf"}
            for branch in [rest, *new["allOf"]]:
                out += self.check(branch, old, path)
            return out
        if "allOf" in old:
            merged = {k: v for k, v in old.items() if k != "allOf"}
            for branch in old["allOf"]:
                merged = self._merge(merged, self._deref(branch, "old"))
            return self.check(new, merged, path)
        if "not" in new and new.get("not") != old.get("not"):
            return [f"NOT_TYPE_EXTENDED at '{path}': 'not' changed"]
        return self._plain(new, old, path)

    @staticmethod
    def _merge(a: dict[str, Any], b: Any) -> Any:
        if not isinstance(b, dict):
            return a if a else b
        out = dict(a)
        for k, v in b.items():
            if k == "properties" and k in out:
                out[k] = {**out[k], **v}
            elif k == "required" and k in out:
                out[k] = sorted(set(out[k]) | set(v))
            else:
                out[k] = v
        return out

    def _plain(self, new: dict[str, Any], old: dict[str, Any], path: str) -> list[str]:
        out: list[str] = []
        nt, ot = _types(new), _types(old)
        if nt is not None:
            if ot is None:
                ot = set(_ANY)
                if nt >= _ANY - {"integer"}:
                    ot = set()
            lost = {t for t in ot if t not in nt and not (t == "integer" and "number" in nt)}
            if lost:
                out.append(f"TYPE_NARROWED at '{path}': the new schema no longer accepts "
                           f"{', '.join(sorted(lost))}")
                return out
        if "enum" in new or "const" in new:
            allowed = new["enum"] if "enum" in new else [new["const"]]
            before = old["enum"] if "enum" in old else [old["const"]] if "const" in old else None
            if before is None:
                out.append(f"ENUM_ARRAY_NARROWED at '{path}': values are now restricted")
            else:
                gone = [v for v in before if v not in allowed]
                if gone:
                    out.append(f"ENUM_ARRAY_NARROWED at '{path}': {json.dumps(gone)} no longer "
                               "allowed")
        out += self._bounds(new, old, path)
        if "pattern" in new and new["pattern"] != old.get("pattern"):
            out.append(f"PATTERN_CHANGED at '{path}': pattern {new['pattern']!r}")
        if "format" in new and new["format"] != old.get("format"):
            out.append(f"FORMAT_CHANGED at '{path}': format {new['format']!r}")
        if "uniqueItems" in new and new["uniqueItems"] and not old.get("uniqueItems"):
            out.append(f"UNIQUE_ITEMS_ADDED at '{path}'")
        ni, oi = new.get("items"), old.get("items")
        if ni is not None and not isinstance(ni, list):
            out += self.check(ni, True if oi is None or isinstance(oi, list) else oi,
                              f"{path}/items")
        out += self._object(new, old, path)
        return out

    def _bounds(self, new: dict[str, Any], old: dict[str, Any], path: str) -> list[str]:
        out = []
        for word, lower, name in (
            ("maxLength", False, "MAX_LENGTH"), ("minLength", True, "MIN_LENGTH"),
            ("maximum", False, "MAXIMUM"), ("minimum", True, "MINIMUM"),
            ("exclusiveMaximum", False, "EXCLUSIVE_MAXIMUM"),
            ("exclusiveMinimum", True, "EXCLUSIVE_MINIMUM"),
            ("maxItems", False, "MAX_ITEMS"), ("minItems", True, "MIN_ITEMS"),
            ("maxProperties", False, "MAX_PROPERTIES"), ("minProperties", True, "MIN_PROPERTIES"),
        ):
            if word not in new or isinstance(new[word], bool):
                continue
            if word not in old:
                out.append(f"{name}_ADDED at '{path}': {word} {new[word]}")
            elif (new[word] > old[word]) if lower else (new[word] < old[word]):
                change = "INCREASED" if lower else "DECREASED"
                out.append(f"{name}_{change} at '{path}': {word} {old[word]} -> {new[word]}")
        if "multipleOf" in new:
            om = old.get("multipleOf")
            if om is None or (om / new["multipleOf"]) % 1:
                out.append(f"MULTIPLE_OF_CHANGED at '{path}': multipleOf {new['multipleOf']}")
        return out

    def _object(self, new: dict[str, Any], old: dict[str, Any], path: str) -> list[str]:
        out: list[str] = []
        added_req = sorted(set(new.get("required", ())) - set(old.get("required", ())))
        for name in added_req:
            out.append(f"REQUIRED_ATTRIBUTE_ADDED at '{path}': '{name}' is now required")
        np_, op = new.get("properties", {}), old.get("properties", {})
        nap = new.get("additionalProperties", True)
        oap = old.get("additionalProperties", True)
        for name, sub in np_.items():
            if name in op:
                out += self.check(sub, op[name], f"{path}/properties/{name}")
            elif oap is False:
                continue  # the old schema never allowed it: nothing old can break
            elif _is_true(oap):
                if not _is_true(sub):
                    out.append(f"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at '{path}/properties/"
                               f"{name}': old documents may carry any '{name}'")
            else:
                errs = self.check(sub, oap, f"{path}/properties/{name}")
                if errs:
                    out.append(f"PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at "
                               f"'{path}/properties/{name}'")
        for name, sub in op.items():
            if name in np_:
                continue
            if nap is False:
                out.append(f"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at '{path}/properties/"
                           f"{name}'")
            elif not _is_true(nap) and self.check(nap, sub, f"{path}/properties/{name}"):
                out.append(f"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at "
                           f"'{path}/properties/{name}'")
        if oap is not False and not _is_true(nap):
            if nap is False:
                out.append(f"ADDITIONAL_PROPERTIES_REMOVED at '{path}': the content model is "
                           "now closed")
            elif _is_true(oap):
                out.append(f"ADDITIONAL_PROPERTIES_NARROWED at '{path}'")
            else:
                out += self.check(nap, oap, f"{path}/additionalProperties")
        return out
