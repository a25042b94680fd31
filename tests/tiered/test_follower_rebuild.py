"""A follower rebuilt from the remote log (KIP-405's tier state machine, issue 25): three
real `yak serve` processes on a real etcd, a real S3 store (SeaweedFS on 127.0.0.1),
unmodified clients; and the follower's side alone on real logs and a `file://` store.

A follower whose data directory was wiped comes back below its leader's local log start.
The leader answers its Fetch OFFSET_MOVED_TO_TIERED_STORAGE; the follower asks the
leader's local start (ListOffsets -4) and restarts its log after the remote segment before
it, with that segment's producer snapshot and leader epoch, without copying the remote
records. Checked here: it rejoins the ISR with a local log that starts above the remote
part; once it leads, it reports the idempotent producer that only the remote part holds
(DescribeProducers), that producer carries on without an error, and a consumer reading
from offset 0 gets every record (the old ones from the bucket, the rest from its disk).
The same for a follower that was only stopped meanwhile (its Fetch is answered
OFFSET_OUT_OF_RANGE below the leader's local start, which on a tiered topic leads to the
same rebuild).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
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
from tests.tiered.test_remote_log import CFG, TID, lead, make_rlm
from tests.tiered.test_remote_log import produce as produce_local
from tests.tiered.test_remote_log import round_ as one_round
from yak.errors import KafkaStorageError, NotLeaderOrFollowerError
from yak.partition import FetchIsolation, PartitionState, ReplicaManager
from yak.protocol import kio_compat
from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager
from yak.tiered.metadata import partition_dir

T = 60
_HW = FetchIsolation.HIGH_WATERMARK


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


@pytest.mark.parametrize("wiped", [True, False], ids=["wiped", "stale"])
def test_a_follower_below_the_leaders_local_start_rebuilds_from_the_remote_log_and_leads(
        s3: SeaweedS3, cluster_factory: Callable[..., YakCluster],  # noqa: F811
        wiped: bool) -> None:
    """`wiped`: its data dir removed (its Fetch at 0 is answered
    OFFSET_MOVED_TO_TIERED_STORAGE); else only stopped while the others went on (its last
    epoch is older than any the leader still has: OFFSET_OUT_OF_RANGE below the leader's
    local start, which on a tiered topic leads to the same rebuild)."""
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
    if wiped:
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


def test_the_follower_side_restores_producers_and_the_epoch_from_the_remote_segment(
        tmp_path: Path) -> None:
    """ReplicaManager.build_remote_log_aux_state on real logs: broker 1 leads and uploads
    (an idempotent producer at leader epoch 0, then plain batches at epoch 1), broker 2
    restarts its log after the remote segment before broker 1's local start."""
    logs1 = LogManager(str(tmp_path / "d1"), LogConfig(), start_cleaner=False)
    logs2 = LogManager(str(tmp_path / "d2"), LogConfig(), start_cleaner=False)
    logs1.startup()
    logs2.startup()
    leader, follower = ReplicaManager(1, logs1), ReplicaManager(2, logs2)
    try:
        lead(leader)

        async def idempotent() -> None:
            for b in range(30):  # producer 42, sequences 0..299, leader epoch 0
                recs = [Record(b"k", b"v%08d" % (b * 10 + i) + b"x" * 100, 0)
                        for i in range(10)]
                batch = build_batch(recs, producer_id=42, producer_epoch=3,
                                    base_sequence=b * 10)
                (r,) = await leader.append_records([("t", 0, memoryview(batch))], 1, 0,
                                                   5000)  # type: ignore[arg-type]
                assert r.error == 0
        asyncio.run(idempotent())
        lead(leader, epoch=1)
        produce_local(leader, 120, start=300)
        plog = leader.get_partition("t", 0).log  # type: ignore[union-attr]
        store = tmp_path / "bucket"

        async def main() -> None:
            rlm1 = make_rlm(leader, store)
            await rlm1.start()
            for _ in range(3):
                await one_round(rlm1)
            assert plog.apply_retention() > 0
            local_start = plog.log_start_offset
            assert local_start > 300  # the idempotent producer's batches are only remote
            local_epoch = leader.fetch_offset_for_timestamp("t", 0, -4, _HW)[2]
            m = rlm1._states[("t", 0)].manifest
            assert m is not None
            seg = m.find(local_start - 1)
            assert seg is not None

            follower.apply_partition_state("t", 0, TID, PartitionState(
                (1, 2), (1, 2), 1, 1, 1), CFG)
            rlm2 = make_rlm(follower, store)
            p2 = follower.get_partition("t", 0)
            assert p2 is not None
            # A remote snapshot that does not match its manifest entry: refused (retriable),
            # the follower's log untouched; never a guess.
            snap = store / seg.object_key(partition_dir("t", str(TID), 0), "snapshot")
            good = snap.read_bytes()
            snap.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
            with pytest.raises(KafkaStorageError):
                await follower.build_remote_log_aux_state("t", 0, 1, local_start, local_epoch)
            assert p2.log.log_start_offset == p2.log.log_end_offset == 0
            snap.write_bytes(good)
            start = await follower.build_remote_log_aux_state("t", 0, 1, local_start,
                                                               local_epoch)
            assert start == seg.end_offset + 1 >= local_start
            assert p2.log.log_start_offset == p2.log.log_end_offset == start
            entry = p2.log.producer_state.producers[42]
            assert (entry.epoch, entry.last_seq) == (3, 299)
            assert p2.latest_epoch == 1  # the epoch of the record before its start

            # An epoch that began exactly at the leader's local start: the follower's
            # epoch would be older than every one the leader has, so none is kept.
            start2 = await follower.build_remote_log_aux_state("t", 0, 1, start, 2)
            assert start2 == start and p2.latest_epoch == -1
            assert p2.log.producer_state.producers[42].last_seq == 299
            # No longer followed at that epoch: refused, the log untouched.
            follower.apply_partition_state("t", 0, TID, PartitionState(
                (1, 2), (1, 2), 1, 2, 2), CFG)
            with pytest.raises(NotLeaderOrFollowerError):
                await follower.build_remote_log_aux_state("t", 0, 1, local_start, 1)
            assert p2.log.log_start_offset == start
            await rlm1.stop()
            await rlm2.stop()
        asyncio.run(main())
    finally:
        for rm_, logs in ((leader, logs1), (follower, logs2)):
            rm_.io_pool.shutdown(wait=True)
            logs.shutdown()
