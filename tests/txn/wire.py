"""Helpers for the transaction wire tests: real clients against real broker processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.waiting import wait_until

__all__ = [
    "create_topic",
    "read_all",
    "watermarks",
    "txn_producer",
    "spawn_producer",
    "wait_until",
]


def create_topic(bootstrap: str, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, config=config or {})])[name].result(30)


def txn_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                               "linger.ms": 5}
    conf.update(extra)
    return Producer(conf)


def read_all(bootstrap: str, topic: str, partitions: Iterable[int], isolation: str,
             timeout: float = 20.0) -> list[tuple[int, int, bytes | None]]:
    """(partition, offset, value) of every record up to each partition's end as the
    isolation level sees it (read_committed: the LSO), in order."""
    parts = list(partitions)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.partition.eof": True,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[tuple[int, int, bytes | None]] = []
        done: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(done) < len(parts):
            if time.monotonic() > deadline:
                raise AssertionError(f"no EOF on {set(parts) - done} within {timeout}s")
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    done.add(m.partition())
                    continue
                raise KafkaException(m.error())
            out.append((m.partition(), m.offset(), m.value()))
        return out
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str, partition: int, isolation: str) -> tuple[int, int]:
    """(low, high) from ListOffsets; with read_committed the high one is the LSO."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm", "isolation.level": isolation})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        c.close()


def spawn_producer(bootstrap: str, txn_id: str, topic: str, n: int, timeout_ms: int = 60_000,
                   partitions: int = 1) -> subprocess.Popen[str]:
    """A separate process that opens a transaction, writes `n` records (flushed: they are
    in the log), prints READY and waits to be killed."""
    code = textwrap.dedent(f"""
        import sys, time
        from confluent_kafka import Producer
        p = Producer({{"bootstrap.servers": {bootstrap!r}, "transactional.id": {txn_id!r},
                      "transaction.timeout.ms": {timeout_ms}}})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range({n}):
            p.produce({topic!r}, value=b"doomed-%d" % i, partition=i % {partitions})
        p.flush(30)
        print("READY", flush=True)
        time.sleep(600)  # the point: the transaction stays open until the test kills us
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "READY" not in line:
        proc.kill()
        raise AssertionError(f"producer process did not get ready: {line!r}")
    return proc
