"""`yak produce` gaps of issue 26: tombstones, explicit timestamps, a partitioner choice and
schema-registry encoding; each checked by reading the records back from a real broker."""

from __future__ import annotations

import zlib

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, TopicPartition
from registry.conftest import served  # noqa: F401 (fixture)

from tests.cli.test_cli import ok, one_line_error, yak


def read_all(bootstrap: str, topic: str, partitions: int, n: int) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "produce-gaps-reader",
                  "enable.auto.commit": False, "log_level": 0})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = []
        for _ in range(200):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m)
            if len(got) >= n:
                break
        return got
    finally:
        c.close()


def murmur2(data: bytes) -> int:
    """Kafka's Java murmur2 (the default partitioner's hash)."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = data[length - rest:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def test_tombstones_and_timestamp(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    ok("topic", "create", "compacted", "-c", "cleanup.policy=compact", *b)
    ok("produce", "compacted", "-K", ":", *b, stdin="k1:v1\nk2:v2\n")
    # -K: KEY<sep> lines; without -K each line is a key
    ok("produce", "compacted", "--null-value", "-K", ":", "--timestamp", "1700000000123", *b,
       stdin="k1:\n")
    ok("produce", "compacted", "--tombstone", *b, stdin="k2\n")
    got = read_all(broker.bootstrap, "compacted", 1, 4)
    assert [(m.key(), m.value()) for m in got] == [
        (b"k1", b"v1"), (b"k2", b"v2"), (b"k1", None), (b"k2", None)]
    assert got[2].timestamp() == (TIMESTAMP_CREATE_TIME, 1700000000123)
    assert got[3].timestamp()[1] != 1700000000123

    ok("topic", "create", "stamped", "-c", "retention.ms=-1", *b)  # 2020 stamps: time retention must not take them
    ok("produce", "stamped", "--timestamp", "1600000000000", *b, stdin="a\nb\n")
    got = read_all(broker.bootstrap, "stamped", 1, 2)
    assert [(m.value(), m.timestamp()) for m in got] == [
        (b"a", (TIMESTAMP_CREATE_TIME, 1600000000000)),
        (b"b", (TIMESTAMP_CREATE_TIME, 1600000000000))]

    r = yak("produce", "compacted", "--timestamp", "-5", *b, stdin="x\n")
    one_line_error(r, "--timestamp")
    assert r.returncode == 2


def test_partitioner_choice(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    ok("topic", "create", "keyed", "-p", "3", *b)
    keys = [f"key-{i}" for i in range(12)]
    ok("produce", "keyed", "-K", ":", *b,  # default: murmur2_random, as Java's clients
       stdin="".join(f"{k}:murmur2\n" for k in keys))
    ok("produce", "keyed", "-K", ":", "--partitioner", "consistent", *b,
       stdin="".join(f"{k}:consistent\n" for k in keys))
    got = read_all(broker.bootstrap, "keyed", 3, 24)
    where = {(m.key().decode(), m.value().decode()): m.partition() for m in got}
    java = {(k, "murmur2"): (murmur2(k.encode()) & 0x7FFFFFFF) % 3 for k in keys}
    crc = {(k, "consistent"): zlib.crc32(k.encode()) % 3 for k in keys}
    assert where == {**java, **crc}
    assert list(java.values()) != list(crc.values())  # the keys tell the two apart

    r = yak("produce", "keyed", "--partitioner", "round_robin", *b, stdin="x\n")
    one_line_error(r, "--partitioner", "murmur2_random")
    assert r.returncode == 2


@pytest.mark.slow
def test_schema_registry_encoding(served) -> None:  # noqa: ANN001, F811
    import io
    import json

    from confluent_kafka.schema_registry import Schema
    from fastavro import parse_schema, schemaless_reader

    b = ["--bootstrap", served.bootstrap]
    sr = served.sr()
    avro = {"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "int"}, {"name": "item", "type": "string"}]}
    avro_id = sr.register_schema("orders-value", Schema(json.dumps(avro), "AVRO"))
    js = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    json_id = sr.register_schema("counts-value", Schema(json.dumps(js), "JSON"))
    ok("topic", "create", "orders", *b)
    ok("produce", "orders", "-K", "|", "--schema-subject", "orders-value", "--registry",
       served.url, *b, stdin='a|{"id": 1, "item": "tea"}\nb|{"id": 2, "item": "cake"}\n')
    ok("produce", "orders", "--schema-id", str(json_id), "--registry", served.url, *b,
       stdin='{"n": 5}\n')
    got = read_all(served.bootstrap, "orders", 1, 3)
    assert [m.key() for m in got] == [b"a", b"b", None]
    parsed = parse_schema(avro)
    for m, want in zip(got[:2], [{"id": 1, "item": "tea"}, {"id": 2, "item": "cake"}],
                       strict=True):
        v = m.value()
        assert v[0] == 0 and int.from_bytes(v[1:5], "big") == avro_id
        assert schemaless_reader(io.BytesIO(v[5:]), parsed, None) == want
    v = got[2].value()
    assert v[0] == 0 and int.from_bytes(v[1:5], "big") == json_id
    assert json.loads(v[5:]) == {"n": 5}

    reg = ["--registry", served.url, *b]
    r = yak("produce", "orders", "--schema-subject", "orders-value", *reg,
            stdin='{"id": "one"}\n')
    one_line_error(r, "line 1", f"schema {avro_id}")
    assert r.returncode == 2
    r = yak("produce", "orders", "--schema-id", str(json_id), *reg, stdin="not json\n")
    one_line_error(r, "line 1", "not JSON")
    assert r.returncode == 2
    r = yak("produce", "orders", "--schema-subject", "nope-value", *reg, stdin="{}\n")
    one_line_error(r, "nope-value")
    assert r.returncode == 1
    r = yak("produce", "orders", "--schema-id", "1", "--null-value", *reg, stdin="k\n")
    one_line_error(r, "--null-value")
    assert r.returncode == 2
