"""kill -9 of a real broker during a produce: Kafka's segment files are all there, and the
unclean restart scans only the segments from the recovery point on.

What was scanned is asserted from the restarted broker's own log line and from an
in-process LogManager opened on a copy of the same data directory, never from timings.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.waiting import wait_until
from yak.storage import LogManager, checkpoint

TOPIC = "seg-crash"
SEGMENT_BYTES = 256 * 1024
RECOVERED = re.compile(
    r"recovered (?P<tp>\S+) after an unclean shutdown: scanned (?P<n>\d+) of (?P<m>\d+) "
    r"segments from recovery point (?P<rp>\d+) \(base offsets (?P<first>\d+)\.\.(?P<last>\d+)\)"
)


def _bases(part_dir: str) -> list[int]:
    return sorted(int(n[:-4]) for n in os.listdir(part_dir) if n.endswith(".log"))


def _recovery_point(data_dir: str) -> int:
    rp = checkpoint.read_offsets(os.path.join(data_dir, checkpoint.RECOVERY_POINT_FILE))
    return rp.get((TOPIC, 0), 0)


def _wait(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    wait_until(cond, timeout, what)


@pytest.mark.slow
def test_kill9_during_produce_keeps_segment_files_and_recovers_from_recovery_point(
    broker_factory, tmp_path
) -> None:
    broker = broker_factory(log_segment_bytes=SEGMENT_BYTES)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(15)
    part_dir = os.path.join(broker.data_dir, f"{TOPIC}-0")

    acked: set[bytes] = set()
    errors: list[str] = []
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        with lock:
            if err is None:
                acked.add(msg.value()[:8])
            else:
                errors.append(str(err))

    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 2,
        "batch.size": 16384, "message.timeout.ms": 60000, "reconnect.backoff.max.ms": 500,
    })
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            try:
                producer.produce(TOPIC, value=b"%08d" % i + b"x" * 992, partition=0,
                                 on_delivery=on_delivery)
                i += 1
            except BufferError:
                producer.poll(0.05)
                continue
            if i % 50 == 0:
                producer.poll(0)
                time.sleep(0.005)  # ~10 MB/s: rolls every few tens of ms

    t = threading.Thread(target=produce)
    t.start()
    try:
        # Several rolls, and at least one roll flush has reached the checkpoint file.
        _wait(lambda: len(_bases(part_dir)) >= 6, 60, "six segments")
        _wait(lambda: _recovery_point(broker.data_dir) > 0, 30, "a recovery point")
        broker.kill()  # SIGKILL while the producer keeps sending
    finally:
        stop.set()
        t.join(10)

    # Kafka's layout: every segment has both indexes, rolled and active alike.
    names = set(os.listdir(part_dir))
    bases = _bases(part_dir)
    for base in bases:
        stem = f"{base:020d}"
        assert {stem + ".index", stem + ".timeindex"} <= names, f"{stem}: {sorted(names)}"
    rp = _recovery_point(broker.data_dir)
    first = max(b for b in bases if b <= rp)
    expected = [b for b in bases if b >= first]
    assert 0 < len(expected) < len(bases)

    # In-process, on a copy: exactly which segments the recovery scanned.
    copy = str(tmp_path / "copy")
    shutil.copytree(broker.data_dir, copy)
    m = LogManager(copy, start_cleaner=False)
    m.startup()
    stats = m.get(TOPIC, 0).recovery_stats
    assert not stats.clean and stats.recovery_point == rp
    assert stats.scanned == expected
    assert stats.segments == len(bases)
    m.shutdown()

    # The real broker restart says the same in its log.
    log_before = len(broker.log())
    broker.start()
    lines = [mt for mt in RECOVERED.finditer(broker.log()[log_before:]) if mt["tp"] == f"{TOPIC}-0"]
    assert len(lines) == 1, broker.log()[log_before:][-3000:]
    line = lines[0]
    assert int(line["rp"]) == rp
    assert (int(line["first"]), int(line["last"])) == (expected[0], expected[-1])
    assert (int(line["n"]), int(line["m"])) == (len(expected), len(bases))

    # Nothing acknowledged was lost (the producer's retries land after the restart).
    assert producer.flush(60) == 0
    assert acked and not errors, errors[:5]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "seg-crash",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    while not acked <= seen and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 0.5):
            assert msg.error() is None, msg.error()
            seen.add(msg.value()[:8])
    consumer.close()
    missing = acked - seen
    assert not missing, f"{len(missing)} acknowledged messages lost"
