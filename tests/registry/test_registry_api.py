"""The schema registry through Yak's HTTP port, with confluent-kafka's client and serializers.

A real `yak serve --http` (broker + gateway), real Kafka producers and consumers; the
serializers talk to the registry exactly as they talk to Confluent's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from .conftest import Served, compile_proto

SR = "application/vnd.schemaregistry.v1+json"
USER_V1 = {"type": "record", "name": "User", "namespace": "acme",
           "fields": [{"name": "name", "type": "string"}]}
USER_V2 = {**USER_V1, "fields": [*USER_V1["fields"],
                                 {"name": "age", "type": "int", "default": 0}]}


def _consume(bootstrap: str, topic: str, n: int) -> list[Any]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + 30
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m)
    c.close()
    assert len(out) == n, f"read {len(out)} of {n}"
    return out


def test_avro_round_trip_through_kafka(served: Served) -> None:
    sr = served.sr()
    ser = AvroSerializer(sr, json.dumps(USER_V2))
    ctx = SerializationContext("users", MessageField.VALUE)
    p = Producer({"bootstrap.servers": served.bootstrap})
    for i in range(5):
        p.produce("users", value=ser({"name": f"u{i}", "age": i}, ctx))
    assert p.flush(20) == 0
    msgs = _consume(served.bootstrap, "users", 5)
    raw = msgs[0].value()
    assert raw[0] == 0  # Confluent's framing: magic byte 0, 4-byte big-endian id, Avro binary
    schema_id = int.from_bytes(raw[1:5], "big")
    de = AvroDeserializer(sr)
    assert [de(m.value(), ctx) for m in msgs] == [{"name": f"u{i}", "age": i} for i in range(5)]
    latest = sr.get_latest_version("users-value")
    assert latest.schema_id == schema_id and latest.version == 1
    # The same schema again: same id, no new version; in another subject: same (global) id.
    assert sr.register_schema("users-value", Schema(json.dumps(USER_V2), "AVRO")) == schema_id
    assert sr.register_schema("others-value", Schema(json.dumps(USER_V2), "AVRO")) == schema_id
    assert sr.get_versions("users-value") == [1]
    # Whitespace does not make a different schema.
    assert sr.register_schema("users-value",
                              Schema(json.dumps(USER_V2, indent=4), "AVRO")) == schema_id


def test_json_schema_round_trip(served: Served) -> None:
    sr = served.sr()
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order",
              "type": "object", "properties": {"id": {"type": "integer"},
                                                "items": {"type": "array",
                                                          "items": {"type": "string"}}},
              "required": ["id"]}
    ser = JSONSerializer(json.dumps(schema), sr)
    ctx = SerializationContext("orders-json", MessageField.VALUE)
    data = ser({"id": 7, "items": ["a", "b"]}, ctx)
    assert data[0] == 0
    assert JSONDeserializer(None, schema_registry_client=sr)(data, ctx) == {"id": 7,
                                                                          "items": ["a", "b"]}
    got = sr.get_latest_version("orders-json-value")
    assert got.schema.schema_type == "JSON"
    with pytest.raises(Exception, match="integer"):
        ser({"id": "seven"}, ctx)  # the serializer validates against the registered schema


def test_protobuf_round_trip(served: Served, tmp_path: Path) -> None:
    pb = compile_proto(tmp_path, "shop", """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  repeated Line lines = 2;
  map<string, string> tags = 3;
  google.protobuf.Timestamp at = 4;
  message Line { string sku = 1; int32 qty = 2; }
}
""")
    sr = served.sr()
    ctx = SerializationContext("orders-pb", MessageField.VALUE)
    ser = ProtobufSerializer(pb.Order, sr, {"use.deprecated.format": False})
    order = pb.Order(id=42, lines=[pb.Order.Line(sku="x", qty=2)], tags={"k": "v"})
    order.at.seconds = 1_700_000_000
    data = ser(order, ctx)
    de = ProtobufDeserializer(pb.Order, {"use.deprecated.format": False}, sr)
    assert de(data, ctx) == order
    got = sr.get_latest_version("orders-pb-value")
    assert got.schema.schema_type == "PROTOBUF"
    # Shown as .proto text (it was registered as a descriptor) that compiles to the same schema.
    text = got.schema.schema_str
    assert "message Order" in text and "map<string, string> tags = 3;" in text
    again = sr.register_schema("orders-pb-value", Schema(text, "PROTOBUF"))
    assert again == got.schema_id
    # The timestamp import became a reference-free well-known import.
    assert 'import "google/protobuf/timestamp.proto";' in text


def test_references_between_subjects(served: Served) -> None:
    sr = served.sr()
    addr = {"type": "record", "name": "Address", "namespace": "acme",
            "fields": [{"name": "city", "type": "string"}]}
    sr.register_schema("address", Schema(json.dumps(addr), "AVRO"))
    person = {"type": "record", "name": "Person", "namespace": "acme",
              "fields": [{"name": "home", "type": "acme.Address"}]}
    refs = [SchemaReference("acme.Address", "address", 1)]
    pid = sr.register_schema("person-value", Schema(json.dumps(person), "AVRO", refs))
    got = sr.get_schema(pid)
    assert [r.name for r in got.references] == ["acme.Address"]
    ser = AvroSerializer(sr, None, conf={"auto.register.schemas": False,
                                         "use.latest.version": True})
    ctx = SerializationContext("person", MessageField.VALUE)
    data = ser({"home": {"city": "Oslo"}}, ctx)
    assert AvroDeserializer(sr)(data, ctx) == {"home": {"city": "Oslo"}}
    # A referenced version cannot be deleted while something uses it (42206).
    r = httpx.delete(served.url + "/subjects/address/versions/1")
    assert r.status_code == 422 and r.json()["error_code"] == 42206
    # A reference to a version that does not exist is a bad schema.
    bad = [SchemaReference("acme.Address", "address", 9)]
    with pytest.raises(SchemaRegistryError) as info:
        sr.register_schema("person2-value", Schema(json.dumps(person), "AVRO", bad))
    assert info.value.error_code == 42201


def test_errors_have_confluent_codes_and_media_type(served: Served) -> None:
    c = httpx.Client(base_url=served.url, timeout=30)
    hdr = {"content-type": SR}
    r = c.get("/subjects/nope/versions")
    assert (r.status_code, r.json()["error_code"]) == (404, 40401)
    assert r.headers["content-type"].startswith(SR)
    r = c.get("/schemas/ids/99999")
    assert (r.status_code, r.json()["error_code"]) == (404, 40403)
    c.post("/subjects/err-value/versions", headers=hdr,
           content=json.dumps({"schema": json.dumps(USER_V1)}))
    r = c.get("/subjects/err-value/versions/7")
    assert (r.status_code, r.json()["error_code"]) == (404, 40402)
    r = c.get("/subjects/err-value/versions/zero")
    assert (r.status_code, r.json()["error_code"]) == (422, 42202)
    r = c.post("/subjects/err-value/versions", headers=hdr,
               content=json.dumps({"schema": '{"type": "record", "name": "X", "fields": '
                                             '[{"name": "a", "type": "strng"}]}'}))
    assert (r.status_code, r.json()["error_code"]) == (422, 42201)
    assert "strng" in r.json()["message"]
    r = c.post("/subjects/err-value/versions", headers=hdr, content=json.dumps(
        {"schema": json.dumps({**USER_V1, "fields": [{"name": "n", "type": "int"}]})}))
    assert (r.status_code, r.json()["error_code"]) == (409, 409)
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in r.json()["message"]
    r = c.put("/config/err-value", headers=hdr, content='{"compatibility": "SIDEWAYS"}')
    assert (r.status_code, r.json()["error_code"]) == (422, 42203)
    r = c.post("/subjects/err-value/versions", headers=hdr, content="{not json")
    assert r.status_code == 400 and "error_code" in r.json()
    # The client's query parameters are tolerated.
    r = c.get("/subjects/err-value/versions/latest?deleted=false&format=&verbose=true")
    assert r.status_code == 200 and r.json()["version"] == 1
    assert c.get("/schemas/types").json() == ["AVRO", "JSON", "PROTOBUF"]


def test_compatibility_endpoint_and_levels(served: Served) -> None:
    sr = served.sr()
    c = httpx.Client(base_url=served.url, timeout=30)
    sr.register_schema("compat-value", Schema(json.dumps(USER_V1), "AVRO"))
    no_default = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "age", "type": "int"}]}
    r = c.post("/compatibility/subjects/compat-value/versions/latest?verbose=true",
               json={"schema": json.dumps(no_default)})
    assert r.json()["is_compatible"] is False
    assert any("READER_FIELD_MISSING_DEFAULT_VALUE" in m for m in r.json()["messages"])
    assert sr.test_compatibility("compat-value", Schema(json.dumps(USER_V2), "AVRO")) is True
    # FORWARD: adding a field without a default is fine, removing one is not.
    sr.set_compatibility("compat-value", "FORWARD")
    assert sr.get_compatibility("compat-value") == "FORWARD"
    assert sr.register_schema("compat-value", Schema(json.dumps(no_default), "AVRO")) > 0
    age_only = {**USER_V1, "fields": [{"name": "age", "type": "int"}]}
    with pytest.raises(SchemaRegistryError) as info:
        sr.register_schema("compat-value", Schema(json.dumps(age_only), "AVRO"))
    assert info.value.http_status_code == 409
    assert "old schema reading data of the new one" in str(info.value)
    sr.set_compatibility("compat-value", "NONE")
    sr.register_schema("compat-value", Schema(json.dumps(age_only), "AVRO"))
    assert sr.get_versions("compat-value") == [1, 2, 3]
    # Global level: default BACKWARD, settable.
    assert c.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
    r = c.get("/config/never-configured")
    assert r.status_code == 404 and r.json()["error_code"] == 40408
    r = c.get("/config/never-configured?defaultToGlobal=true")
    assert r.json() == {"compatibilityLevel": "BACKWARD"}


def test_soft_and_hard_delete(served: Served) -> None:
    sr = served.sr()
    c = httpx.Client(base_url=served.url, timeout=30)
    a = sr.register_schema("del-value", Schema(json.dumps(USER_V1), "AVRO"))
    sr.register_schema("del-value", Schema(json.dumps(USER_V2), "AVRO"))
    # Hard delete needs a soft delete first.
    r = c.delete("/subjects/del-value/versions/1?permanent=true")
    assert (r.status_code, r.json()["error_code"]) == (404, 40407)
    assert sr.delete_version("del-value", 1) == 1
    assert sr.get_versions("del-value") == [2]
    r = c.get("/subjects/del-value/versions/1")
    assert r.status_code == 404 and r.json()["error_code"] == 40402
    assert c.get("/subjects/del-value/versions/1?deleted=true").json()["id"] == a
    assert sr.get_schema(a).schema_str  # ids of soft-deleted versions still resolve
    # Soft delete of the subject returns the versions it deleted and hides it.
    assert sr.delete_subject("del-value") == [2]
    assert "del-value" not in sr.get_subjects()
    assert "del-value" in c.get("/subjects?deleted=true").json()
    r = c.delete("/subjects/del-value")
    assert r.json()["error_code"] == 40404
    assert sr.delete_subject("del-value", permanent=True) == [1, 2]
    assert "del-value" not in c.get("/subjects?deleted=true").json()
    r = c.get("/subjects/del-value/versions")
    assert r.json()["error_code"] == 40401


def test_a_second_gateway_serves_the_same_registry(served: Served, tmp_path: Path) -> None:
    """`yak gateway` against the same cluster: same subjects, writes go to the one leader."""
    from gateway.conftest import start_standalone

    other = start_standalone(tmp_path / "gw2", served.bootstrap)
    try:
        sr2 = __import__("confluent_kafka.schema_registry",
                         fromlist=["SchemaRegistryClient"]).SchemaRegistryClient(
            {"url": other.url, "timeout": 30})
        sid = sr2.register_schema("second-value", Schema(json.dumps(USER_V1), "AVRO"))
        sr1 = served.sr()
        assert sr1.get_schema(sid).schema_str == json.dumps(USER_V1, separators=(",", ":"))
        sid2 = served.sr().register_schema("second-b-value",
                                           Schema(json.dumps(USER_V2), "AVRO"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "second-b-value" not in sr2.get_subjects():
            time.sleep(0.2)  # back-off of this wait-for-subject loop
        assert sr2.get_latest_version("second-b-value").schema_id == sid2
        ids = {sr2.register_schema(f"second-{i}", Schema(json.dumps(
            {"type": "record", "name": f"R{i}", "fields": []}), "AVRO")) for i in range(3)}
        assert len(ids) == 3 and not ids & {sid, sid2}
    finally:
        other.stop()


@pytest.mark.slow
def test_state_survives_a_restart_and_ids_are_never_reused(fresh: Served) -> None:
    sr = fresh.sr()
    ids = [sr.register_schema(f"s{i}-value", Schema(json.dumps(
        {"type": "record", "name": f"R{i}", "fields": []}), "AVRO")) for i in range(3)]
    sr.set_compatibility("s0-value", "FULL_TRANSITIVE")
    sr.delete_subject("s1-value")
    # The highest id disappears for good.
    sr.delete_subject("s2-value")
    sr.delete_subject("s2-value", permanent=True)
    fresh.stop()
    fresh.start()
    t0 = time.monotonic()
    c = httpx.Client(base_url=fresh.url, timeout=30)
    assert c.get("/subjects").json() == ["s0-value"]
    answered_s = time.monotonic() - t0
    assert answered_s < 10
    sr = fresh.sr()
    assert sr.get_compatibility("s0-value") == "FULL_TRANSITIVE"
    assert "s1-value" in c.get("/subjects?deleted=true").json()
    assert sr.get_schema(ids[0]).schema_str
    assert c.get(f"/schemas/ids/{ids[2]}").json()["error_code"] == 40403
    new = sr.register_schema("s3-value", Schema(json.dumps(
        {"type": "record", "name": "R3", "fields": []}), "AVRO"))
    assert new == max(ids) + 1, (new, ids)


def test_rest_proxy_avro_produce_is_read_back_by_confluent_kafka(served: Served) -> None:
    c = httpx.Client(base_url=served.url, timeout=30)
    avro_ct = {"content-type": "application/vnd.kafka.avro.v2+json"}
    httpx.post(served.url + "/api/topics", json={"name": "rest-avro", "partitions": 1},
               timeout=30)
    schema = {"type": "record", "name": "Reading", "namespace": "acme",
              "fields": [{"name": "sensor", "type": "string"},
                         {"name": "value", "type": ["null", "double"], "default": None}]}
    r = c.post("/topics/rest-avro", headers=avro_ct, json={
        "value_schema": json.dumps(schema),
        "records": [{"value": {"sensor": "a", "value": {"double": 1.5}}},
                    {"value": {"sensor": "b", "value": None}}]})
    assert r.status_code == 200, r.text
    body = r.json()
    sid = body["value_schema_id"]
    assert [o["offset"] for o in body["offsets"]] == [0, 1]
    # By id, in a second request.
    r = c.post("/topics/rest-avro", headers=avro_ct, json={
        "value_schema_id": sid, "records": [{"value": {"sensor": "c", "value": {"double": 2}}}]})
    assert r.status_code == 200 and r.json()["value_schema_id"] == sid
    msgs = _consume(served.bootstrap, "rest-avro", 3)
    for m in msgs:
        assert m.value()[0] == 0 and int.from_bytes(m.value()[1:5], "big") == sid
    de = AvroDeserializer(served.sr())
    ctx = SerializationContext("rest-avro", MessageField.VALUE)
    assert [de(m.value(), ctx) for m in msgs] == [
        {"sensor": "a", "value": 1.5}, {"sensor": "b", "value": None},
        {"sensor": "c", "value": 2.0}]
    assert served.sr().get_latest_version("rest-avro-value").schema_id == sid
    # A value that does not match the schema is refused, naming the record; nothing written.
    r = c.post("/topics/rest-avro", headers=avro_ct, json={
        "value_schema_id": sid, "records": [{"value": {"sensor": 5}}]})
    assert r.status_code == 422 and "record 0" in r.json()["message"]
    r = c.post("/topics/rest-avro", headers=avro_ct, json={"records": [{"value": {"a": 1}}]})
    assert r.status_code == 422 and "value_schema" in r.json()["message"]
    r = c.post("/topics/rest-avro", headers=avro_ct, json={"value_schema_id": 999999,
                                                           "records": [{"value": {"a": 1}}]})
    assert r.status_code == 422 and "999999" in r.json()["message"]
    # A REST consumer with format avro reads the values back in Avro's JSON encoding.
    v2 = {"content-type": "application/vnd.kafka.v2+json"}
    r = c.post("/consumers/rest-avro-g", headers=v2,
               json={"name": "c1", "format": "avro", "auto.offset.reset": "earliest"})
    assert r.status_code == 200, r.text
    base = "/consumers/rest-avro-g/instances/c1"
    assert c.post(base + "/subscription", headers=v2,
                  json={"topics": ["rest-avro"]}).status_code == 204
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        r = c.get(base + "/records?timeout=1000",
                  headers={"accept": "application/vnd.kafka.avro.v2+json"})
        assert r.status_code == 200, r.text
        got += r.json()
    assert [g["value"] for g in got] == [
        {"sensor": "a", "value": {"double": 1.5}}, {"sensor": "b", "value": None},
        {"sensor": "c", "value": {"double": 2.0}}]
    c.delete(base, headers=v2)


def test_rest_proxy_jsonschema_and_protobuf_formats(served: Served) -> None:
    c = httpx.Client(base_url=served.url, timeout=30)
    for t in ("rest-js", "rest-pb"):
        httpx.post(served.url + "/api/topics", json={"name": t, "partitions": 1}, timeout=30)
    js = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    r = c.post("/topics/rest-js", headers={"content-type":
                                           "application/vnd.kafka.jsonschema.v2+json"},
               json={"value_schema": json.dumps(js), "records": [{"value": {"n": 1}}]})
    assert r.status_code == 200, r.text
    r = c.post("/topics/rest-js", headers={"content-type":
                                           "application/vnd.kafka.jsonschema.v2+json"},
               json={"value_schema": json.dumps(js), "records": [{"value": {"n": "x"}}]})
    assert r.status_code == 422
    proto = 'syntax = "proto3"; package t; message M { string s = 1; int32 n = 2; }'
    r = c.post("/topics/rest-pb", headers={"content-type":
                                           "application/vnd.kafka.protobuf.v2+json"},
               json={"value_schema": proto, "records": [{"value": {"s": "hi", "n": 3}}]})
    assert r.status_code == 200, r.text
    sr = served.sr()
    ctx = SerializationContext("rest-js", MessageField.VALUE)
    m = _consume(served.bootstrap, "rest-js", 1)[0]
    assert JSONDeserializer(None, schema_registry_client=sr)(m.value(), ctx) == {"n": 1}
    m = _consume(served.bootstrap, "rest-pb", 1)[0]
    assert m.value()[:1] == b"\0" and m.value()[5:6] == b"\0"  # id, then message index [0]
    assert sr.get_latest_version("rest-pb-value").schema.schema_type == "PROTOBUF"


@pytest.mark.slow
def test_leader_failover_when_the_leading_gateway_dies(fresh: Served, tmp_path: Path) -> None:
    """Two `yak gateway`s: the first to need a leader leads; SIGKILL it and the other takes
    over once the group coordinator drops the dead member (session timeout, 10 s)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from gateway.conftest import start_standalone

    g1 = start_standalone(tmp_path / "g1", fresh.bootstrap)
    g2 = start_standalone(tmp_path / "g2", fresh.bootstrap)
    try:
        sr1 = SchemaRegistryClient({"url": g1.url, "timeout": 60})
        sr2 = SchemaRegistryClient({"url": g2.url, "timeout": 60})

        def rec(i: int) -> Schema:
            return Schema(json.dumps({"type": "record", "name": f"F{i}", "fields": []}), "AVRO")

        a = sr1.register_schema("fo-a", rec(1))
        b = sr2.register_schema("fo-b", rec(2))  # g2 joins; g1 keeps leading; g2 forwards
        assert b == a + 1
        g1.kill()
        t0 = time.monotonic()
        c = sr2.register_schema("fo-c", rec(3))
        took = time.monotonic() - t0
        assert c == b + 1
        assert took < 45, took
        assert httpx.get(fresh.url + "/subjects", timeout=30).json() == ["fo-a", "fo-b", "fo-c"]
    finally:
        g1.kill()
        g2.stop()
