"""Tiered storage in a 3-broker cluster: real `yak serve` processes on a real etcd, a real
S3 store (SeaweedFS on 127.0.0.1), unmodified clients.

- a tiered topic with three replicas: the leader uploads, every replica's local retention
  follows the manifest (followers re-read it), and everything reads back from offset 0;
- DeleteTopics: every broker deletes the topic's remote log (KIP-405's stopPartitions with
  deleteRemoteLog; idempotent, so three at once is fine): no object of the topic is left
  in the bucket and no broker logs an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import YakCluster, cluster_factory, etcd, keys  # noqa: F401
from tests.tiered.seaweed import SeaweedS3
from tests.tiered.test_broker_tiered import (  # noqa: F401 - `s3` is a fixture
    bucket_keys,
    consume_confluent,
    produce,
    s3,
    tiered_settings,
    wait_for,
)


def test_a_replicated_tiered_topic_reads_back_and_its_deletion_empties_the_bucket(
        s3: SeaweedS3, cluster_factory: Callable[..., YakCluster]) -> None:  # noqa: F811
    c = cluster_factory(3, **tiered_settings(s3, "cluster"))
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("ct", 1, 3, config={
        "segment.bytes": str(256 << 10), "remote.storage.enable": "true",
        "local.retention.bytes": str(512 << 10)})])["ct"].result(30)
    produce(c, "ct", 0, 3000)  # type: ignore[arg-type]  # ~3 MB, acks=all

    wait_for(lambda: len([k for k in bucket_keys(s3, "cluster/ct-") if k.endswith(".log")])
             >= 5, 60, "segments uploaded by the leader")

    def local_start(node: int) -> int:
        logs = sorted((c[node].data_dir / "ct-0").glob("*.log"))
        return int(logs[0].stem) if logs else -1
    for node in (1, 2, 3):  # the followers' local retention follows the manifest too
        wait_for(lambda node=node: local_start(node) > 0, 60,
                 f"broker {node} deleted uploaded segments locally")
    assert consume_confluent(c, "ct", 0, 3000) == list(range(3000))  # type: ignore[arg-type]

    admin.delete_topics(["ct"])["ct"].result(30)
    wait_for(lambda: bucket_keys(s3, "cluster/ct-") == [], 60,
             "the deleted topic's remote objects deleted")
    time.sleep(1.5)  # a late upload or manifest commit would show up in this window
    assert bucket_keys(s3, "cluster/ct-") == []
    for node in (1, 2, 3):
        text = c[node].log()
        assert "Traceback" not in text and "remote log task failed" not in text, node
