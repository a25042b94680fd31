"""Partition reassignment (KIP-455, issue 23) through the wire: real brokers on real etcd,
kafka-python's AdminClient (confluent-kafka's Python API has no reassignment calls) for
AlterPartitionReassignments / ListPartitionReassignments, librdkafka producing with
acks=all while a partition moves.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient

from tests.cluster.test_cluster_metadata import _metadata
from tests.waiting import wait_until
from yak.errors import ErrorCode

T = 20


def _kadmin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)


def _create(bootstrap: str, topic: str) -> None:
    """One partition, one replica, on broker 1."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1]])])[topic].result(T)


def _partition(bootstrap: str, topic: str, p: int = 0) -> tuple:
    """(partition, leader, leader epoch, replicas, isr, offline) as Metadata v12 says."""
    return _metadata(bootstrap, topic)[2][p]


def _code(err: object) -> int:
    """The Kafka error code of a kafka-python per-partition result (None: 0)."""
    return 0 if err is None else int(err.errno)  # type: ignore[attr-defined]


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def test_move_under_acks_all_producer_loses_nothing_and_deletes_the_old_copy(
        cluster_factory) -> None:
    c = cluster_factory(3)
    _create(c[1].bootstrap, "mv")
    wait_until(lambda: _partition(c[3].bootstrap, "mv")[1] == 1, T, "mv-0 led by 1")
    acked: list[bytes] = []
    failed: list[object] = []
    stop = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                      "enable.idempotence": True, "message.timeout.ms": 30000,
                      "linger.ms": 5})

        def done(err: object, msg: object) -> None:
            if err is None:
                acked.append(msg.value())  # type: ignore[attr-defined]
            else:
                failed.append(err)

        i = 0
        while not stop.is_set():
            p.produce("mv", b"v%06d" % i, on_delivery=done)
            p.poll(0)
            i += 1
            if i % 200 == 0:
                time.sleep(0.01)  # paces the producer: a few thousand records a second
        p.flush(30)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        wait_until(lambda: len(acked) >= 2000, T, "records acked before the move")
        a = _kadmin(c.bootstrap)
        result = a.alter_partition_reassignments({KTP("mv", 0): [2]})
        assert result == {KTP("mv", 0): None}, result
        wait_until(lambda: _partition(c[3].bootstrap, "mv")[1:5:2] == (2, (2,)), 60,
                   "mv-0 moved to broker 2 and led there")
        wait_until(lambda: a.list_partition_reassignments() == {}, T, "no move listed")
        before = len(acked)
        wait_until(lambda: len(acked) >= before + 2000, T, "records acked after the move")
        a.close()
    finally:
        stop.set()
        writer.join(60)
    assert not failed, failed[:3]
    part = _partition(c[2].bootstrap, "mv")
    assert part[3] == (2,) and part[4] == (2,) and part[2] >= 1  # a new leader epoch
    got = _consume_all(c[2].bootstrap, "mv", len(acked))
    missing = set(acked) - set(got)
    assert not missing, f"{len(missing)} acked records lost, e.g. {sorted(missing)[:3]}"
    assert got == sorted(got)  # one producer, one partition: the order it wrote
    wait_until(lambda: not (c[1].data_dir / "mv-0").exists(), T,
               "broker 1's copy of mv-0 deleted")
    assert (c[2].data_dir / "mv-0").exists()


