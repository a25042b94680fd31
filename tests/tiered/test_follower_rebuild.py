"""A follower rebuilt from the remote log (KIP-405's tier state machine, issue 25): three
real `yak serve` processes on a real etcd, a real S3 store (SeaweedFS on 127.0.0.1),
unmodified clients.

A follower whose data directory was wiped comes back below its leader's local log start.
The leader answers its Fetch OFFSET_MOVED_TO_TIERED_STORAGE; the follower asks the
leader's local start (ListOffsets -4) and restarts its log after the remote segment before
it, with that segment's producer snapshot and leader epoch, without copying the remote
records. Checked here: it rejoins the ISR with a local log that starts above the remote
part; once it leads, it reports the idempotent producer that only the remote part holds
(DescribeProducers), that producer carries on without an error, and a consumer reading
from offset 0 gets every record (the old ones from the bucket, the rest from its disk).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import YakCluster, cluster_factory, etcd, keys  # noqa: F401
from tests.cluster.test_cluster_metadata import _metadata
from tests.tiered.seaweed import SeaweedS3
from tests.tiered.test_broker_tiered import (  # noqa: F401 - `s3` is a fixture
    VALUE,
    bucket_keys,
    consume_confluent,
    produce,
    s3,
    tiered_settings,
    wait_for,
)
from yak.protocol import kio_compat

T = 60


def _local_start(c: YakCluster, node: int, topic: str) -> int:
    logs = sorted((c[node].data_dir / f"{topic}-0").glob("*.log"))
    return int(logs[0].stem) if logs else -1


def _partition(c: YakCluster, via: int, topic: str) -> tuple[int, tuple[int, ...]]:
    """(leader, isr) of partition 0 as broker `via` answers Metadata."""
    _brokers, _ctl, parts = _metadata(c[via].bootstrap, topic)
    return parts[0][1], parts[0][4]


def _producers(c: YakCluster, node: int, topic: str) -> dict[int, tuple[int, int]]:
    """DescribeProducers on broker `node` (the leader): producer id -> (epoch, last
    sequence) of partition 0's active producers."""
    mod = kio_compat.schema_module("describe_producers", 0, "request")
    req = kio_compat.build(mod.DescribeProducersRequest, topics=(
        kio_compat.build(mod.TopicRequest, name=topic, partition_indexes=(0,)),))
    with RawClient(c[node].bootstrap) as raw:
        r = raw.request(req)
    (part,) = r.topics[0].partitions
    assert part.error_code == 0, part.error_code
    return {s.producer_id: (s.producer_epoch, s.last_sequence) for s in part.active_producers}


def _produce_idempotent(p: Producer, topic: str, start: int, n: int) -> None:
    pad = b"x" * (VALUE - 8)
    failed: list[object] = []
    for i in range(start, start + n):
        p.produce(topic, b"%08d" % i + pad, partition=0,
                  on_delivery=lambda err, _m: failed.append(err) if err else None)
        p.poll(0)
    assert p.flush(T) == 0
    assert failed == []


def test_a_wiped_follower_rebuilds_from_the_remote_log_and_leads(
        s3: SeaweedS3, cluster_factory: Callable[..., YakCluster]) -> None:  # noqa: F811
    c = cluster_factory(3, **tiered_settings(s3, "rebuild"),
                        **{"auto.leader.rebalance.enable": "false"})
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    # Broker 3 is the preferred leader: it leads first, is wiped, and leads again at the end.
    admin.create_topics([NewTopic("fr", 1, replica_assignment=[[3, 1, 2]], config={
        "segment.bytes": str(256 << 10), "remote.storage.enable": "true",
        "local.retention.bytes": str(512 << 10)})])["fr"].result(T)
    wait_for(lambda: _partition(c, 1, "fr") == (3, (3, 1, 2)), T, "broker 3 leads fr")

    # An idempotent producer writes the first 500 records, then stays idle.
    idem = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True,
                     "acks": "all", "linger.ms": 20, "batch.size": 64 << 10,
                     "message.timeout.ms": 60000})
    _produce_idempotent(idem, "fr", 0, 500)

    c[3].stop(30)
    wait_for(lambda: _partition(c, 1, "fr")[0] == 1, T, "broker 1 leads fr")
    produce(c, "fr", 500, 3000)  # type: ignore[arg-type]  # ~3 MB, not idempotent
    # The idempotent producer's batches are now only in the remote log.
    wait_for(lambda: _local_start(c, 1, "fr") > 1000, 90,
             "broker 1 deleted uploaded segments locally")
    before = _producers(c, 1, "fr")
    assert len(before) == 1, before  # the idempotent producer, known to the leader
    (pid, (p_epoch, last_seq)), = before.items()
    assert last_seq == 499

    leader_start = _local_start(c, 1, "fr")
    shutil.rmtree(c[3].data_dir / "fr-0")
    c[3].start()
    wait_for(lambda: 3 in _partition(c, 1, "fr")[1], 90, "broker 3 back in the ISR")
    # It did not copy the remote part: its local log starts at or above the leader's.
    assert _local_start(c, 3, "fr") >= leader_start > 1000
    text = c[3].log()
    assert "after remote segment" in text and "no common epoch" not in text

    tp = TopicPartition("fr", 0)
    assert admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(T)[tp] is None
    wait_for(lambda: _partition(c, 1, "fr")[0] == 3, T, "broker 3 leads fr again")
    # The rebuilt leader knows the producer whose records it never copied.
    assert _producers(c, 3, "fr")[pid] == (p_epoch, 499)
    _produce_idempotent(idem, "fr", 3500, 500)  # carries on: no OUT_OF_ORDER_SEQUENCE
    assert _producers(c, 3, "fr")[pid] == (p_epoch, 999)

    assert consume_confluent(c, "fr", 0, 4000) == list(range(4000))  # type: ignore[arg-type]
    assert any(k.endswith(".log") for k in bucket_keys(s3, "rebuild/fr-"))
    for node in (1, 2, 3):
        log_text = c[node].log()
        assert "Traceback" not in log_text, node
