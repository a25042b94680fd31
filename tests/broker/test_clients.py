"""Round trips through a real broker subprocess with the mainstream Kafka clients."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from .rawclient import RawClient

N = 300


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _confluent_consume(bootstrap: str, topic: str, partitions: int, expected: int,
                       timeout_s: float = 30.0) -> list:
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "unused-" + topic,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = []
        import time
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error():
                    raise KafkaException(m.error())
                got.append(m)
        return got
    finally:
        c.close()


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_acks(module_broker, acks: str) -> None:
    topic = _topic(f"acks{acks}")
    with RawClient(module_broker.bootstrap) as rc:
        rc.create_topic(topic, partitions=3)
    p = Producer({"bootstrap.servers": module_broker.bootstrap, "acks": acks,
                  "linger.ms": 5})
    delivered = []
    for i in range(N):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(),
                  partition=i % 3, on_delivery=lambda err, m: delivered.append((err, m)))
    assert p.flush(30) == 0
    assert all(err is None for err, _ in delivered)
    got = _confluent_consume(module_broker.bootstrap, topic, 3, N)
    assert sorted(m.value() for m in got) == sorted(f"v{i}".encode() for i in range(N))
    for part in range(3):
        offs = [m.offset() for m in got if m.partition() == part]
        assert offs == list(range(len(offs)))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_confluent_compression_idempotent_headers(module_broker, codec: str) -> None:
    topic = _topic(codec)
    with RawClient(module_broker.bootstrap) as rc:
        rc.create_topic(topic, partitions=2)
    p = Producer({"bootstrap.servers": module_broker.bootstrap, "acks": "all",
                  "enable.idempotence": True, "compression.type": codec, "linger.ms": 10})
    # Now, not a fixed date: time retention (7 days) deletes a segment of 2023 stamps as
    # soon as the broker's maintenance sees it, between produce and consume.
    ts0 = int(time.time() * 1000)
    for i in range(N):
        p.produce(topic, key=b"key-%d" % i, value=b"x" * 50 + b"%d" % i, partition=i % 2,
                  timestamp=ts0 + i, headers=[("h", b"%d" % i), ("empty", None)])
    assert p.flush(30) == 0
    got = _confluent_consume(module_broker.bootstrap, topic, 2, N)
    assert len(got) == N
    by_key = {m.key(): m for m in got}
    m = by_key[b"key-7"]
    assert m.value() == b"x" * 50 + b"7"
    assert m.timestamp()[1] == ts0 + 7
    assert m.headers() == [("h", b"7"), ("empty", None)]


def test_kafka_python_default_idempotent_producer(module_broker) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    topic = _topic("kpy")
    prod = KafkaProducer(bootstrap_servers=module_broker.bootstrap)  # idempotent, acks=all
    futures = [prod.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
               for i in range(N)]
    prod.flush(30)
    offsets = [f.get(10).offset for f in futures]
    prod.close()
    assert offsets == list(range(N))
    cons = KafkaConsumer(bootstrap_servers=module_broker.bootstrap, group_id=None,
                         enable_auto_commit=False, consumer_timeout_ms=5000)
    cons.assign([KTP(topic, 0)])
    cons.seek_to_beginning()
    got = []
    for m in cons:  # consumer_timeout_ms bounds the wait if messages are missing
        got.append(m.value)
        if len(got) == N:
            break
    cons.close()
    assert got == [b"v%d" % i for i in range(N)]


def test_aiokafka_round_trip(module_broker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    topic = _topic("aio")

    async def run() -> list[bytes]:
        prod = AIOKafkaProducer(bootstrap_servers=module_broker.bootstrap, acks="all",
                                compression_type="gzip")
        await prod.start()
        try:
            for i in range(N):
                await prod.send(topic, b"a%d" % i, partition=0)
            await prod.flush()
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(bootstrap_servers=module_broker.bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest")
        await cons.start()
        try:
            cons.assign([ATP(topic, 0)])
            await cons.seek_to_beginning(ATP(topic, 0))
            out: list[bytes] = []
            while len(out) < N:
                batch = await asyncio.wait_for(cons.getmany(timeout_ms=1000), 20)
                for msgs in batch.values():
                    out.extend(m.value for m in msgs)
            return out
        finally:
            await cons.stop()

    assert asyncio.run(run()) == [b"a%d" % i for i in range(N)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat binary not installed")
def test_kcat_round_trip(module_broker) -> None:
    topic = _topic("kcat")
    lines = "".join(f"key{i}:line {i}\n" for i in range(100))
    subprocess.run(["kcat", "-b", module_broker.bootstrap, "-P", "-t", topic, "-K:",
                    "-p", "0"], input=lines.encode(), check=True, timeout=30)
    out = subprocess.run(["kcat", "-b", module_broker.bootstrap, "-C", "-t", topic,
                          "-o", "beginning", "-e", "-f", "%k=%s@%o\n"],
                         capture_output=True, check=True, timeout=30).stdout.decode()
    assert out.splitlines() == [f"key{i}=line {i}@{i}" for i in range(100)]
    meta = subprocess.run(["kcat", "-b", module_broker.bootstrap, "-L", "-t", topic],
                          capture_output=True, check=True, timeout=30).stdout.decode()
    assert f'topic "{topic}" with 1 partitions' in meta
