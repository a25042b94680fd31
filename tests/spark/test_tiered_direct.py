"""Spark reads tiered segments straight from the bucket (`tiered.direct=true`, issue 25).

Real parts only: SeaweedFS's S3 gateway started on 127.0.0.1 (tests/tiered/seaweed.py), one
broker process with tiering on, small segments and a small local retention (so the old
segments exist only in the bucket), confluent-kafka producers, a local[2] Spark session.

- the same topic read through the brokers and from the bucket gives identical rows
  (values, keys, headers, offsets, partitions, timestamps), over the whole log and over a
  range that starts and ends inside segments; the plan really reads the remote segments
  from the bucket and only the tail through the brokers;
- read_committed over aborted transactions in tiered segments: nothing aborted, nothing
  committed lost, the same rows both ways;
- a remote segment gone between planning and reading (its object deleted, the manifest
  still naming it): failOnDataLoss=true fails naming the segment, false skips exactly its
  offsets; a corrupt segment object fails the read with its CRC error either way.
"""

from __future__ import annotations

from collections.abc import Iterator

import obstore
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from obstore.store import S3Store

from tests.conftest import YakBroker
from tests.tiered.seaweed import SeaweedS3
from tests.waiting import wait_until
from yak.tiered import Manifest

pytestmark = pytest.mark.timeout(300)

BUCKET = "yak-spark-tiered"
PREFIX = "spark"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    weed = SeaweedS3(str(tmp_path_factory.mktemp("seaweed")))
    weed.start()
    weed.create_bucket(BUCKET)
    yield weed
    weed.stop()


def uri(s3: SeaweedS3) -> str:
    return f"s3://{BUCKET}/{PREFIX}?endpoint={s3.endpoint}&region=us-east-1"


@pytest.fixture(scope="module")
def broker(s3: SeaweedS3, tmp_path_factory: pytest.TempPathFactory) -> Iterator[YakBroker]:
    data = tmp_path_factory.mktemp("yak-tiered-spark") / "data"
    data.mkdir()
    b = YakBroker(data, {
        "remote.log.storage.system.enable": "true",
        "remote.storage.uri": uri(s3),
        "remote.storage.access.key.id": "yak",
        "remote.storage.secret.access.key": "yaksecret",
        "remote.log.manager.task.interval.ms": "300",
        "remote.log.manager.task.retry.backoff.max.ms": "1000",
        "remote.fetch.max.wait.ms": "5000",
    }).start()
    yield b
    try:
        b.stop(10)
    finally:
        b.kill()


def _store(s3: SeaweedS3) -> S3Store:
    return S3Store(BUCKET, endpoint=s3.endpoint, region="us-east-1", access_key_id="yak",
                   secret_access_key="yaksecret", virtual_hosted_style_request=False,
                   client_options={"allow_http": True})


def manifest(s3: SeaweedS3, topic: str, partition: int) -> Manifest | None:
    store = _store(s3)
    keys = [m["path"] for chunk in obstore.list(store, f"{PREFIX}/") for m in chunk
            if m["path"].startswith(f"{PREFIX}/{topic}-")
            and f"/{partition}/manifest/" in m["path"]]
    if not keys:
        return None
    return Manifest.from_bytes(bytes(obstore.get(store, max(keys)).bytes()))


def create_topic(b: YakBroker, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config={
        "segment.bytes": str(256 << 10), "remote.storage.enable": "true",
        "local.retention.bytes": str(256 << 10)})])[name].result(30)


def local_start(b: YakBroker, topic: str, partition: int) -> int:
    logs = list((b.data_dir / f"{topic}-{partition}").glob("*.log"))
    return min(int(p.stem) for p in logs) if logs else 0


def wait_tiered(b: YakBroker, s3: SeaweedS3, topic: str, partitions: int, upto: int) -> None:
    """Until every partition's remote log holds [0, upto) and its local log starts above 0
    (the oldest records are only in the bucket)."""
    def done() -> bool:
        for p in range(partitions):
            m = manifest(s3, topic, p)
            if m is None or m.copied_upto < upto or local_start(b, topic, p) == 0:
                return False
        return True
    wait_until(done, 90, f"{topic} tiered up to {upto} and deleted locally", every=0.3)


