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

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import metadata_brokers
from tests.cluster.test_cluster_metadata import _metadata
from tests.waiting import wait_until
from yak.cluster.replication_throttle import RateQuota, names_replica
from yak.errors import ErrorCode
from yak.protocol import kio_compat

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


def _alter_raw(bootstrap: str, moves: dict[tuple[str, int], list[int] | None],
               version: int = 1, allow_rf_change: bool = True) -> dict[tuple[str, int], int]:
    """AlterPartitionReassignments sent to one broker (kio, no client library): used while a
    broker is paused, where a client library may pick the paused one."""
    mod = kio_compat.schema_module("alter_partition_reassignments", version, "request")
    topics: dict[str, list] = {}
    for (t, p), replicas in moves.items():
        topics.setdefault(t, []).append(kio_compat.build(
            mod.ReassignablePartition, partition_index=p,
            replicas=None if replicas is None else tuple(replicas)))
    fields = {"allow_replication_factor_change": allow_rf_change} if version >= 1 else {}
    with RawClient(bootstrap) as raw:
        r = raw.request(kio_compat.build(
            mod.AlterPartitionReassignmentsRequest, **fields,
            topics=tuple(kio_compat.build(mod.ReassignableTopic, name=t, partitions=tuple(ps))
                         for t, ps in topics.items())))
    assert r.error_code == 0, r
    return {(t.name, p.partition_index): int(p.error_code)
            for t in r.responses for p in t.partitions}


def _list_raw(bootstrap: str, topics: dict[str, list[int]] | None = None) -> dict:
    """ListPartitionReassignments from one broker: (topic, partition) -> (replicas,
    adding, removing)."""
    mod = kio_compat.schema_module("list_partition_reassignments", 0, "request")
    wanted = None if topics is None else tuple(
        kio_compat.build(mod.ListPartitionReassignmentsTopics, name=t,
                         partition_indexes=tuple(ps)) for t, ps in topics.items())
    with RawClient(bootstrap) as raw:
        r = raw.request(kio_compat.build(mod.ListPartitionReassignmentsRequest,
                                         topics=wanted))
    assert r.error_code == 0, r
    return {(t.name, p.partition_index): (tuple(p.replicas), tuple(p.adding_replicas),
                                          tuple(p.removing_replicas))
            for t in r.topics for p in t.partitions}


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


def test_list_during_a_move_cancel_reverts_and_a_new_target_replaces(cluster_factory) -> None:
    # A session long enough that the target broker, paused so that it cannot catch up,
    # stays registered while the move is listed and cancelled.
    c = cluster_factory(3, **{"broker.session.timeout.ms": "15000"})
    _create(c[1].bootstrap, "cx")
    wait_until(lambda: _partition(c[1].bootstrap, "cx")[1] == 1, T, "cx-0 led by 1")
    ctrl = _metadata(c[1].bootstrap, "cx")[1]
    target = 3 if ctrl == 2 else 2  # not the controller: the others' requests go on
    via = c[1].bootstrap
    tp = ("cx", 0)
    os.kill(c[target].pid, signal.SIGSTOP)
    try:
        assert _alter_raw(via, {tp: [target]}) == {tp: 0}
        listed = _list_raw(via)
        assert listed == {tp: ((target, 1), (target,), (1,))}, listed
        assert _list_raw(via, {"cx": [0, 7]}) == listed
        assert _list_raw(via, {"nope": [0]}) == {}
        # Metadata lists the adding replica; the leader and the ISR are unchanged.
        part = _partition(via, "cx")
        assert part[1] == 1 and part[3] == (target, 1) and part[4] == (1,), part
        assert _alter_raw(via, {tp: None}) == {tp: 0}
        assert _list_raw(via) == {}
        part = _partition(via, "cx")
        assert part[1] == 1 and part[3] == (1,) and part[4] == (1,), part
        assert _alter_raw(via, {tp: None}) == {tp: ErrorCode.no_reassignment_in_progress}
        # v1 with allowReplicationFactorChange false: a change of size is refused.
        assert _alter_raw(via, {tp: [1, target]}, allow_rf_change=False) == {
            tp: ErrorCode.invalid_replication_factor}
        # A second reassignment of a moving partition replaces its target (Kafka's rule):
        # to the third broker, which is running, so this move completes.
        other = ({1, 2, 3} - {1, target}).pop()
        assert _alter_raw(via, {tp: [target]}) == {tp: 0}
        assert _alter_raw(via, {tp: [other]}) == {tp: 0}
        wait_until(lambda: _partition(via, "cx")[1:5:2] == (other, (other,)), T,
                   "the replaced move completed on the third broker")
        assert _list_raw(via) == {}
    finally:
        os.kill(c[target].pid, signal.SIGCONT)
    # Once resumed, the target applies the records it missed: hosts cx-0, then drops it.
    wait_until(lambda: target in metadata_brokers(c[target].bootstrap), T,
               "the paused broker answers again")
    wait_until(lambda: not (c[target].data_dir / "cx-0").exists(), T,
               "the cancelled target holds no copy")
    wait_until(lambda: not (c[1].data_dir / "cx-0").exists(), T, "broker 1's copy deleted")
    assert (c[other].data_dir / "cx-0").exists()
    # The kafka-python AdminClient sees the same (nothing is moving now).
    a = _kadmin(c.bootstrap)
    assert a.list_partition_reassignments() == {}
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


