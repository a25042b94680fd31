"""The Spark data source and sink against a 3-broker cluster (a bootstrap list): a batch
write lands on partitions led by different brokers, and reads back whole."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import FAST_SESSION, YakCluster, _start_etcd
from tests.cluster.test_cluster_metadata import _metadata
from yak.cluster.layout import ClusterKeys


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YakCluster]:
    base: Path = tmp_path_factory.mktemp("spark-cluster")
    etcd = _start_etcd(base, 1)
    c = YakCluster(etcd, ClusterKeys("spark"), base / "brokers", dict(FAST_SESSION))
    try:
        for n in (1, 2, 3):
            c.add(n)
        c.wait_registered()
        yield c
    finally:
        c.stop()
        etcd.stop()


@pytest.mark.slow
def test_spark_writes_and_reads_a_replicated_topic(spark, cluster: YakCluster) -> None:
    bs = cluster.bootstrap
    a = AdminClient({"bootstrap.servers": bs})
    a.create_topics([NewTopic("spark-rf3", 3, 3, config={"min.insync.replicas": "2"})])[
        "spark-rf3"].result(20)
    leaders = {p[1] for p in _metadata(cluster[1].bootstrap, "spark-rf3")[2]}
    assert leaders == {1, 2, 3}
    df = spark.createDataFrame([(f"k{i}".encode(), f"v{i}".encode()) for i in range(3000)],
                               "key binary, value binary")
    (df.write.format("yak").option("kafka.bootstrap.servers", bs)
     .option("topic", "spark-rf3").mode("append").save())
    back = (spark.read.format("yak").option("kafka.bootstrap.servers", bs)
            .option("subscribe", "spark-rf3").load().collect())
    assert sorted(bytes(r.value) for r in back) == sorted(f"v{i}".encode() for i in range(3000))
    assert {r.partition for r in back} == {0, 1, 2}
