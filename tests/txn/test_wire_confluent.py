"""Transactions through the wire with confluent-kafka (librdkafka): real broker processes,
real clients, nothing mocked."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.txn.wire import (
    create_topic,
    read_all,
    spawn_producer,
    txn_producer,
    wait_until,
    watermarks,
)


def values(records: list[tuple[int, int, bytes | None]]) -> list[bytes | None]:
    return [v for _p, _o, v in records]


def test_commit_abort_abort_then_commit_and_isolation_levels(broker) -> None:
    bs = broker.bootstrap
    create_topic(bs, "mixed", 2)
    p = txn_producer(bs, "mixer")
    p.init_transactions(30)

    p.begin_transaction()
    for i in range(10):
        p.produce("mixed", value=b"c1-%d" % i, partition=i % 2)
    p.commit_transaction(30)

    p.begin_transaction()
    for i in range(6):
        p.produce("mixed", value=b"a1-%d" % i, partition=i % 2)
    p.flush(30)  # in the log, then aborted
    # while open: read_committed ListOffsets answers the LSO, read_uncommitted the HW
    lso = watermarks(bs, "mixed", 0, "read_committed")[1]
    hw = watermarks(bs, "mixed", 0, "read_uncommitted")[1]
    assert lso == 6 and hw == 9  # 5 records + commit marker, then 3 open ones
    p.abort_transaction(30)

    p.begin_transaction()
    for i in range(4):
        p.produce("mixed", value=b"c2-%d" % i, partition=i % 2)
    p.commit_transaction(30)

    committed = read_all(bs, "mixed", [0, 1], "read_committed")
    uncommitted = read_all(bs, "mixed", [0, 1], "read_uncommitted")
    assert sorted(values(committed)) == sorted(
        [b"c1-%d" % i for i in range(10)] + [b"c2-%d" % i for i in range(4)])
    assert sorted(values(uncommitted)) == sorted(
        [b"c1-%d" % i for i in range(10)] + [b"a1-%d" % i for i in range(6)]
        + [b"c2-%d" % i for i in range(4)])
    # per partition, committed reads keep log order (offsets increase)
    for part in (0, 1):
        offs = [o for pp, o, _v in committed if pp == part]
        assert offs == sorted(offs)
    # everything decided: LSO == HW on both partitions
    for part in (0, 1):
        assert watermarks(bs, "mixed", part, "read_committed") == \
            watermarks(bs, "mixed", part, "read_uncommitted")


def test_consume_transform_produce_with_send_offsets(broker) -> None:
    bs = broker.bootstrap
    create_topic(bs, "ctp-in", 2)
    create_topic(bs, "ctp-out", 2)
    src = txn_producer(bs, "ctp-seed")
    src.init_transactions(30)
    src.begin_transaction()
    for i in range(200):
        src.produce("ctp-in", key=b"%d" % i, value=b"in-%d" % i, partition=i % 2)
    src.commit_transaction(30)

    def run_copier(batches: int, abort_last: bool) -> int:
        consumer = Consumer({"bootstrap.servers": bs, "group.id": "copier",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed"})
        consumer.subscribe(["ctp-in"])
        producer = txn_producer(bs, "copier-tx")
        producer.init_transactions(30)
        copied = 0
        try:
            for b in range(batches):
                msgs = consumer.consume(50, 5)
                msgs = [m for m in msgs if not m.error()]
                if not msgs:
                    break
                producer.begin_transaction()
                for m in msgs:
                    producer.produce("ctp-out", key=m.key(),
                                     value=m.value().replace(b"in-", b"out-"),
                                     partition=m.partition())
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()),
                    consumer.consumer_group_metadata(), 30)
                if abort_last and b == batches - 1:
                    producer.abort_transaction(30)
                    # rewind to the committed positions: the aborted batch is redone
                    committed = consumer.committed(consumer.assignment(), 10)
                    for tp in committed:
                        consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                     max(tp.offset, 0)))
                else:
                    producer.commit_transaction(30)
                    copied += len(msgs)
        finally:
            consumer.close()
        return copied

    run_copier(2, abort_last=True)  # one committed batch, one aborted
    run_copier(100, abort_last=False)  # a new instance finishes from the committed offsets
    out = read_all(bs, "ctp-out", [0, 1], "read_committed")
    assert sorted(values(out)) == sorted(b"out-%d" % i for i in range(200))  # exactly once
    c = Consumer({"bootstrap.servers": bs, "group.id": "copier"})
    committed = c.committed([TopicPartition("ctp-in", 0), TopicPartition("ctp-in", 1)], 10)
    c.close()
    # past each partition's 100 records (the commit marker after them may or may not have
    # been read yet: a consumer's position skips a control batch only once it fetched it)
    assert all(tp.offset in (100, 101) for tp in committed), committed


def test_a_second_producer_with_the_same_id_fences_the_first(broker) -> None:
    bs = broker.bootstrap
    create_topic(bs, "fence", 1)
    first = txn_producer(bs, "shared-id")
    first.init_transactions(30)
    first.begin_transaction()
    first.produce("fence", value=b"zombie-1")
    first.flush(30)

    second = txn_producer(bs, "shared-id")
    second.init_transactions(30)  # aborts the first's transaction, bumps the epoch
    second.begin_transaction()
    second.produce("fence", value=b"new-1")
    second.commit_transaction(30)

    with pytest.raises(KafkaException) as exc:
        first.produce("fence", value=b"zombie-2")
        first.commit_transaction(30)
    err = exc.value.args[0]
    assert err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH)
    assert values(read_all(bs, "fence", [0], "read_committed")) == [b"new-1"]


def test_producer_killed_mid_transaction_is_aborted_at_the_next_init(broker) -> None:
    bs = broker.bootstrap
    create_topic(bs, "killed", 1)
    proc = spawn_producer(bs, "killed-tx", "killed", 20)
    proc.kill()
    proc.wait(10)
    # the open transaction pins the LSO
    assert watermarks(bs, "killed", 0, "read_committed")[1] == 0
    assert watermarks(bs, "killed", 0, "read_uncommitted")[1] == 20
    again = txn_producer(bs, "killed-tx")
    again.init_transactions(30)  # the coordinator aborts the dangling transaction first
    again.begin_transaction()
    again.produce("killed", value=b"after")
    again.commit_transaction(30)
    assert values(read_all(bs, "killed", [0], "read_committed")) == [b"after"]
    low, lso = watermarks(bs, "killed", 0, "read_committed")
    assert lso == watermarks(bs, "killed", 0, "read_uncommitted")[1] == 23


def test_transaction_timeout_aborts_and_moves_the_lso(broker_factory) -> None:
    b = broker_factory(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 300})
    bs = b.bootstrap
    create_topic(bs, "slow", 1)
    proc = spawn_producer(bs, "slow-tx", "slow", 5, timeout_ms=2000)
    try:
        assert watermarks(bs, "slow", 0, "read_committed")[1] == 0
        t0 = time.monotonic()
        wait_until(lambda: watermarks(bs, "slow", 0, "read_committed")[1] == 6, 15,
                   "the LSO past the timed-out transaction's abort marker")
        assert time.monotonic() - t0 < 10
        assert read_all(bs, "slow", [0], "read_committed") == []
    finally:
        proc.kill()
        proc.wait(10)
    assert "open for longer than 2000 ms" in b.log()


def test_broker_killed_mid_transaction_aborts_it(broker_factory) -> None:
    b = broker_factory()
    bs = b.bootstrap
    create_topic(bs, "crash", 2)
    done = txn_producer(bs, "crash-done")
    done.init_transactions(30)
    done.begin_transaction()
    done.produce("crash", value=b"kept", partition=0)
    done.commit_transaction(30)
    proc = spawn_producer(bs, "crash-open", "crash", 10, partitions=2)
    try:
        b.restart(kill=True)
        # the transaction open at the crash is aborted at load: LSO == HW, nothing visible
        for part in (0, 1):
            wait_until(lambda part=part: watermarks(bs, "crash", part, "read_committed")
                       == watermarks(bs, "crash", part, "read_uncommitted"), 20,
                       f"LSO == HW on crash-{part}")
        assert values(read_all(bs, "crash", [0, 1], "read_committed")) == [b"kept"]
        assert len(read_all(bs, "crash", [0, 1], "read_uncommitted")) == 11
    finally:
        proc.kill()
        proc.wait(10)


def test_broker_killed_mid_commit_completes_the_commit_after_restart(broker_factory) -> None:
    """EndTxn answered (PrepareCommit written) but one partition cannot take its marker
    (min.insync.replicas above the ISR): the commit is decided. After a kill -9 the
    restarted coordinator re-sends the markers, and once the partition can take them the
    data becomes visible; nothing is ever lost or shown from an aborted transaction."""
    b = broker_factory()
    bs = b.bootstrap
    create_topic(bs, "mc-a", 1)
    create_topic(bs, "mc-b", 1)
    p = txn_producer(bs, "mid-commit")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce("mc-a", value=b"a-%d" % i)
        p.produce("mc-b", value=b"b-%d" % i)
    p.flush(30)
    admin = AdminClient({"bootstrap.servers": bs})

    def set_min_isr(value: str) -> None:
        res = ConfigResource("topic", "mc-b", set_config={"min.insync.replicas": value})
        for f in admin.alter_configs([res]).values():
            f.result(30)

    set_min_isr("2")
    p.commit_transaction(30)  # decided: PrepareCommit is in __transaction_state
    wait_until(lambda: values(read_all(bs, "mc-a", [0], "read_committed")) == [
        b"a-%d" % i for i in range(5)], 10, "mc-a committed")
    assert read_all(bs, "mc-b", [0], "read_committed") == []  # its marker is refused
    b.restart(kill=True)
    assert read_all(bs, "mc-b", [0], "read_committed") == []
    admin = AdminClient({"bootstrap.servers": bs})
    set_min_isr("1")
    wait_until(lambda: values(read_all(bs, "mc-b", [0], "read_committed")) == [
        b"b-%d" % i for i in range(5)], 20, "mc-b committed after the restart")
    assert values(read_all(bs, "mc-a", [0], "read_committed")) == [b"a-%d" % i for i in range(5)]