def test_move_survives_killing_the_controller_and_leader_mid_move(cluster_factory) -> None:
    """The move is in the partition record: a new controller finishes it, and nothing
    acknowledged with acks=all before the crash is lost."""
    c = cluster_factory(3, **{"auto.leader.rebalance.enable": "false"})
    ctrl = _metadata(c[1].bootstrap, "__none__")[1]
    a_id, b_id = (n for n in (1, 2, 3) if n != ctrl)
    admin = AdminClient({"bootstrap.servers": c[a_id].bootstrap})
    admin.create_topics([NewTopic("kc", 1, replica_assignment=[[ctrl, a_id]])])["kc"].result(T)
    wait_until(lambda: sorted(_partition(c[a_id].bootstrap, "kc")[4]) == sorted([ctrl, a_id]),
               T, "kc-0 in sync on both replicas")
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(1000):
        p.produce("kc", b"k%04d" % i)
    assert p.flush(30) == 0
    tp = ("kc", 0)
    os.kill(c[b_id].pid, signal.SIGSTOP)  # the adding replica cannot catch up yet
    try:
        assert _alter_raw(c[a_id].bootstrap, {tp: [a_id, b_id]}) == {tp: 0}
        part = _partition(c[a_id].bootstrap, "kc")
        assert part[3] == (a_id, b_id, ctrl), part
        c[ctrl].kill()  # the controller, the leader and the replica being removed
    finally:
        os.kill(c[b_id].pid, signal.SIGCONT)
    def moved() -> bool:
        part = _partition(c[a_id].bootstrap, "kc")
        return part[3] == (a_id, b_id) and sorted(part[4]) == sorted([a_id, b_id])

    wait_until(moved, 60, "the new controller completed the move")
    assert _partition(c[a_id].bootstrap, "kc")[1] in (a_id, b_id)
    got = _consume_all(c[b_id].bootstrap, "kc", 1000)
    assert got == [b"k%04d" % i for i in range(1000)]
    assert (c[ctrl].data_dir / "kc-0").exists()  # killed before it could delete it
    c[ctrl].start()  # the removed replica comes back: it deletes its copy at start-up
    wait_until(lambda: not (c[ctrl].data_dir / "kc-0").exists(), T,
               "the restarted removed replica deleted kc-0")
    assert _partition(c[ctrl].bootstrap, "kc")[3] == (a_id, b_id)


