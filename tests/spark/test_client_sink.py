"""The connector's client, planner and fenced sink against a real Yak broker (no Spark JVM)."""

from __future__ import annotations

import json
import socket
import time
import uuid

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from yak.client import EARLIEST, LATEST, KafkaClient
from yak.client.connection import BrokerConnectionError
from yak.errors import UnknownTopicOrPartitionError
from yak.spark.fetcher import read_range
from yak.spark.offsets import DataLossError, OffsetRange, discover, starting_offsets
from yak.spark.options import parse_sink_options, parse_source_options
from yak.spark.sink import write_fenced


def _produce(bootstrap: str, topic: str, n: int, partitions: int | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        kw = {} if partitions is None else {"partition": i % partitions}
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"%d" % i)], **kw)
    assert p.flush(30) == 0


def _read_all(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None, int, int]]:
    opts = parse_source_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, streaming=False
    )
    with KafkaClient(bootstrap) as c:
        tps = discover(c, opts)
        start = c.list_offsets(dict.fromkeys(tps, EARLIEST))
        end = c.list_offsets(dict.fromkeys(tps, LATEST))
    rows = []
    for tp in tps:
        rng = OffsetRange(tp[0], tp[1], start[tp], end[tp])
        for b in read_range(opts.client, rng, include_headers=False, fail_on_data_loss=True):
            d = b.to_pydict()
            rows += list(zip(d["key"], d["value"], d["partition"], d["offset"], strict=True))
    return rows


def test_client_metadata_offsets_fetch(module_broker):
    topic = f"cl-{uuid.uuid4().hex[:6]}"
    _produce(module_broker.bootstrap, topic, 500)
    with KafkaClient(module_broker.bootstrap) as c:
        parts = c.partitions_for(topic)
        tp = (topic, parts[0].partition)
        assert c.list_offsets({tp: LATEST})[tp] == 500
        assert c.list_offsets({tp: EARLIEST})[tp] == 0
        resp = c.fetch({tp: 0})[tp]
        assert resp.error == 0 and resp.high_watermark == 500 and resp.records
        with pytest.raises(UnknownTopicOrPartitionError, match="nope-"):
            c.partitions_for("nope-" + topic)
    rows = _read_all(module_broker.bootstrap, topic)
    assert [r[1] for r in rows] == [b"v%d" % i for i in range(500)]
    assert [r[3] for r in rows] == list(range(500))


def test_unreachable_broker_fails_after_bounded_retries():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    c = KafkaClient(f"127.0.0.1:{port}", retries=2, retry_backoff_ms=10)
    t0 = time.monotonic()
    with pytest.raises(BrokerConnectionError, match=r"unreachable after 3 attempts.*bootstrap"):
        c.metadata(["x"])
    assert time.monotonic() - t0 < 5


def test_subscribe_to_missing_topic_names_it(module_broker):
    opts = parse_source_options(
        {"kafka.bootstrap.servers": module_broker.bootstrap, "subscribe": "no-such-topic-zz"},
        streaming=False,
    )
    with (
        KafkaClient(module_broker.bootstrap) as c,
        pytest.raises(UnknownTopicOrPartitionError, match="subscribe.*no-such-topic-zz"),
    ):
        discover(c, opts)


def test_starting_offsets_json_and_timestamp(module_broker):
    topic = f"ts-{uuid.uuid4().hex[:6]}"
    _produce(module_broker.bootstrap, topic, 10)
    time.sleep(0.05)  # the point: timestamps strictly before and after `mid`
    mid = int(time.time() * 1000)
    time.sleep(0.05)
    _produce(module_broker.bootstrap, topic, 5)
    base = {"kafka.bootstrap.servers": module_broker.bootstrap, "subscribe": topic}
    with KafkaClient(module_broker.bootstrap) as c:
        o = parse_source_options({**base, "startingTimestamp": str(mid)}, streaming=True)
        assert starting_offsets(c, o, discover(c, o)) == {(topic, 0): 10}
        o = parse_source_options({**base, "startingOffsets": f'{{"{topic}":{{"0":-2}}}}'}, True)
        assert starting_offsets(c, o, discover(c, o)) == {(topic, 0): 0}
        late = str(int(time.time() * 1000) + 60_000)
        o = parse_source_options({**base, "startingTimestamp": late}, streaming=True)
        with pytest.raises(ValueError, match="startingTimestamp"):
            starting_offsets(c, o, discover(c, o))


