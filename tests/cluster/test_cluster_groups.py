"""Consumer groups on a cluster: the coordinator of a group is the leader of its
`__consumer_offsets` partition (created on the first FindCoordinator, replicated), and a
group carries on, with its committed offsets, after that broker is killed."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.rawclient import RawClient
from tests.cluster.test_cluster_metadata import _metadata, _wait
from yak.group.records import partition_for
from yak.protocol import kio_compat

T = 20


def _coordinator(bootstrap: str, group: str) -> tuple[int, int]:
    """(error code, node id) FindCoordinator (v3) answers for a group."""
    mod = kio_compat.schema_module("find_coordinator", 3, "request")
    with RawClient(bootstrap) as raw:
        r = raw.request(kio_compat.build(mod.FindCoordinatorRequest, key=group, key_type=0))
    return int(r.error_code), int(r.node_id)


@pytest.mark.slow
def test_group_coordinator_is_the_partition_leader_and_survives_its_death(
        cluster_factory) -> None:
    c = cluster_factory(3, **{"group.initial.rebalance.delay.ms": "0"})
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic("g", 3, 3, config={"min.insync.replicas": "2"})])["g"].result(T)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(300):
        p.produce("g", b"%d" % i, partition=i % 3)
    assert p.flush(30) == 0

    group = "grp"
    code, node = _wait(lambda: (r := _coordinator(c[1].bootstrap, group))[0] == 0 and r,
                       30, "a coordinator")
    # Every broker points at the same coordinator: the leader of the group's partition.
    p_index = partition_for(group, 50)
    leader = _metadata(c[2].bootstrap, "__consumer_offsets")[2][p_index][1]
    assert node == leader
    assert all(_coordinator(b.bootstrap, group) == (0, node) for b in c.brokers.values())
    offsets_parts = _metadata(c[3].bootstrap, "__consumer_offsets")[2]
    assert len(offsets_parts) == 50 and all(len(x[3]) == 3 for x in offsets_parts)

    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer.subscribe(["g"])
    seen: list[bytes] = []
    try:
        deadline = time.monotonic() + 40
        while len(seen) < 150 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value())
        assert len(seen) >= 150
        consumer.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in consumer.committed(
            [TopicPartition("g", i) for i in range(3)], timeout=10)}
        c[node].kill()  # the coordinator dies; its partition gets a new leader
        deadline = time.monotonic() + 60
        while len(seen) < 300 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value())
        assert sorted(set(seen)) == sorted(b"%d" % i for i in range(300))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    # The new coordinator kept the offsets committed through the old one, and has the new.
    alive = next(b for n, b in c.brokers.items() if n != node)
    code, new_node = _wait(lambda: (r := _coordinator(alive.bootstrap, group))[0] == 0 and r,
                           30, "a new coordinator")
    assert new_node != node
    c2 = Consumer({"bootstrap.servers": alive.bootstrap, "group.id": group})
    got = {tp.partition: tp.offset for tp in c2.committed(
        [TopicPartition("g", i) for i in range(3)], timeout=10)}
    c2.close()
    assert all(got[i] >= committed[i] for i in range(3)) and sum(got.values()) == 300


def test_offsets_topic_replication_capped_at_registered_brokers(cluster_factory) -> None:
    c = cluster_factory(2)  # offsets.topic.replication.factor is 3 by default
    code, node = _wait(lambda: (r := _coordinator(c[1].bootstrap, "capped"))[0] == 0 and r,
                       30, "a coordinator")
    parts = _metadata(c[2].bootstrap, "__consumer_offsets")[2]
    assert len(parts) == 50 and all(len(p[3]) == 2 for p in parts)
    logs = c[1].log() + c[2].log()
    assert "offsets.topic.replication.factor=3 but only 2 broker(s) are registered" in logs