def test_api_versions_lists_both_apis(cluster_factory) -> None:
    c = cluster_factory(1)
    mod = kio_compat.schema_module("api_versions", 3, "request")
    with RawClient(c[1].bootstrap) as raw:
        r = raw.request(kio_compat.build(mod.ApiVersionsRequest,
                                         client_software_name="t",
                                         client_software_version="1"))
    keys = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert keys[45] == (0, 1) and keys[46] == (0, 0)


def test_three_replicas_move_to_a_fourth_broker_under_load(cluster_factory) -> None:
    """{1,2,3} -> {2,3,4} while a keyed acks=all producer writes: afterwards broker 4 alone
    (2 and 3 killed) serves every acknowledged record, in order per key; broker 1's copy
    is gone."""
    c = cluster_factory(4, **{"auto.leader.rebalance.enable": "false"})
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})
    admin.create_topics([NewTopic("four", 1, replica_assignment=[[1, 2, 3]])])["four"].result(T)
    wait_until(lambda: sorted(_partition(c[4].bootstrap, "four")[4]) == [1, 2, 3], T,
               "four-0 in sync on 1, 2, 3")
    acked: list[tuple[bytes, bytes]] = []
    failed: list[object] = []
    stop = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                      "enable.idempotence": True, "message.timeout.ms": 30000})

        def done(err: object, msg: object) -> None:
            if err is None:
                acked.append((msg.key(), msg.value()))  # type: ignore[attr-defined]
            else:
                failed.append(err)

        i = 0
        while not stop.is_set():
            p.produce("four", b"%06d" % i, key=b"k%d" % (i % 7), on_delivery=done)
            p.poll(0)
            i += 1
            if i % 100 == 0:
                time.sleep(0.01)
        p.flush(30)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        wait_until(lambda: len(acked) >= 1000, T, "records acked before the move")
        assert _alter_raw(c[4].bootstrap, {("four", 0): [2, 3, 4]}) == {("four", 0): 0}
        wait_until(lambda: _partition(c[4].bootstrap, "four")[3] == (2, 3, 4)
                   and _list_raw(c[4].bootstrap) == {}, 60, "the move completed")
        before = len(acked)
        wait_until(lambda: len(acked) >= before + 1000, T, "records acked after the move")
    finally:
        stop.set()
        writer.join(60)
    assert not failed, failed[:3]
    wait_until(lambda: not (c[1].data_dir / "four-0").exists(), T, "broker 1 deleted four-0")
    c[2].kill()
    c[3].kill()
    wait_until(lambda: _partition(c[4].bootstrap, "four")[1] == 4, 30, "broker 4 leads")
    got = _consume_all(c[4].bootstrap, "four", len(acked))
    assert sorted(got) == sorted(v for _k, v in acked), (len(got), len(acked))
    # Each value once (the multisets are equal), in write order: one partition, one
    # idempotent producer, so every key's records too.
    assert got == sorted(got)


