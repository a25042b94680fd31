"""Transactions on a cluster: the transaction coordinator, the partitions written and the
group's offsets partition are led by different brokers, so markers go to other brokers
(WriteTxnMarkers) and Produce's KIP-890 check asks a coordinator elsewhere."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.test_cluster_metadata import _metadata

T = 30


def _read_committed(bootstrap: str, topic: str, partitions: int, want: int,
                    timeout: float = 30) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{time.monotonic()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(got) < want:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


@pytest.mark.slow
def test_transactions_across_brokers(cluster_factory) -> None:
    c = cluster_factory(3, **{"group.initial.rebalance.delay.ms": "0"})
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    for f in a.create_topics([NewTopic("tx-in", 3, 3), NewTopic("tx-out", 3, 3)]).values():
        f.result(T)
    leaders = {p[1] for p in _metadata(c[1].bootstrap, "tx-out")[2]}
    assert leaders == {1, 2, 3}  # markers must reach every broker

    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "tx-1",
                  "transaction.timeout.ms": 30000})
    p.init_transactions(T)
    p.begin_transaction()
    for i in range(30):
        p.produce("tx-out", b"committed-%d" % i, partition=i % 3)
    p.commit_transaction(T)
    p.begin_transaction()
    for i in range(30):
        p.produce("tx-out", b"aborted-%d" % i, partition=i % 3)
    p.abort_transaction(T)
    p.begin_transaction()
    for i in range(3):
        p.produce("tx-out", b"late-%d" % i, partition=i)
    p.commit_transaction(T)
    got = _read_committed(c.bootstrap, "tx-out", 3, 33)
    assert sorted(got) == sorted([b"committed-%d" % i for i in range(30)]
                                 + [b"late-%d" % i for i in range(3)])

    # Consume-transform-produce: the group's offsets commit in the transaction, on the
    # group coordinator (a third broker, maybe), marker and all.
    src = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(30):
        src.produce("tx-in", b"in-%d" % i, partition=i % 3)
    assert src.flush(T) == 0
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "ctp",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe(["tx-in"])
    batch = []
    deadline = time.monotonic() + 40
    while len(batch) < 30 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            batch.append(m)
    assert len(batch) == 30
    p.begin_transaction()
    for m in batch:
        p.produce("tx-out", b"out-" + m.value(), partition=m.partition())
    p.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                  consumer.consumer_group_metadata(), T)
    p.commit_transaction(T)
    committed = consumer.committed([TopicPartition("tx-in", i) for i in range(3)], timeout=10)
    consumer.close()
    assert sum(tp.offset for tp in committed) == 30
    got = _read_committed(c.bootstrap, "tx-out", 3, 63)
    assert sorted(x for x in got if x.startswith(b"out-")) == sorted(
        b"out-in-%d" % i for i in range(30))
