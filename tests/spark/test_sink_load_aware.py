"""The Spark sink's `partitioner=load_aware` (issue 23): keyless rows placed by
`yak.client.load_aware`, one draw per `kafka.batch.size` of rows, in a real local Spark
writing to three real brokers. Functional: every row arrives once, keyless rows spread
over partitions led by every broker, keyed rows keep murmur2's partition. (That a slow
broker receives fewer keyless records is the gateway's test,
tests/gateway/test_load_aware_gateway.py, over the same partitioner.)"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import FAST_SESSION, YakCluster, _start_etcd
from yak.cluster.layout import ClusterKeys
from yak.spark.options import YakOptionError, parse_sink_options
from yak.spark.partitioner import partition_for

pytestmark = pytest.mark.timeout(300)

LEADERS = [1, 2, 3, 1, 2, 3]  # partition -> its only replica


def test_the_option_is_checked() -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t"}
    assert parse_sink_options(base).partitioner == "default"
    assert parse_sink_options({**base, "partitioner": "LOAD_AWARE"}).partitioner == "load_aware"
    with pytest.raises(YakOptionError, match="option partitioner: 'fast' is not one of"):
        parse_sink_options({**base, "partitioner": "fast"})
    with pytest.raises(YakOptionError, match="exactlyOnceMode=markers cannot repeat"):
        parse_sink_options({**base, "partitioner": "load_aware",
                            "exactlyOnceMode": "markers"})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YakCluster]:
    base: Path = tmp_path_factory.mktemp("spark-load-aware")
    etcd = _start_etcd(base, 1)
    c = YakCluster(etcd, ClusterKeys("spark-la"), base / "brokers", dict(FAST_SESSION))
    try:
        for n in (1, 2, 3):
            c.add(n)
        c.wait_registered()
        yield c
    finally:
        c.stop()
        etcd.stop()


@pytest.mark.slow
def test_keyless_rows_are_placed_load_aware(spark, cluster: YakCluster) -> None:
    bs = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic("la", 6, replica_assignment=[[b] for b in LEADERS])])[
        "la"].result(20)
    keyless = [(None, b"v%06d" % i + b"." * 90) for i in range(20000)]
    keyed = [(b"k%d" % i, b"keyed-%d" % i) for i in range(300)]
    df = spark.createDataFrame(keyless + keyed, "key binary, value binary")
    (df.write.format("yak").option("kafka.bootstrap.servers", bs).option("topic", "la")
     .option("partitioner", "load_aware").option("kafka.batch.size", "16384")
     .mode("append").save())
    back = (spark.read.format("yak").option("kafka.bootstrap.servers", bs)
            .option("subscribe", "la").load().collect())
    values = Counter(bytes(r.value) for r in back)
    assert len(back) == len(keyless) + len(keyed)
    assert set(values) == {v for _, v in keyless + keyed} and max(values.values()) == 1
    per_partition = Counter(r.partition for r in back if r.key is None)
    per_broker = Counter()
    for p, n in per_partition.items():
        per_broker[LEADERS[p]] += n
    # ~2 MB in runs of 16 KiB: about 120 draws, weighted by each leader's answers.
    assert set(per_broker) == {1, 2, 3}, per_partition
    assert len(per_partition) >= 4, per_partition
    for r in back:
        if r.key is not None:
            assert r.partition == int(partition_for(pa.array([bytes(r.key)]), 6)[0])
    print("keyless rows per broker:", dict(per_broker), "per partition:",
          dict(sorted(per_partition.items())))


def test_transactional_streaming_write_places_keyless_rows_load_aware(module_broker) -> None:
    """The streaming sink's transactional path (`write_fenced`, what Spark's write task
    calls) with load_aware: keyless rows spread over the partitions in runs of
    kafka.batch.size, committed once, a replay skipped."""
    import uuid

    from tests.txn.wire import read_all
    from yak.client.transactions import TransactionalClient
    from yak.spark.sink import write_fenced

    bs = module_broker.bootstrap
    topic = f"lat-{uuid.uuid4().hex[:6]}"
    TransactionalClient(bs).create_topic(topic, 4)
    opts = parse_sink_options({"kafka.bootstrap.servers": bs, "topic": topic,
                               "partitioner": "load_aware", "kafka.batch.size": "2048",
                               "exactlyOnceMode": "transactions"})
    table = pa.table({"value": pa.array([b"r%05d" % i + b"-" * 40 for i in range(3000)],
                                        pa.binary())})
    qid = str(uuid.uuid4())
    first = write_fenced(opts, table, qid, 0, 0)
    assert first.rows == 3000 and first.skipped == 0
    assert len(first.partitions) >= 2, first.partitions  # ~70 runs of 2 KiB, 4 partitions
    assert write_fenced(opts, table, qid, 0, 0).skipped == 3000  # the replay
    got = [v for _p, _o, v in read_all(bs, topic, range(4), "read_committed")]
    assert sorted(got) == sorted(table.column("value").to_pylist())