def produce(b: YakBroker, topic: str, partitions: int, n: int) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 10,
                  "batch.size": 64 * 1024})
    for i in range(n):
        p.produce(topic, key=b"k%d" % (i % 97), value=b"v%07d-" % i + b"x" * (150 + i % 200),
                  partition=i % partitions, headers=[("h", b"%d" % i)] if i % 5 == 0 else None)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def read(spark, b: YakBroker, s3: SeaweedS3 | None, topic: str, **opts: str) -> list[tuple]:
    r = (spark.read.format("yak").option("kafka.bootstrap.servers", b.bootstrap)
         .option("subscribe", topic).option("includeHeaders", "true"))
    if s3 is not None:
        r = (r.option("tiered.direct", "true").option("remote.storage.uri", uri(s3))
             .option("remote.storage.access.key.id", "yak")
             .option("remote.storage.secret.access.key", "yaksecret"))
    for k, v in opts.items():
        r = r.option(k, v)
    rows = r.load().collect()
    return sorted(
        (r.partition, r.offset, r.topic, None if r.key is None else bytes(r.key),
         None if r.value is None else bytes(r.value), r.timestamp, r.timestampType,
         tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers))
        for r in rows)


def plan(b: YakBroker, s3: SeaweedS3, topic: str, **extra: str) -> list[object]:
    """The direct reader's input partitions, planned here as Spark's driver plans them."""
    from yak.spark.options import parse_source_options
    from yak.spark.source import YakBatchReader

    opts = parse_source_options({
        "kafka.bootstrap.servers": b.bootstrap, "subscribe": topic, "tiered.direct": "true",
        "remote.storage.uri": uri(s3), "remote.storage.access.key.id": "yak",
        "remote.storage.secret.access.key": "yaksecret", **extra}, streaming=False)
    return list(YakBatchReader(opts).partitions())


