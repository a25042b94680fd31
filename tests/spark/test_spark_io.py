"""The `yak` format in a real local Spark against a real Yak broker."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

pytestmark = pytest.mark.timeout(240)


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"sp-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    return name


def _produce(bootstrap: str, topic: str, rows: list[tuple[int, bytes, bytes]], headers=None):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for part, key, value in rows:
        p.produce(topic, key=key, value=value, partition=part, headers=headers)
    assert p.flush(30) == 0


def _reader(spark, bootstrap, **opts):
    r = spark.read.format("yak").option("kafka.bootstrap.servers", bootstrap)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_known_topic_with_headers(spark, module_broker):
    bs = module_broker.bootstrap
    topic = _topic(bs, 2)
    rows = [(i % 2, b"k%d" % i, b"value-%04d" % i) for i in range(2000)]
    _produce(bs, topic, rows, headers=[("trace", b"abc"), ("n", None)])
    df = _reader(spark, bs, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    got = df.collect()
    assert len(got) == 2000
    assert sorted(bytes(r.value) for r in got) == sorted(v for _, _, v in rows)
    for part in (0, 1):
        offs = sorted(r.offset for r in got if r.partition == part)
        assert offs == list(range(1000))
    r0 = next(r for r in got if r.partition == 1 and r.offset == 0)
    assert (bytes(r0.key), r0.topic, r0.timestampType) == (b"k1", topic, 0)
    assert [(h.key, h.value) for h in r0.headers] == [("trace", bytearray(b"abc")), ("n", None)]
    # endingOffsets JSON and minPartitions splitting
    part = _reader(
        spark,
        bs,
        subscribe=topic,
        minPartitions="6",
        startingOffsets=f'{{"{topic}":{{"0":10,"1":-2}}}}',
        endingOffsets=f'{{"{topic}":{{"0":20,"1":-1}}}}',
    )
    assert part.rdd.getNumPartitions() >= 6
    assert part.count() == 10 + 1000


def test_starting_timestamp_and_missing_topic(spark, module_broker):
    bs = module_broker.bootstrap
    topic = _topic(bs)
    _produce(bs, topic, [(0, None, b"old-%d" % i) for i in range(50)])
    time.sleep(0.05)  # the point: timestamps strictly before and after `cut`
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    _produce(bs, topic, [(0, None, b"new-%d" % i) for i in range(7)])
    df = _reader(spark, bs, subscribe=topic, startingTimestamp=str(cut))
    assert sorted(bytes(r.value) for r in df.collect()) == sorted(b"new-%d" % i for i in range(7))
    with pytest.raises(Exception, match="subscribe.*no-such-topic-xyz"):
        _reader(spark, bs, subscribe="no-such-topic-xyz").count()
    with pytest.raises(Exception, match="exactly one of the options subscribe"):
        _reader(spark, bs, subscribe=topic, assign=f'{{"{topic}":[0]}}').count()
    with pytest.raises(Exception, match="unknown option 'startingofset'"):
        _reader(spark, bs, subscribe=topic, startingOfset="earliest").count()


def test_write_dataframe_and_read_it_back(spark, module_broker):
    from pyspark.sql import functions as F

    bs = module_broker.bootstrap
    topic = _topic(bs, 3)
    other = _topic(bs, 1)
    df = spark.range(0, 5000).select(
        F.concat(F.lit("key-"), F.col("id").cast("string")).alias("key"),
        F.concat(F.lit("value-"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.when(F.col("id") < 10, F.lit(2)).alias("partition"),
        F.array(F.struct(F.lit("src").alias("key"), F.lit(b"test").alias("value"))).alias(
            "headers"
        ),
    )
    df.write.format("yak").option("kafka.bootstrap.servers", bs).option("topic", topic).mode(
        "append"
    ).save()
    back = _reader(spark, bs, subscribe=topic, includeHeaders="true").collect()
    assert len(back) == 5000
    assert sorted(bytes(r.value) for r in back) == sorted(b"value-%d" % i for i in range(5000))
    assert {r.partition for r in back} == {0, 1, 2}
    assert all(r.partition == 2 for r in back if int(bytes(r.key)[4:]) < 10)
    assert all([(h.key, bytes(h.value)) for h in r.headers] == [("src", b"test")] for r in back)
    # a topic column instead of the topic option
    spark.createDataFrame([(other, "a"), (other, "b")], "topic string, value string").write.format(
        "yak"
    ).option("kafka.bootstrap.servers", bs).mode("append").save()
    assert sorted(bytes(r.value) for r in _reader(spark, bs, subscribe=other).collect()) == [
        b"a",
        b"b",
    ]


def test_streaming_max_offsets_per_trigger_and_new_partitions(spark, module_broker, tmp_path):
    bs = module_broker.bootstrap
    src = _topic(bs, 2)
    out = _topic(bs, 1)
    _produce(bs, src, [(i % 2, None, b"m-%d" % i) for i in range(1000)])

    def run() -> list[int]:
        q = (
            spark.readStream.format("yak")
            .option("kafka.bootstrap.servers", bs)
            .option("subscribe", src)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "300")
            .load()
            .selectExpr("value")
            .writeStream.format("yak")
            .option("kafka.bootstrap.servers", bs)
            .option("topic", out)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    sizes = run()
    assert sum(sizes) == 1000 and max(sizes) <= 300 and len(sizes) == 4
    # a partition added while the query is down is discovered and read from its start
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_partitions([NewPartitions(src, 3)])[src].result(15)
    _produce(bs, src, [(2, None, b"late-%d" % i) for i in range(50)] + [(0, None, b"x")])
    assert sum(run()) == 51
    values = [bytes(r.value) for r in _reader(spark, bs, subscribe=out).collect()]
    assert len(values) == 1051 and len(set(values)) == 1051