def test_fetch_range_beyond_log_end_is_data_loss(module_broker):
    topic = f"dl-{uuid.uuid4().hex[:6]}"
    _produce(module_broker.bootstrap, topic, 3)
    opts = parse_source_options(
        {"kafka.bootstrap.servers": module_broker.bootstrap, "subscribe": topic}, streaming=False
    )
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        list(
            read_range(
                opts.client,
                OffsetRange(topic, 0, 0, 10),
                include_headers=False,
                fail_on_data_loss=True,
            )
        )
    got = list(
        read_range(
            opts.client,
            OffsetRange(topic, 0, 0, 10),
            include_headers=False,
            fail_on_data_loss=False,
        )
    )
    assert sum(b.num_rows for b in got) == 3


def test_fenced_sink_replay_writes_only_missing_rows(module_broker):
    """Without transactions (the markers fallback): a crashed attempt wrote a prefix of the
    task's rows; the replay adds only the rest."""
    topic = f"eo-{uuid.uuid4().hex[:6]}"
    opts = parse_sink_options({"kafka.bootstrap.servers": module_broker.bootstrap, "topic": topic,
                               "exactlyOnceMode": "markers"})
    n = 3000
    table = pa.table(
        {
            "key": pa.array([b"k%d" % (i % 50) for i in range(n)], pa.binary()),
            "value": pa.array([b"row-%d" % i for i in range(n)], pa.binary()),
        }
    )
    qid = str(uuid.uuid4())
    # attempt 1 "crashes" after writing the first 1200 rows of batch 7, task 0
    first = write_fenced(opts, table.slice(0, 1200), qid, 7, 0)
    assert first.rows == 1200 and first.skipped == 0
    # attempt 2 of the same (query, batch, task) replays all rows
    second = write_fenced(opts, table, qid, 7, 0)
    assert second.skipped == 1200
    # the next batch, and another task, are not affected by the fence
    third = write_fenced(opts, table.slice(0, 10), qid, 8, 0)
    other = write_fenced(opts, table.slice(0, 10), qid, 7, 1)
    assert third.skipped == 0 and other.skipped == 0
    values = sorted(r[1] for r in _read_all(module_broker.bootstrap, topic))
    expected = sorted([b"row-%d" % i for i in range(n)] + [b"row-%d" % i for i in range(10)] * 2)
    assert values == expected
    # batch 8 replayed after it was fully written (crash before Spark's commit): nothing new
    again = write_fenced(opts, table.slice(0, 10), qid, 8, 0)
    assert again.skipped == 10
    assert len(_read_all(module_broker.bootstrap, topic)) == len(expected)


def test_sink_partitions_keys_like_java_clients(module_broker):
    """Keyed rows land on murmur2(key) % partitions, the Java/kafka-python default."""
    from kafka.partitioner.default import murmur2

    topic = f"kp-{uuid.uuid4().hex[:6]}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(15)
    opts = parse_sink_options({"kafka.bootstrap.servers": module_broker.bootstrap, "topic": topic})
    keys = [b"user-%d" % i for i in range(200)]
    write_fenced(opts, pa.table({"key": keys, "value": keys}), None, None, 0)
    rows = _read_all(module_broker.bootstrap, topic)
    assert len(rows) == 200
    for key, _value, partition, _off in rows:
        assert partition == (murmur2(key) & 0x7FFFFFFF) % 3


