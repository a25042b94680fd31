"""`valueFormat=avro` through Yak's schema registry, in a real local Spark and a real broker.

Values written by confluent-kafka's AvroSerializer (two schema versions) are read as a
struct column; a DataFrame written with valueFormat=avro is read back by AvroDeserializer;
a value whose schema id is unknown fails the job with an error naming the id.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from gateway.conftest import GatewayProc, start_embedded  # tests/ is on sys.path

pytestmark = pytest.mark.timeout(300)

V1 = {"type": "record", "name": "Trip", "namespace": "acme", "fields": [
    {"name": "id", "type": "long"},
    {"name": "city", "type": "string"},
    {"name": "km", "type": ["null", "double"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "kind", "type": "string"},
]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "rider", "type": "string", "default": "?"}]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProc]:
    gw = start_embedded(tmp_path_factory.mktemp("yak-spark-registry"))
    yield gw
    gw.stop()


def _reader(spark: Any, served: GatewayProc, topic: str, **opts: str) -> Any:
    r = (spark.read.format("yak").option("kafka.bootstrap.servers", served.bootstrap)
         .option("subscribe", topic).option("valueFormat", "avro")
         .option("schema.registry.url", served.url))
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


@pytest.mark.slow
def test_spark_reads_and_writes_avro_through_the_registry(spark: Any, served: GatewayProc,
                                                          tmp_path: Path) -> None:
    sr = SchemaRegistryClient({"url": served.url, "timeout": 30})
    topic = "trips"
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": served.bootstrap, "linger.ms": 5})
    ser1 = AvroSerializer(sr, json.dumps(V1))
    for i in range(300):
        p.produce(topic, value=ser1({"id": i, "city": f"c{i % 7}", "km": i / 2 if i % 3 else None,
                                     "tags": ["x"] * (i % 3), "kind": "BIKE" if i % 2 else "CAR"},
                                    ctx))
    ser2 = AvroSerializer(sr, json.dumps(V2))
    for i in range(300, 400):
        p.produce(topic, value=ser2({"id": i, "city": "oslo", "km": 1.0, "tags": [],
                                     "kind": "CAR", "rider": f"r{i}"}, ctx))
    p.produce(topic, value=None)  # a tombstone stays a null value
    assert p.flush(30) == 0

    df = _reader(spark, served, topic)
    value_type = df.schema["value"].dataType.simpleString()
    assert value_type == ("struct<id:bigint,city:string,km:double,tags:array<string>,"
                          "kind:string,rider:string>")
    rows = df.select("offset", "value.*").orderBy("offset").collect()
    assert len(rows) == 401
    assert rows[4].asDict() == {"offset": 4, "id": 4, "city": "c4", "km": 2.0,
                                "tags": ["x"], "kind": "CAR", "rider": None}
    assert rows[3]["km"] is None
    assert rows[350]["rider"] == "r350" and rows[350]["city"] == "oslo"
    assert rows[400]["id"] is None  # the tombstone
    assert df.where("value.kind = 'BIKE'").count() == 150

    # Write: a struct column becomes registry-framed Avro that confluent-kafka reads.
    out = "trips-by-city"
    (df.where("value is not null").groupBy("value.city").count()
       .selectExpr("named_struct('city', city, 'trips', count) as value")
       .write.format("yak").option("kafka.bootstrap.servers", served.bootstrap)
       .option("topic", out).option("valueFormat", "avro")
       .option("schema.registry.url", served.url).mode("append").save())
    c = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "spark-avro-check",
                  "auto.offset.reset": "earliest"})
    c.subscribe([out])
    got: dict[str, int] = {}
    de = AvroDeserializer(sr)
    for _ in range(200):
        m = c.poll(0.5)
        if m is not None and not m.error():
            v = de(m.value(), SerializationContext(out, MessageField.VALUE))
            got[v["city"]] = v["trips"]
        if len(got) == 8:
            break
    c.close()
    assert got == {**{f"c{k}": sum(1 for i in range(300) if i % 7 == k) for k in range(7)},
                   "oslo": 100}
    assert sr.get_latest_version(f"{out}-value").schema.schema_type == "AVRO"
    # ...and the yak source reads it back as a struct.
    back = _reader(spark, served, out).select("value.city", "value.trips").collect()
    assert {r.city: r.trips for r in back} == got


def test_unknown_schema_id_fails_the_job_naming_the_id(spark: Any, served: GatewayProc) -> None:
    sr = SchemaRegistryClient({"url": served.url, "timeout": 30})
    topic = "trips-bad"
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": served.bootstrap})
    p.produce(topic, value=AvroSerializer(sr, json.dumps(V1))(
        {"id": 1, "city": "a", "km": None, "tags": [], "kind": "CAR"}, ctx))
    p.produce(topic, value=struct.pack(">bI", 0, 987654) + b"\x02")
    assert p.flush(30) == 0
    with pytest.raises(Exception, match="schema id 987654"):
        _reader(spark, served, topic).collect()
    with pytest.raises(Exception, match="valueFormat"):
        (spark.read.format("yak").option("kafka.bootstrap.servers", served.bootstrap)
         .option("subscribe", topic).option("valueFormat", "thrift")
         .option("schema.registry.url", served.url).load())