def test_direct_read_gives_the_rows_the_brokers_give(spark, broker, s3) -> None:
    from yak.spark.source import TieredInputPartition, YakInputPartition

    topic, n = "direct", 10_000
    create_topic(broker, topic, 2)
    produce(broker, topic, 2, n)
    wait_tiered(broker, s3, topic, 2, n // 2 // 2)

    parts = plan(broker, s3, topic)
    tasks = [p.splits for p in parts if isinstance(p, TieredInputPartition)]
    remote = [s for t in tasks for s in t]
    tail = [p.rng for p in parts if isinstance(p, YakInputPartition)]
    assert len(tasks) == 2  # one task per topic-partition, as Spark's Kafka source plans
    assert len(remote) >= 4 and {s.partition for s in remote} == {0, 1}
    # minPartitions: more tasks, each a run of whole segments (the same offsets, planned to
    # where the remote log ended above, as uploads may go on)
    ends = {p: max(s.end for s in remote if s.partition == p) for p in (0, 1)}
    more = [p.splits for p in plan(broker, s3, topic, minPartitions="6", endingOffsets=(
        f'{{"{topic}":{{"0":{ends[0]},"1":{ends[1]}}}}}')) if isinstance(p, TieredInputPartition)]
    assert len(more) > 2

    def key(s):  # noqa: ANN001, ANN202
        return (s.partition, s.start, s.end)
    assert sorted(map(key, (s for t in more for s in t))) == sorted(map(key, remote))
    for p in (0, 1):  # remote splits from 0 up to the tail, which the brokers serve
        mine = sorted((s.start, s.end) for s in remote if s.partition == p)
        assert mine[0][0] == 0
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:], strict=False))
        (t,) = [r for r in tail if r.partition == p]
        assert t.start == mine[-1][1] and t.end == n // 2
        assert mine[-1][1] >= n // 4

    through = read(spark, broker, None, topic)
    direct = read(spark, broker, s3, topic)
    assert len(through) == n
    assert [r[:2] for r in through] == sorted((p, o) for p in (0, 1) for o in range(n // 2))
    assert direct == through

    # a range starting and ending inside remote segments
    rng = {"startingOffsets": f'{{"{topic}":{{"0":1234,"1":77}}}}',
           "endingOffsets": f'{{"{topic}":{{"0":2001,"1":2500}}}}'}
    part = read(spark, broker, s3, topic, **rng)
    assert part == read(spark, broker, None, topic, **rng)
    assert len(part) == (2001 - 1234) + (2500 - 77)
    assert "Traceback" not in broker.log()


def test_read_committed_drops_aborted_transactions_in_tiered_segments(
        spark, broker, s3) -> None:
    topic = "direct-txn"
    create_topic(broker, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "spark-direct",
                  "linger.ms": 5})
    p.init_transactions(30)
    committed: list[int] = []
    i = 0
    for t in range(30):
        p.begin_transaction()
        ids = list(range(i, i + 100))
        i += 100
        for k in ids:
            p.produce(topic, b"%08d" % k + b"y" * 400, partition=0)
        if t % 3 == 1:
            assert p.flush(30) == 0  # in the log before the abort (else librdkafka purges)
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            committed += ids
    wait_tiered(broker, s3, topic, 1, i // 2)
    m = manifest(s3, topic, 0)
    assert m is not None and any("txnindex" in s.files for s in m.copied)

    rc = {"kafka.isolation.level": "read_committed"}
    direct = read(spark, broker, s3, topic, **rc)
    assert [int(r[4][:8]) for r in direct] == committed
    assert direct == read(spark, broker, None, topic, **rc)
    # read_uncommitted from the bucket sees the aborted records too
    assert len(read(spark, broker, s3, topic)) == i


def test_a_remote_segment_deleted_after_planning_follows_fail_on_data_loss(
        spark, broker, s3) -> None:
    topic, n = "direct-lost", 6000
    create_topic(broker, topic, 1)
    produce(broker, topic, 1, n)
    wait_tiered(broker, s3, topic, 1, n // 2)
    m = manifest(s3, topic, 0)
    assert m is not None
    seg = sorted(m.copied, key=lambda s: s.base_offset)[1]
    part_dir = f"{PREFIX}/{topic}-{m.topic_id}/0"
    # The manifest still names the segment: the planner plans it, the executor finds it gone,
    # as when remote retention deletes it while the job runs.
    obstore.delete(_store(s3), seg.object_key(part_dir, "log"))

    with pytest.raises(Exception, match=f"remote segment {seg.segment_id}.*is gone"):
        read(spark, broker, s3, topic)
    rows = read(spark, broker, s3, topic, failOnDataLoss="false")
    lost = set(range(seg.base_offset, seg.end_offset + 1))
    assert [r[1] for r in rows] == [o for o in range(n) if o not in lost]

    # A corrupt object is never served, and is not data loss: it fails either way.
    bad = sorted(m.copied, key=lambda s: s.base_offset)[2]
    key = bad.object_key(part_dir, "log")
    data = bytearray(obstore.get(_store(s3), key).bytes())
    data[100] ^= 0xFF  # inside the first batch's records, past its 61-byte header
    obstore.put(_store(s3), key, bytes(data))
    with pytest.raises(Exception, match=f"batch {bad.base_offset} fails its CRC32C"):
        read(spark, broker, s3, topic, failOnDataLoss="false")


def test_direct_options_are_checked_when_the_query_is_defined() -> None:
    from yak.spark.options import YakOptionError, parse_source_options

    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    with pytest.raises(YakOptionError, match="tiered.direct=true needs remote.storage.uri"):
        parse_source_options({**base, "tiered.direct": "true"}, streaming=False)
    with pytest.raises(YakOptionError, match="remote.storage.uri 'http://x'"):
        parse_source_options({**base, "tiered.direct": "true",
                              "remote.storage.uri": "http://x"}, streaming=False)
    with pytest.raises(YakOptionError, match="go together"):
        parse_source_options({**base, "tiered.direct": "true", "remote.storage.uri":
                              "file:///tmp/x", "remote.storage.access.key.id": "k"},
                             streaming=False)
    o = parse_source_options({**base, "tiered.direct": "true",
                              "remote.storage.uri": "file:///tmp/x"}, streaming=False)
    assert o.tiered is not None and o.tiered.uri == "file:///tmp/x"



@pytest.mark.slow
def test_a_streaming_query_reads_tiered_segments_from_the_bucket(
        spark, broker, s3, tmp_path) -> None:
    topic, n = "direct-stream", 6000
    create_topic(broker, topic, 1)
    produce(broker, topic, 1, n)
    wait_tiered(broker, s3, topic, 1, n // 2)
    q = (spark.readStream.format("yak").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "2500").option("tiered.direct", "true")
         .option("remote.storage.uri", uri(s3)).option("remote.storage.access.key.id", "yak")
         .option("remote.storage.secret.access.key", "yaksecret").load()
         .writeStream.format("memory").queryName("direct_stream")
         .option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(180)
    got = spark.sql("select offset, value from direct_stream").collect()
    assert sorted(r.offset for r in got) == list(range(n))
    assert len([p for p in q.recentProgress if p["numInputRows"]]) >= 3
    through = {r[1]: r[4] for r in read(spark, broker, None, topic)}
    assert {r.offset: bytes(r.value) for r in got} == through
