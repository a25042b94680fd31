"""Transactions on a cluster: the transaction coordinator, the partitions written and the
group's offsets partition are led by different brokers, so markers go to other brokers
(WriteTxnMarkers) and Produce's KIP-890 check asks a coordinator elsewhere."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

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


def _wait_state(client, txn_id: str, states: set[str], timeout: float) -> str:
    """Poll DescribeTransactions (through whichever broker coordinates now) until the
    transaction is in one of `states`; the last state seen otherwise."""
    from yak.client.client import YakClientError
    from yak.errors import KafkaError

    deadline = time.monotonic() + timeout
    state = "?"
    while time.monotonic() < deadline:
        try:
            state = client.describe_transaction(txn_id, known=True).state
        except (KafkaError, YakClientError, OSError) as e:
            state = f"error: {e}"
        if state in states:
            return state
        time.sleep(0.2)  # back-off of this wait-for-state loop
    return state


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_commit_survives_coordinator_kill_before_its_markers(cluster_factory) -> None:
    """A committed transaction stays committed when its coordinator dies after EndTxn
    answered but before the markers landed, and the new coordinator's high watermark does
    not yet cover the PrepareCommit record (issue 16's CI run, 'p1.0-t486': the new
    leader of the `__transaction_state` partition loaded it only to its high watermark,
    found the transaction still Ongoing, timed it out and wrote ABORT markers over a
    commit the client had been told succeeded).

    Made deterministic: `__transaction_state` on two replicas (C leads, Y follows); the
    data partition lives on a third broker X, paused so the markers cannot land; a long
    `replica.fetch.wait.max.ms` holds Y's fetch response that would tell it the high
    watermark moved past PrepareCommit; C is killed as soon as commit returns, Y takes
    over alone (below min.insync.replicas, so its high watermark stays where it was)."""
    from yak.client.transactions import TransactionalClient
    from yak.txn.records import TRANSACTION_STATE_TOPIC, partition_for

    c = cluster_factory(3, **{
        "transaction.state.log.replication.factor": "2",
        "transaction.state.log.num.partitions": "12",
        "replica.fetch.wait.max.ms": "20000",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    })
    warm = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "warm-up"})
    warm.init_transactions(T)  # creates __transaction_state
    _brokers, controller, parts = _metadata(c[1].bootstrap, TRANSACTION_STATE_TOPIC)
    assert len(parts) == 12 and controller in (1, 2, 3), parts
    # Roles: Y (the controller, so killing C or pausing X needs no controller failover)
    # follows the id's partition, C leads it, X (the third) holds the data partition.
    y = controller
    txn_id = coord = paused = None
    for i in range(1000):
        candidate = f"loss-{i}"
        _p, leader, _epoch, replicas, isr, _off = parts[partition_for(candidate, 12)]
        if leader != y and set(replicas) == {leader, y} and set(isr) == {leader, y}:
            txn_id, coord = candidate, leader
            paused = ({1, 2, 3} - {leader, y}).pop()
            break
    assert txn_id is not None, parts
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic("loss-data", 1, replica_assignment=[[paused]])])[
        "loss-data"].result(T)

    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": 4000})
    p.init_transactions(T)
    p.begin_transaction()
    values = [b"kept-%d" % i for i in range(10)]
    for v in values:
        p.produce("loss-data", v, partition=0)
    assert p.flush(T) == 0
    os.kill(c[paused].pid, signal.SIGSTOP)  # the markers cannot land on X now
    try:
        p.commit_transaction(T)  # PrepareCommit is on C and Y: decided
        c[coord].kill()
        part = partition_for(txn_id, 12)
        deadline = time.monotonic() + 30
        while _metadata(c[y].bootstrap, TRANSACTION_STATE_TOPIC)[2][part][1] != y:
            assert time.monotonic() < deadline, "Y did not take over the partition"
            time.sleep(0.2)  # back-off of this wait-for-leader loop
        client = TransactionalClient(c[y].bootstrap, request_timeout_ms=5000)
        loaded = _wait_state(client, txn_id, {"Ongoing", "PrepareCommit", "PrepareAbort",
                                              "CompleteCommit", "CompleteAbort"}, 30)
    finally:
        os.kill(c[paused].pid, signal.SIGCONT)
    # C comes back as a follower, so Y's writes reach min.insync.replicas again: the
    # completion (or, before the fix, the timeout's abort) can be written.
    c[coord].start()
    state = _wait_state(client, txn_id, {"CompleteCommit", "CompleteAbort"}, 60)
    client.close()
    assert state == "CompleteCommit", f"loaded as {loaded}, then {state}"
    assert loaded in ("PrepareCommit", "CompleteCommit"), (
        f"the new coordinator loaded the committed transaction as {loaded}")
    got = _read_committed(c.bootstrap, "loss-data", 1, len(values))
    assert sorted(got) == values


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_failover_to_a_once_crashed_broker_leaves_open_transactions_to_their_producer(
        cluster_factory) -> None:
    """A broker that was kill -9'd and restarted at some point, later elected leader of a
    `__transaction_state` partition by a failover, must not abort the transactions it
    finds Ongoing: they belong to live producers (their coordinator was the broker that
    failed, not this one), and Kafka leaves them to the producer or the timeout. Before,
    any load on a broker whose log had once been recovered uncleanly fenced them all (seen
    in the CI chaos runs: 'aborting ...: open when this broker stopped uncleanly')."""
    from yak.txn.records import TRANSACTION_STATE_TOPIC, partition_for

    c = cluster_factory(3, **{"transaction.state.log.num.partitions": "12"})
    warm = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "warm-up"})
    warm.init_transactions(T)  # creates __transaction_state
    _brokers, controller, parts = _metadata(c[1].bootstrap, TRANSACTION_STATE_TOPIC)
    # Replicas of the id's partition in the order (C, B, controller): C leads, and when it
    # fails the controller elects B (the first in-sync replica in replica order); the
    # in-sync controller keeps B's writes at min.insync.replicas (2).
    txn_id = coord = crashed = None
    for i in range(1000):
        candidate = f"open-{i}"
        _p, leader, _epoch, replicas, _isr, _off = parts[partition_for(candidate, 12)]
        if len(replicas) == 3 and replicas[2] == controller and leader == replicas[0]:
            txn_id, coord, crashed = candidate, replicas[0], replicas[1]
            break
    assert txn_id is not None, parts
    part = partition_for(txn_id, 12)

    def wait_for(what: str, cond: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 30
        while not cond():
            assert time.monotonic() < deadline, what
            time.sleep(0.2)  # back-off of this wait-for-condition loop

    c[crashed].kill()  # B's logs are recovered uncleanly when it comes back
    c[crashed].start()
    wait_for("B back in the ISR", lambda: len(
        _metadata(c[controller].bootstrap, TRANSACTION_STATE_TOPIC)[2][part][4]) == 3)
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic("open-data", 1, replica_assignment=[[controller]])])[
        "open-data"].result(T)
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": 60000})
    p.init_transactions(T)
    p.begin_transaction()
    values = [b"open-%d" % i for i in range(10)]
    for v in values:
        p.produce("open-data", v, partition=0)
    assert p.flush(T) == 0
    c[coord].kill()  # the coordinator fails over to B with the transaction Ongoing
    wait_for("B leads the partition", lambda: _metadata(
        c[controller].bootstrap, TRANSACTION_STATE_TOPIC)[2][part][1] == crashed)
    p.commit_transaction(T)  # fenced (PRODUCER_FENCED) if B aborted the transaction
    got = _read_committed(c.bootstrap, "open-data", 1, len(values))
    assert sorted(got) == values