def test_deleted_records_are_data_loss_unless_allowed(module_broker):
    """Offsets removed by DeleteRecords (as retention would) fail or are skipped."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from yak.spark.offsets import check_data_loss

    topic = f"ret-{uuid.uuid4().hex[:6]}"
    _produce(module_broker.bootstrap, topic, 100)
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    futs = admin.delete_records([TopicPartition(topic, 0, 40)])
    for f in futs.values():
        f.result(15)
    base = {"kafka.bootstrap.servers": module_broker.bootstrap, "subscribe": topic}
    strict = parse_source_options(base, streaming=False)
    lenient = parse_source_options({**base, "failOnDataLoss": "false"}, streaming=False)
    with KafkaClient(module_broker.bootstrap) as c:
        with pytest.raises(DataLossError, match="0..39"):
            check_data_loss(c, {(topic, 0): 0}, True)
        assert check_data_loss(c, {(topic, 0): 0}, False) == {(topic, 0): 40}
    rng = OffsetRange(topic, 0, 10, 100)  # planned before the deletion
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        list(read_range(strict.client, rng, include_headers=False, fail_on_data_loss=True))
    got = list(read_range(lenient.client, rng, include_headers=False, fail_on_data_loss=False))
    assert [o for b in got for o in b.column("offset").to_pylist()] == list(range(40, 100))


def test_stream_reader_admission_control(module_broker):
    """latestOffset honours ReadMaxRows (split by lag), ReadMinRows and AvailableNow."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    from yak.spark.source import YakStreamReader

    bs = module_broker.bootstrap
    topic = f"adm-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(15)
    p = Producer({"bootstrap.servers": bs})
    for i in range(400):
        p.produce(topic, value=b"x", partition=0 if i < 300 else 1)
    assert p.flush(30) == 0
    opts = {
        "kafka.bootstrap.servers": bs,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "100",
        "minOffsetsPerTrigger": "50",
        "maxTriggerDelay": "1h",
    }
    reader = YakStreamReader(parse_source_options(opts, streaming=True))
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0}}
    assert reader.getDefaultReadLimit() == ReadMaxRows(100)
    end = reader.latestOffset(start, ReadMaxRows(100))
    assert end == {topic: {"0": 75, "1": 25}}  # 3:1 lag split
    assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 300, "1": 100}}
    caught_up = {topic: {"0": 280, "1": 100}}
    assert reader.latestOffset(caught_up, ReadMinRows(50)) == caught_up  # only 20 new: wait
    impatient = YakStreamReader(
        parse_source_options({**opts, "maxTriggerDelay": "0ms"}, streaming=True)
    )  # maxTriggerDelay passed: the 20 records go now
    assert impatient.latestOffset(caught_up, ReadMinRows(50)) == {topic: {"0": 300, "1": 100}}
    impatient.stop()
    parts = reader.partitions(start, end)
    assert sorted((q.rng.partition, q.rng.start, q.rng.end) for q in parts) == [
        (0, 0, 75),
        (1, 0, 25),
    ]
    reader.prepareForTriggerAvailableNow()
    p.produce(topic, value=b"late", partition=1)
    assert p.flush(30) == 0
    assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 300, "1": 100}}
    reader.stop()


def test_subscribe_pattern_and_offsets_by_timestamp(module_broker):
    bs = module_broker.bootstrap
    tag = uuid.uuid4().hex[:6]
    for name in (f"pat-{tag}-a", f"pat-{tag}-b", f"other-{tag}"):
        _produce(bs, name, 3)
    opts = parse_source_options(
        {
            "kafka.bootstrap.servers": bs,
            "subscribePattern": f"pat-{tag}-.*",
            "startingOffsetsByTimestamp": json.dumps(
                {f"pat-{tag}-a": {"0": 0}, f"pat-{tag}-b": {"0": 0}}
            ),
        },
        streaming=True,
    )
    with KafkaClient(bs) as c:
        tps = discover(c, opts)
        assert tps == [(f"pat-{tag}-a", 0), (f"pat-{tag}-b", 0)]
        assert starting_offsets(c, opts, tps) == {tp: 0 for tp in tps}


def test_kafka_prefixed_options_reach_the_client(module_broker):
    """A tiny kafka.max.partition.fetch.bytes forces many fetches; every record still arrives."""
    topic = f"kopt-{uuid.uuid4().hex[:6]}"
    p = Producer({"bootstrap.servers": module_broker.bootstrap, "batch.num.messages": 10})
    for i in range(500):
        p.produce(topic, value=b"v%d" % i, headers=[("h", b"%d" % i)])
    assert p.flush(30) == 0
    opts = parse_source_options(
        {
            "kafka.bootstrap.servers": module_broker.bootstrap,
            "subscribe": topic,
            "kafka.max.partition.fetch.bytes": "512",
            "kafka.client.id": "spark-test",
        },
        streaming=False,
    )
    assert opts.client.partition_fetch_max_bytes == 512 and opts.client.client_id == "spark-test"
    batches = list(
        read_range(
            opts.client, OffsetRange(topic, 0, 0, 500), include_headers=True, fail_on_data_loss=True
        )
    )
    assert len(batches) > 1
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(500))
    headers = [h for b in batches for h in b.column("headers").to_pylist()]
    assert headers[7] == [{"key": "h", "value": b"7"}]
