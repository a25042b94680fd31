"""`yak consume --registry`: values in Confluent's wire format written by `yak produce
--schema-subject` (Avro, JSON Schema, Protobuf) read back from a real broker and its gateway's
registry and printed as JSON; raw or unknown-id values refused (one line, exit 1) or printed
raw with --value-format auto."""

from __future__ import annotations

import json

import pytest
from registry.conftest import served  # noqa: F401 (fixture)

from tests.cli.test_cli import ok, one_line_error, yak


@pytest.mark.slow
def test_consume_decodes_registry_values(served) -> None:  # noqa: ANN001, F811
    from confluent_kafka.schema_registry import Schema

    b = ["--bootstrap", served.bootstrap]
    reg = ["--registry", served.url, *b]
    sr = served.sr()
    avro = {"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "int"}, {"name": "item", "type": "string"}]}
    avro_id = sr.register_schema("sr-orders-value", Schema(json.dumps(avro), "AVRO"))
    js = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    json_id = sr.register_schema("sr-counts-value", Schema(json.dumps(js), "JSON"))
    proto = 'syntax = "proto3";\nmessage Point { int32 x = 1; string label = 2; }\n'
    proto_id = sr.register_schema("sr-points-value", Schema(proto, "PROTOBUF"))
    ok("topic", "create", "sr-orders", *b)
    ok("produce", "sr-orders", "-K", "|", "--schema-subject", "sr-orders-value", *reg,
       stdin='a|{"id": 1, "item": "tea"}\nb|{"id": 2, "item": "cake"}\n')
    ok("produce", "sr-orders", "--schema-subject", "sr-counts-value", *reg, stdin='{"n": 5}\n')
    ok("produce", "sr-orders", "--schema-subject", "sr-points-value", *reg,
       stdin='{"x": 7, "label": "p"}\n')

    read = ["sr-orders", "--from-beginning", "-n", "4", "--idle-timeout", "10", *reg]
    out = ok("consume", *read, "--print-key")
    assert out.splitlines() == ['a\t{"id":1,"item":"tea"}', 'b\t{"id":2,"item":"cake"}',
                                '\t{"n":5}', '\t{"x":7,"label":"p"}']
    rows = [json.loads(line) for line in ok("consume", *read, "--format", "json").splitlines()]
    assert [r["value"] for r in rows] == [{"id": 1, "item": "tea"}, {"id": 2, "item": "cake"},
                                          {"n": 5}, {"x": 7, "label": "p"}]
    assert [r["value_schema_id"] for r in rows] == [avro_id, avro_id, json_id, proto_id]
    assert [r["key"] for r in rows] == ["a", "b", None, None]
    out = ok("consume", *read, "--format", "%o %v\\n")
    assert out.splitlines()[0] == '0 {"id":1,"item":"tea"}'
    # Without --registry (and --value-format raw): the framed bytes, as before.
    rows = [json.loads(line) for line in ok(
        "consume", "sr-orders", "--from-beginning", "-n", "1", "--format", "json", *b,
        env={"YAK_SCHEMA_REGISTRY": ""}).splitlines()]
    assert "value_schema_id" not in rows[0]

    # A plain value, then a framed one whose schema id the registry lacks.
    ok("produce", "sr-orders", *b, stdin="plain text\n")
    ok("produce", "sr-orders", "--schema-id", str(json_id), *reg, stdin='{"n": 6}\n')
    unknown = b"\x00" + (999999).to_bytes(4, "big") + b'{"n": 1}'
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": served.bootstrap, "log_level": 0})
    p.produce("sr-orders", unknown)
    assert p.flush(30) == 0

    r = yak("consume", "sr-orders", "--offset", "4", "-n", "3", "--idle-timeout", "10", *reg)
    one_line_error(r, "sr-orders/0@4", "wire format", "--value-format auto")
    assert r.returncode == 1
    r = yak("consume", "sr-orders", "--offset", "6", "-n", "1", "--idle-timeout", "10", *reg)
    one_line_error(r, "schema id 999999", "--value-format auto")
    assert r.returncode == 1
    out = ok("consume", "sr-orders", "--offset", "4", "-n", "3", "--idle-timeout", "10",
             "--value-format", "auto", *reg)
    assert out.splitlines()[:2] == ["plain text", '{"n":6}']
    assert out.splitlines()[2].endswith('{"n": 1}')
    rows = [json.loads(line) for line in ok(
        "consume", "sr-orders", "--offset", "4", "-n", "3", "--idle-timeout", "10",
        "--value-format", "auto", "--format", "json", *reg).splitlines()]
    assert rows[0]["value"] == "plain text" and "value_schema_id" not in rows[0]
    assert rows[1]["value"] == {"n": 6} and rows[1]["value_schema_id"] == json_id

    # Bad flags: exit 2, one line.
    r = yak("consume", "sr-orders", "--value-format", "avro", *reg)
    one_line_error(r, "--value-format", "raw, schema or auto")
    assert r.returncode == 2
    r = yak("consume", "sr-orders", "--value-format", "schema", *b,
            env={"YAK_SCHEMA_REGISTRY": ""})
    one_line_error(r, "--registry")
    assert r.returncode == 2
