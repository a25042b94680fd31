"""Parallel log recovery (issue 27, Kafka's `num.recovery.threads.per.data.dir`).

- In process: a crashed data dir of many partitions recovers to the same logs, byte for
  byte, with one thread and with several; a log that cannot be loaded fails the start-up
  with its own error, and every log that did load is closed and the directory unlocked.
- A real broker killed with SIGKILL while every one of its partitions has an unflushed
  tail restarts with four recovery threads (its own log line says so), recovers every
  partition (each one's recovery log line), and a consumer reads back exactly what was
  acknowledged.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from yak.errors import KafkaStorageError
from yak.protocol.records import Record, build_batch, iter_batches
from yak.storage import LogConfig, LogManager

CFG = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024)
PARTITIONS = 24
UNCLEAN = re.compile(r"unclean shutdown: recovered (\d+) logs in [\d.]+ s \((\d+) recovery threads\)")


def _stored(plog) -> list[bytes]:  # type: ignore[no-untyped-def]
    """Every batch of the log, as stored."""
    out = []
    off = plog.log_start_offset
    while off < plog.log_end_offset:
        data = plog.read(off, 10**7, max_offset=plog.log_end_offset).to_bytes()
        if not data:
            break
        for p, h in iter_batches(data):
            out.append(data[p : p + h.size])
            off = h.next_offset
    return out


def _crashed_dir(path: str) -> dict[tuple[str, int], list[bytes]]:
    """A data dir of PARTITIONS logs left by a crash, each with rolled segments and an
    unflushed tail; returns what each log held before the crash."""
    m = LogManager(path, CFG, start_cleaner=False)
    m.startup()
    for p in range(PARTITIONS):
        plog = m.create("t", p)
        for i in range(40 + p):
            recs = [Record(b"k%d" % (i % 7), b"%d-%d-" % (p, i) + b"v" * 300) for _ in range(5)]
            plog.append_as_leader(build_batch(recs), 1)
        plog.update_high_watermark()
    assert m.wait_for_flushes(30)
    before = {(plog.topic, plog.partition): _stored(plog) for plog in m.logs()}
    m.crash()
    return before


def test_parallel_recovery_gives_the_logs_sequential_recovery_gives(tmp_path, caplog) -> None:
    src = str(tmp_path / "crashed")
    before = _crashed_dir(src)
    results = {}
    caplog.set_level(logging.INFO, logger="yak.storage.loader")
    for threads in (1, 4):
        path = str(tmp_path / f"copy-{threads}")
        shutil.copytree(src, path)
        m = LogManager(path, CFG, start_cleaner=False, recovery_threads=threads)
        caplog.clear()
        m.startup()
        # which threads recovered the logs: the loader logs each recovery on its thread
        recovering = {r.threadName for r in caplog.records
                      if "after an unclean shutdown" in r.getMessage()}
        if threads == 1:
            assert recovering == {threading.current_thread().name}
        else:
            assert len(recovering) > 1
            assert all(n.startswith("yak-log-recovery") for n in recovering), recovering
        try:
            assert not m.was_clean_shutdown
            logs = {(p.topic, p.partition): p for p in m.logs()}
            assert set(logs) == set(before)
            # every log had an unflushed tail, so every one was scanned
            assert all(p.recovery_stats.scanned for p in logs.values())
            results[threads] = {tp: _stored(p) for tp, p in logs.items()}
            ends = {tp: p.log_end_offset for tp, p in logs.items()}
            assert ends == {tp: 5 * (40 + tp[1]) for tp in before}
        finally:
            m.shutdown()
    assert results[1] == before
    assert results[4] == before


def test_a_log_that_cannot_load_fails_the_start_up_and_releases_the_rest(tmp_path) -> None:
    path = str(tmp_path / "data")
    before = _crashed_dir(path)
    # A directory where segment 99 of t-7 should be a file: opening it fails, as a
    # damaged disk would, while the 23 other logs load on the other threads.
    bad = os.path.join(path, "t-7", "00000000000000000099.log")
    os.mkdir(bad)
    m = LogManager(path, CFG, start_cleaner=False, recovery_threads=4)
    with pytest.raises(KafkaStorageError, match="t-7/00000000000000000099.log"):
        m.startup()
    assert not m.started and m.logs() == []
    os.rmdir(bad)
    # Nothing was left open or locked: the same directory loads in full now.
    m2 = LogManager(path, CFG, start_cleaner=False, recovery_threads=4)
    m2.startup()
    try:
        assert {(p.topic, p.partition): _stored(p) for p in m2.logs()} == before
    finally:
        m2.shutdown()


@pytest.mark.slow
def test_a_killed_broker_recovers_every_partition_in_parallel_with_its_data(
    broker_factory,
) -> None:
    topic, partitions, per_partition = "recover-par", 32, 300
    broker = broker_factory(num_recovery_threads_per_data_dir=4)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "linger.ms": 5, "enable.idempotence": True})
    acked: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    failed: list[str] = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked[msg.partition()].append(msg.value())
        else:
            failed.append(str(err))

    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, value=b"%d:%d:" % (p, i) + b"x" * 200, partition=p,
                             on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not failed, failed[:3]
    assert all(len(v) == per_partition for v in acked.values())

    broker.kill()  # SIGKILL: no flush, no checkpoints, no clean-shutdown marker
    log_before = len(broker.log())
    broker.start()
    restart_log = broker.log()[log_before:]
    m = UNCLEAN.search(restart_log)
    assert m is not None, restart_log[-3000:]
    assert int(m.group(1)) >= partitions and int(m.group(2)) == 4
    recovered = set(re.findall(rf"recovered {topic}-(\d+) after an unclean shutdown", restart_log))
    assert recovered == {str(p) for p in range(partitions)}

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "recover-par-check",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        eof: set[int] = set()
        deadline = time.monotonic() + 60
        while len(eof) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    eof.add(msg.partition())
                    continue
                raise AssertionError(str(msg.error()))
            got[msg.partition()].append(msg.value())
        assert eof == set(range(partitions)), sorted(set(range(partitions)) - eof)
        assert got == acked
    finally:
        consumer.close()