def test_list_during_a_move_then_cancel_reverts(cluster_factory) -> None:
    # A session long enough that broker 2, paused so that it cannot catch up, stays
    # registered while the move is listed and cancelled.
    c = cluster_factory(3, **{"broker.session.timeout.ms": "15000"})
    _create(c[1].bootstrap, "cx")
    wait_until(lambda: _partition(c[1].bootstrap, "cx")[1] == 1, T, "cx-0 led by 1")
    a = _kadmin(c[1].bootstrap)
    tp = KTP("cx", 0)
    os.kill(c[2].pid, signal.SIGSTOP)
    try:
        assert a.alter_partition_reassignments({tp: [2]}) == {tp: None}
        listed = a.list_partition_reassignments()
        assert listed == {tp: {"replicas": [2, 1], "adding_replicas": [2],
                               "removing_replicas": [1]}}, listed
        assert a.list_partition_reassignments({"cx": [0]}) == listed
        assert a.list_partition_reassignments({"nope": [0]}) == {}
        # Metadata lists the adding replica; the leader and the ISR are unchanged.
        part = _partition(c[3].bootstrap, "cx")
        assert part[1] == 1 and part[3] == (2, 1) and part[4] == (1,), part
        assert a.alter_partition_reassignments({tp: None}) == {tp: None}
        assert a.list_partition_reassignments() == {}
        part = _partition(c[3].bootstrap, "cx")
        assert part[1] == 1 and part[3] == (1,) and part[4] == (1,), part
        again = a.alter_partition_reassignments({tp: None})
        assert _code(again[tp]) == ErrorCode.no_reassignment_in_progress, again
    finally:
        os.kill(c[2].pid, signal.SIGCONT)
    time.sleep(1.0)  # lets broker 2 apply the records it missed while paused
    assert not (c[2].data_dir / "cx-0").exists()
    assert (c[1].data_dir / "cx-0").exists()
    a.close()


def test_raise_rf_then_lower_it_moving_the_leader_and_errors(cluster_factory) -> None:
    c = cluster_factory(3, **{"auto.leader.rebalance.enable": "false"})
    _create(c[1].bootstrap, "rf")
    wait_until(lambda: _partition(c[3].bootstrap, "rf")[1] == 1, T, "rf-0 led by 1")
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(500):
        p.produce("rf", b"r%04d" % i)
    assert p.flush(30) == 0
    a = _kadmin(c.bootstrap)
    tp = KTP("rf", 0)
    assert a.alter_partition_reassignments({tp: [1, 2, 3]}) == {tp: None}
    wait_until(lambda: (_partition(c[3].bootstrap, "rf")[3],
                        sorted(_partition(c[3].bootstrap, "rf")[4])) == ((1, 2, 3), [1, 2, 3]),
               60, "rf-0 on three in-sync replicas")
    # The ISR grows first (the leader's write), then the controller completes the move.
    wait_until(lambda: a.list_partition_reassignments() == {}, T, "the move completed")
    assert _partition(c[3].bootstrap, "rf")[3] == (1, 2, 3)
    epoch = _partition(c[3].bootstrap, "rf")[2]
    for n in (2, 3):
        assert (c[n].data_dir / "rf-0").exists()
    # Lower it to broker 2 alone: the leader (1) is removed, so leadership moves.
    assert a.alter_partition_reassignments({tp: [2]}) == {tp: None}
    wait_until(lambda: _partition(c[3].bootstrap, "rf")[1:5] == (2, epoch + 1, (2,), (2,)), T, "rf-0 on broker 2 alone, led by it at a new epoch")
    wait_until(lambda: not (c[1].data_dir / "rf-0").exists()
               and not (c[3].data_dir / "rf-0").exists(), T, "brokers 1 and 3 deleted rf-0")
    assert _consume_all(c[2].bootstrap, "rf", 500) == [b"r%04d" % i for i in range(500)]
    # Bad input: Kafka's error codes, per partition.
    errs = a.alter_partition_reassignments({tp: [2, 9]})
    assert _code(errs[tp]) == ErrorCode.invalid_replica_assignment, errs
    errs = a.alter_partition_reassignments({tp: [3, 3]})
    assert _code(errs[tp]) == ErrorCode.invalid_replica_assignment, errs
    errs = a.alter_partition_reassignments({KTP("rf", 5): [1]})
    assert _code(errs[KTP("rf", 5)]) == ErrorCode.unknown_topic_or_partition, errs
    errs = a.alter_partition_reassignments({KTP("nope", 0): [1]})
    assert _code(errs[KTP("nope", 0)]) == ErrorCode.unknown_topic_or_partition, errs
    assert _partition(c[3].bootstrap, "rf")[3] == (2,)
    a.close()
