"""Transactions with the pure-Python clients: kafka-python and aiokafka (which sends every
transactional API at v0) as producers, and their read_committed consumers."""

from __future__ import annotations

import asyncio
import time

from tests.txn.wire import create_topic, read_all


def test_kafka_python_transactions_and_read_committed(broker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    bs = broker.bootstrap
    create_topic(bs, "kp", 1)
    p = KafkaProducer(bootstrap_servers=bs, transactional_id="kp-tx")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(5):
            p.send("kp", value=b"c-%d" % i, partition=0)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(3):
            p.send("kp", value=b"a-%d" % i, partition=0)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send("kp", value=b"c-last", partition=0)
        p.commit_transaction()
    finally:
        p.close(timeout=10)

    def consume(isolation: str) -> list[bytes]:
        c = KafkaConsumer(bootstrap_servers=bs, isolation_level=isolation,
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          consumer_timeout_ms=3000)
        c.assign([TopicPartition("kp", 0)])
        c.seek_to_beginning()
        got = [m.value for m in c]
        c.close()
        return got

    expected = [b"c-%d" % i for i in range(5)] + [b"c-last"]
    assert consume("read_committed") == expected
    assert consume("read_uncommitted") == (
        [b"c-%d" % i for i in range(5)] + [b"a-%d" % i for i in range(3)] + [b"c-last"])
    # and librdkafka agrees
    assert [v for _p, _o, v in read_all(bs, "kp", [0], "read_committed")] == expected


def test_aiokafka_transactions_v0_and_read_committed(broker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    bs = broker.bootstrap
    create_topic(bs, "aio", 2)

    async def run() -> tuple[list[bytes], list[bytes]]:
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-tx")
        await p.start()
        try:
            async with p.transaction():
                for i in range(6):
                    await p.send("aio", value=b"c-%d" % i, partition=i % 2)
            try:
                async with p.transaction():
                    for i in range(4):
                        await p.send_and_wait("aio", value=b"a-%d" % i, partition=i % 2)
                    raise RuntimeError("abort this one")
            except RuntimeError:
                pass
            async with p.transaction():
                await p.send("aio", value=b"c-last", partition=1)
        finally:
            await p.stop()

        async def consume(isolation: str) -> list[bytes]:
            c = AIOKafkaConsumer(bootstrap_servers=bs, isolation_level=isolation,
                                 auto_offset_reset="earliest", enable_auto_commit=False)
            await c.start()
            try:
                tps = [TopicPartition("aio", 0), TopicPartition("aio", 1)]
                c.assign(tps)
                await c.seek_to_beginning()
                ends = await c.end_offsets(tps)  # read_committed: the LSO
                got: list[bytes] = []
                deadline = time.monotonic() + 15
                while any([await c.position(tp) < ends[tp] for tp in tps]):
                    assert time.monotonic() < deadline
                    batch = await c.getmany(timeout_ms=500)
                    for msgs in batch.values():
                        got += [m.value for m in msgs]
                return sorted(got)
            finally:
                await c.stop()

        return await consume("read_committed"), await consume("read_uncommitted")

    committed, uncommitted = asyncio.run(run())
    assert committed == sorted([b"c-%d" % i for i in range(6)] + [b"c-last"])
    assert uncommitted == sorted(
        [b"c-%d" % i for i in range(6)] + [b"a-%d" % i for i in range(4)] + [b"c-last"])
