"""Compatibility matrices per schema type, on the cases Confluent documents.

Each case is (old schema, new schema, {level: compatible?}); the registry's answer for the
new schema registered after the old one must match for every level listed. These run on
the parsed schemas directly (no broker): the HTTP tests check the same rules end to end.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from yak.registry import compat
from yak.registry.errors import RegistryError


def avro(*fields: Any, name: str = "User") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "acme",
                       "fields": list(fields)})


F_NAME = {"name": "name", "type": "string"}
F_AGE_DEFAULT = {"name": "age", "type": "int", "default": 0}
F_AGE = {"name": "age", "type": "int"}

Y, N = True, False

AVRO_CASES = [
    # (description, old, new, {level: compatible})
    ("add a field with a default", avro(F_NAME), avro(F_NAME, F_AGE_DEFAULT),
     {"BACKWARD": Y, "FORWARD": Y, "FULL": Y}),
    ("add a field without a default", avro(F_NAME), avro(F_NAME, F_AGE),
     {"BACKWARD": N, "FORWARD": Y, "FULL": N, "NONE": Y}),
    ("delete a field with a default", avro(F_NAME, F_AGE_DEFAULT), avro(F_NAME),
     {"BACKWARD": Y, "FORWARD": Y, "FULL": Y}),
    ("delete a field without a default", avro(F_NAME, F_AGE), avro(F_NAME),
     {"BACKWARD": Y, "FORWARD": N, "FULL": N}),
    ("promote int to long", avro({"name": "n", "type": "int"}), avro({"name": "n", "type": "long"}),
     {"BACKWARD": Y, "FORWARD": N}),
    ("narrow long to int", avro({"name": "n", "type": "long"}), avro({"name": "n", "type": "int"}),
     {"BACKWARD": N, "FORWARD": Y}),
    ("string to bytes", avro({"name": "n", "type": "string"}), avro({"name": "n", "type": "bytes"}),
     {"BACKWARD": Y, "FORWARD": Y}),
    ("change a type", avro({"name": "n", "type": "int"}), avro({"name": "n", "type": "string"}),
     {"BACKWARD": N, "FORWARD": N, "NONE": Y}),
    ("add a union branch", avro({"name": "n", "type": ["null", "int"]}),
     avro({"name": "n", "type": ["null", "int", "string"]}), {"BACKWARD": Y, "FORWARD": N}),
    ("make a field nullable", avro({"name": "n", "type": "int"}),
     avro({"name": "n", "type": ["null", "int"]}), {"BACKWARD": Y, "FORWARD": N}),
    ("add an enum symbol",
     avro({"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["R", "G"]}}),
     avro({"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["R", "G", "B"]}}),
     {"BACKWARD": Y, "FORWARD": N}),
    ("add an enum symbol, reader has a default",
     avro({"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["R", "G"],
                                 "default": "R"}}),
     avro({"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["R", "G", "B"],
                                 "default": "R"}}),
     {"BACKWARD": Y, "FORWARD": Y, "FULL": Y}),
    ("rename the record", avro(F_NAME), avro(F_NAME, name="Person"), {"BACKWARD": N}),
    ("rename the record with an alias", avro(F_NAME),
     json.dumps({"type": "record", "name": "Person", "aliases": ["User"], "fields": [F_NAME]}),
     {"BACKWARD": Y}),
    ("resize a fixed", avro({"name": "f", "type": {"type": "fixed", "name": "F", "size": 4}}),
     avro({"name": "f", "type": {"type": "fixed", "name": "F", "size": 8}}), {"BACKWARD": N}),
    ("array items promoted", avro({"name": "a", "type": {"type": "array", "items": "int"}}),
     avro({"name": "a", "type": {"type": "array", "items": "double"}}), {"BACKWARD": Y}),
    ("recursive record gains a defaulted field",
     avro({"name": "next", "type": ["null", "acme.User"], "default": None}),
     avro({"name": "next", "type": ["null", "acme.User"], "default": None}, F_AGE_DEFAULT),
     {"BACKWARD": Y, "FULL": Y}),
]


def js(obj: dict[str, Any]) -> str:
    return json.dumps(obj)


def obj(props: dict[str, Any], required: list[str] | None = None,
        additional: Any = None) -> str:
    o: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        o["required"] = required
    if additional is not None:
        o["additionalProperties"] = additional
    return js(o)


S, INT = {"type": "string"}, {"type": "integer"}

JSON_CASES = [
    ("add a property to an open content model", obj({"a": S}), obj({"a": S, "b": INT}),
     {"BACKWARD": N, "FORWARD": Y}),
    ("remove a property from an open content model", obj({"a": S, "b": INT}), obj({"a": S}),
     {"BACKWARD": Y, "FORWARD": N}),
    ("add a property to a closed content model", obj({"a": S}, additional=False),
     obj({"a": S, "b": INT}, additional=False), {"BACKWARD": Y, "FORWARD": N}),
    ("remove a property from a closed content model", obj({"a": S, "b": INT}, additional=False),
     obj({"a": S}, additional=False), {"BACKWARD": N, "FORWARD": Y}),
    ("make a property required", obj({"a": S}), obj({"a": S}, required=["a"]),
     {"BACKWARD": N, "FORWARD": Y}),
    ("widen integer to number", obj({"n": INT}), obj({"n": {"type": "number"}}),
     {"BACKWARD": Y, "FORWARD": N}),
    ("narrow to a different type", obj({"n": S}), obj({"n": INT}),
     {"BACKWARD": N, "FORWARD": N, "NONE": Y}),
    ("lower maxLength", obj({"a": {"type": "string", "maxLength": 10}}),
     obj({"a": {"type": "string", "maxLength": 5}}), {"BACKWARD": N, "FORWARD": Y}),
    ("extend an enum", obj({"c": {"enum": ["r", "g"]}}), obj({"c": {"enum": ["r", "g", "b"]}}),
     {"BACKWARD": Y, "FORWARD": N}),
    ("close the content model", obj({"a": S}), obj({"a": S}, additional=False),
     {"BACKWARD": N, "FORWARD": Y}),
    ("add a oneOf branch", js({"oneOf": [S, INT]}), js({"oneOf": [S, INT, {"type": "null"}]}),
     {"BACKWARD": Y, "FORWARD": N}),
    ("local $ref to the same definition", js({"definitions": {"x": S},
                                              "properties": {"a": {"$ref": "#/definitions/x"}}}),
     js({"definitions": {"x": {"type": ["string", "null"]}},
         "properties": {"a": {"$ref": "#/definitions/x"}}}), {"BACKWARD": Y, "FORWARD": N}),
]


def proto(body: str, syntax: str = "proto3") -> str:
    return f'syntax = "{syntax}";\npackage acme;\n{body}\n'


PROTO_CASES = [
    ("add a field", proto("message U { string name = 1; }"),
     proto("message U { string name = 1; int32 age = 2; }"), {"BACKWARD": Y, "FULL": Y}),
    ("remove a field", proto("message U { string name = 1; int32 age = 2; }"),
     proto("message U { string name = 1; }"), {"BACKWARD": Y, "FULL": Y}),
    ("rename a field", proto("message U { string name = 1; }"),
     proto("message U { string full_name = 1; }"), {"BACKWARD": Y, "FULL": Y}),
    ("int32 to int64 (same wire family)", proto("message U { int32 n = 1; }"),
     proto("message U { int64 n = 1; }"), {"BACKWARD": Y, "FULL": Y}),
    ("int32 to string", proto("message U { int32 n = 1; }"), proto("message U { string n = 1; }"),
     {"BACKWARD": N, "FORWARD": N, "NONE": Y}),
    ("sint32 to int32 (zigzag vs plain)", proto("message U { sint32 n = 1; }"),
     proto("message U { int32 n = 1; }"), {"BACKWARD": N}),
    ("scalar to message", proto("message U { int32 n = 1; }"),
     proto("message U { V n = 1; } message V { int32 x = 1; }"), {"BACKWARD": N}),
    ("remove a message", proto("message U { int32 n = 1; } message V { int32 x = 1; }"),
     proto("message U { int32 n = 1; }"), {"BACKWARD": N}),
    ("add a message", proto("message U { int32 n = 1; }"),
     proto("message U { int32 n = 1; } message V { int32 x = 1; }"), {"BACKWARD": Y}),
    ("add a required field (proto2)", proto("message U { optional int32 n = 1; }", "proto2"),
     proto("message U { optional int32 n = 1; required int32 m = 2; }", "proto2"),
     {"BACKWARD": N}),
    ("move two fields into a new oneof", proto("message U { int32 a = 1; string b = 2; }"),
     proto("message U { oneof x { int32 a = 1; string b = 2; } }"), {"BACKWARD": N}),
    ("move one field into a new oneof", proto("message U { int32 a = 1; }"),
     proto("message U { oneof x { int32 a = 1; } }"), {"BACKWARD": Y}),
    ("change a nested message's field type",
     proto("message U { V v = 1; } message V { int32 x = 1; }"),
     proto("message U { V v = 1; } message V { string x = 1; }"), {"BACKWARD": N}),
    ("add an enum value", proto("message U { E e = 1; } enum E { A = 0; }"),
     proto("message U { E e = 1; } enum E { A = 0; B = 1; }"), {"BACKWARD": Y, "FULL": Y}),
]


def _run(kind: str, old: str, new: str, level: str) -> list[str]:
    o = compat.parse(kind, old, [])
    n = compat.parse(kind, new, [])
    return compat.check(level, n, [o])


@pytest.mark.parametrize(("kind", "case"),
                         [("AVRO", c) for c in AVRO_CASES] + [("JSON", c) for c in JSON_CASES]
                         + [("PROTOBUF", c) for c in PROTO_CASES],
                         ids=lambda x: x if isinstance(x, str) else x[0])
def test_matrix(kind: str, case: tuple[str, str, str, dict[str, bool]]) -> None:
    _, old, new, expected = case
    for level, ok in expected.items():
        errors = _run(kind, old, new, level)
        assert (not errors) == ok, f"{level}: {errors}"
        if not ok:
            assert all(e.split(" ")[0].isupper() for e in errors), errors  # names the rule


def test_transitive_levels_check_every_version() -> None:
    """v3 reads v2's data but not v1's: BACKWARD accepts it, BACKWARD_TRANSITIVE does not."""
    v1 = compat.parse("AVRO", avro(F_NAME), [])
    v2 = compat.parse("AVRO", avro(F_NAME, F_AGE_DEFAULT), [])
    v3 = compat.parse("AVRO", avro(F_NAME, F_AGE), [])
    assert compat.check("BACKWARD", v3, [v1, v2]) == []
    errors = compat.check("BACKWARD_TRANSITIVE", v3, [v1, v2])
    assert errors and errors[0].startswith("READER_FIELD_MISSING_DEFAULT_VALUE")
    # FORWARD_TRANSITIVE: v1 cannot read v0's... the reverse direction, against all versions
    w1 = compat.parse("AVRO", avro(F_NAME, F_AGE), [])
    w2 = compat.parse("AVRO", avro(F_NAME, F_AGE_DEFAULT), [])
    w3 = compat.parse("AVRO", avro(F_NAME), [])
    assert compat.check("FORWARD", w3, [w1, w2]) == []
    assert compat.check("FORWARD_TRANSITIVE", w3, [w1, w2])


@pytest.mark.parametrize(("kind", "text", "needle"), [
    ("AVRO", '{"type": "record", "name": "A", "fields": [{"name": "x", "type": "nope"}]}',
     "nope"),
    ("AVRO", '{"type": "record", "name": "A", "fields": [{"name": "x", "type": "int", '
             '"default": "text"}]}', "Default value"),
    ("AVRO", "{not json", "not JSON"),
    ("JSON", '{"type": "strin"}', "strin"),
    ("JSON", "[1, 2]", "object or a boolean"),
    ("PROTOBUF", 'syntax = "proto3"; message A { int32 a = 1; int32 b = 1; }',
     "already been used"),
    ("PROTOBUF", 'syntax = "proto3"; message A { Missing m = 1; }', '"Missing" is not defined'),
])
def test_malformed_schemas_are_42201_with_the_parsers_message(kind: str, text: str,
                                                              needle: str) -> None:
    with pytest.raises(RegistryError) as info:
        compat.parse(kind, text, [])
    assert info.value.status == 422 and info.value.error_code == 42201
    assert needle in info.value.message


def test_protobuf_text_and_descriptor_forms_are_one_schema() -> None:
    from yak.registry.proto_text import render

    text = proto("""import "google/protobuf/timestamp.proto";
message U {
  string name = 1;
  map<string, int64> counts = 2;
  oneof contact { string email = 3; string phone = 4; }
  optional bool vip = 5;
  repeated Item items = 6;
  google.protobuf.Timestamp at = 7;
  message Item { int32 qty = 1; Kind kind = 2; enum Kind { A = 0; B = 1; } }
  reserved 10 to 12;
  reserved "legacy";
}""")
    a = compat.parse("PROTOBUF", text, [])
    b = compat.parse("PROTOBUF", a.serialized(), [])   # what confluent-kafka's serializer sends
    c = compat.parse("PROTOBUF", render(b.fdp), [])     # what the registry shows for b
    assert compat.identity(a) == compat.identity(b) == compat.identity(c)
    msg = a.message_class([0])(name="x", counts={"k": 2})
    assert b.message_class([0]).FromString(msg.SerializeToString()).counts["k"] == 2