@pytest.mark.parametrize("side", ["follower", "leader"])
def test_throttle_holds_a_move_to_its_rate(cluster_factory, side: str) -> None:
    """KIP-73: a 1 MB/s `<side>.replication.throttled.rate` (dynamic, on the follower 2 or
    the leader 1) applies to the replica its topic names in
    `<side>.replication.throttled.replicas` while the new replica catches up; a topic that
    names none moves unthrottled."""
    broker = 2 if side == "follower" else 1
    c = cluster_factory(2)
    admin = AdminClient({"bootstrap.servers": c[1].bootstrap})
    fs = admin.create_topics([
        NewTopic("slow", 1, replica_assignment=[[1]],
                 config={f"{side}.replication.throttled.replicas": f"0:{broker}"}),
        NewTopic("quick", 1, replica_assignment=[[1]])])
    for f in fs.values():
        f.result(T)
    size = 6_000_000
    value = os.urandom(10_000)  # incompressible (the producer compresses nothing anyway)
    p = Producer({"bootstrap.servers": c[1].bootstrap, "acks": "all"})
    for topic in ("slow", "quick"):
        for _ in range(size // len(value)):
            p.produce(topic, value)
            p.poll(0)
    assert p.flush(60) == 0
    rate = 1_000_000
    res = ConfigResource(ResourceType.BROKER, str(broker), incremental_configs=[ConfigEntry(
        f"{side}.replication.throttled.rate", str(rate),
        incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(T)

    def move(topic: str) -> float:
        started = time.monotonic()
        assert _alter_raw(c[1].bootstrap, {(topic, 0): [1, 2]}) == {(topic, 0): 0}
        wait_until(lambda: _list_raw(c[1].bootstrap) == {}, 60, f"{topic} moved")
        return time.monotonic() - started

    slow = move("slow")
    observed = size / slow
    assert 0.8 * rate <= observed <= 1.2 * rate, f"{observed:.0f} B/s over {slow:.1f} s"
    quick = move("quick")
    print(f"{side} throttle: {size} B in {slow:.2f} s ({observed / 1e6:.2f} MB/s at a"
          f" {rate / 1e6:.1f} MB/s throttle); unthrottled: {quick:.2f} s")
    assert quick < slow / 2, (quick, slow)


def test_throttled_replicas_lists_and_the_quota() -> None:
    """The parts of the follower throttle without a broker: Kafka's list form, and the
    bucket against a manual clock."""
    assert names_replica("*", 3, 2)
    assert names_replica("0:1, 3:2", 3, 2)
    assert not names_replica("0:1,3:1", 3, 2)
    assert not names_replica("", 0, 1) and not names_replica(None, 0, 1)
    now = [0.0]
    q = RateQuota(lambda: 1000, clock=lambda: now[0])
    assert q.wait_s() == 0.0
    q.record(1100)  # the bucket starts empty: 1100 bytes owed at 1000 B/s
    assert q.wait_s() == pytest.approx(1.1)
    now[0] = 0.6
    assert q.wait_s() == pytest.approx(0.5)
    now[0] = 5.0  # idle a while: refilled to a tenth of a second's worth only
    assert q.wait_s() == 0.0
    q.record(300)
    assert q.wait_s() == pytest.approx(0.2)
    assert not q.unlimited() and RateQuota(lambda: (1 << 63) - 1).unlimited()


def test_move_survives_a_full_cluster_restart(cluster_factory) -> None:
    """Every broker restarts mid-move: the record in etcd still says what moves, and the
    move completes afterwards with every acknowledged record."""
    c = cluster_factory(3, **{"auto.leader.rebalance.enable": "false"})
    _create(c[1].bootstrap, "rs")
    wait_until(lambda: _partition(c[1].bootstrap, "rs")[1] == 1, T, "rs-0 led by 1")
    p = Producer({"bootstrap.servers": c[1].bootstrap, "acks": "all"})
    for i in range(500):
        p.produce("rs", b"s%04d" % i)
    assert p.flush(30) == 0
    ctrl = _metadata(c[1].bootstrap, "rs")[1]
    target = 3 if ctrl == 2 else 2
    os.kill(c[target].pid, signal.SIGSTOP)  # it cannot catch up before the restart
    try:
        assert _alter_raw(c[1].bootstrap, {("rs", 0): [target]}) == {("rs", 0): 0}
        assert _list_raw(c[1].bootstrap) == {("rs", 0): ((target, 1), (target,), (1,))}
    finally:
        c[target].kill()  # SIGKILL ends a stopped process too
    for n in (1, 2, 3):
        if n != target:
            c[n].stop(30)
    for n in (1, 2, 3):
        c[n].start()
    c.wait_registered()
    wait_until(lambda: _partition(c[1].bootstrap, "rs")[1:5:2] == (target, (target,)), 60,
               "the move completed after the restart")
    assert _list_raw(c[1].bootstrap) == {}
    assert _consume_all(c[target].bootstrap, "rs", 500) == [b"s%04d" % i for i in range(500)]
    wait_until(lambda: not (c[1].data_dir / "rs-0").exists(), T, "broker 1's copy deleted")
