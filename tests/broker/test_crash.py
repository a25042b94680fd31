"""kill -9 under an idempotent acks=all produce load: every acknowledged message survives,
exactly once and in order, after the broker restarts on the same data directory."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.waiting import wait_until

from .rawclient import RawClient

PARTITIONS = 3


@pytest.mark.slow
def test_sigkill_during_idempotent_produce(broker) -> None:
    topic = "crash-load"
    with RawClient(broker.bootstrap) as c:
        c.create_topic(topic, partitions=PARTITIONS)
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        with lock:
            if err is None:
                acked[msg.value()] = (msg.partition(), msg.offset())
            else:
                errors.append(str(err))

    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
        "linger.ms": 5, "message.timeout.ms": 60000, "reconnect.backoff.max.ms": 500,
    })
    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic, value=b"%08d" % i, partition=i % PARTITIONS,
                                 on_delivery=on_delivery)
                i += 1
            except BufferError:
                producer.poll(0.05)
                continue
            if i % 100 == 0:
                producer.poll(0)
                time.sleep(0.002)  # paces the producer
        sent[0] = i

    t = threading.Thread(target=produce)
    t.start()
    # Kill it mid-stream: a good run of acks behind, more in flight.
    wait_until(lambda: len(acked) >= 1000, 30, "1,000 acks before the kill")
    before_kill = len(acked)
    broker.kill()
    time.sleep(0.5)  # the point: the broker stays down a while under the producer
    broker.start()
    restarted_at = len(acked)
    wait_until(lambda: len(acked) >= restarted_at + 1000, 60, "1,000 acks after the restart")
    stop.set()
    t.join(10)
    assert producer.flush(60) == 0
    assert before_kill > 0 and not errors, errors[:5]
    assert len(acked) == sent[0]
    print(f"acked {len(acked)} ({before_kill} before the kill)")

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "crash-check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: dict[bytes, tuple[int, int]] = {}
    duplicates = 0
    per_partition: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while len(seen) < len(acked) and time.monotonic() < deadline:
        for m in consumer.consume(10000, 0.5):
            assert m.error() is None, m.error()
            if m.value() in seen:
                duplicates += 1
            seen[m.value()] = (m.partition(), m.offset())
            per_partition[m.partition()].append(int(m.value()))
    consumer.close()
    assert duplicates == 0
    missing = [v for v in acked if v not in seen]
    assert not missing, f"{len(missing)} acknowledged messages lost"
    assert all(seen[v] == where for v, where in acked.items())
    for values in per_partition.values():
        assert values == sorted(values)
