"""librdkafka's test 0053 (statistics, end to end) against Yak (issue 21).

The test produces 10 messages to each of partitions 0 and 1 of an auto-created topic
(`num.partitions=4`) with explicit partitions, flushes, assigns both partitions at
OFFSET_BEGINNING and consumes 20. Against Yak it hung: the consumer's statistics showed
`query_offset -2, next_offset 10, lo_offset 10, hi_offset 10`, i.e. the earliest offset
(ListOffsets -2) came back as 10.

ListOffsets was right: the log start offset really was 10, because time-based retention
had deleted the first segment about a second after the produce. The test's C++ producer
passes `timestamp = -1` to `produce()`, so librdkafka writes records with no timestamp
(NO_TIMESTAMP) but a batch header whose MaxTimestamp is 0 (its writer starts the maximum
at 0, not at -1). Yak indexed the segment by that header, took the records for 1970 and
retention (7 days) removed them at the next maintenance tick. Kafka's LogValidator
rewrites a batch's MaxTimestamp to the maximum of its records' timestamps (-1 here), and
retention then falls back to the segment file's mtime; Yak now does the same.

confluent-kafka's `produce(..., timestamp=-1)` reaches the same librdkafka call, so these
tests send what 0053 sends. Each waits past two log maintenance ticks (once a second)
before consuming, so retention has run when the consumer asks for the earliest offset.
"""

from __future__ import annotations

import struct
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 (fixtures)
from yak.protocol.records import (
    CRC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    Record,
    build_batch,
    compute_crc,
    crc_is_valid,
    decode_records,
    read_header,
)
from yak.storage import LogConfig, LogManager

PER_PARTITION = 10
MSG_SIZE = 6 * 1024  # 0053's message size
TIMEOUT_S = 30.0
MAINTENANCE_WAIT_S = 2.5  # > two ticks of the once-a-second log maintenance


def _librdkafka_style_batch(n: int) -> bytes:
    """A batch as librdkafka writes records produced with timestamp -1: every record and
    the base timestamp NO_TIMESTAMP, the header's MaxTimestamp 0."""
    batch = bytearray(build_batch([Record(b"k", b"v%d" % i, NO_TIMESTAMP) for i in range(n)]))
    struct.pack_into(">q", batch, MAX_TIMESTAMP_OFFSET, 0)
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return bytes(batch)


def test_storage_keeps_records_without_timestamps(tmp_path: Path) -> None:
    """The stored batch says MaxTimestamp -1 (CRC recomputed), nothing is indexed by time,
    and retention keeps the segment (its mtime is now)."""
    m = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
    m.startup()
    try:
        log = m.create("t", 0, LogConfig())
        batch = _librdkafka_style_batch(PER_PARTITION)
        assert read_header(batch, 0).max_timestamp == 0
        log.append_as_leader(batch, 0)
        log.update_high_watermark()
        stored = log.read(0, 1 << 20).to_bytes()
        h = read_header(stored, 0)
        assert (h.base_timestamp, h.max_timestamp) == (NO_TIMESTAMP, NO_TIMESTAMP)
        assert crc_is_valid(stored, 0, h)
        assert [r.timestamp for r in decode_records(stored)] == [NO_TIMESTAMP] * PER_PARTITION
        assert log.segments[0].max_timestamp == NO_TIMESTAMP
        assert log.offset_for_timestamp(0) is None
        assert log.apply_retention() == 0
        assert (log.log_start_offset, log.log_end_offset) == (0, PER_PARTITION)

        # A batch whose header is right is written as it came (only the offset prefix).
        now = int(time.time() * 1000)
        good = build_batch([Record(b"k", b"x", now - 5), Record(b"k", b"y", now)])
        log.append_as_leader(good, 0)
        log.update_high_watermark()
        back = log.read(PER_PARTITION, 1 << 20).to_bytes()
        assert back[16:] == good[16:]
        assert log.segments[-1].max_timestamp == now
    finally:
        m.shutdown()


def _run_0053(bootstrap: str) -> None:
    topic = "t0053-" + uuid.uuid4().hex[:8]
    p = Producer({"bootstrap.servers": bootstrap})
    value = b"x" * MSG_SIZE
    for part in (0, 1):
        for i in range(PER_PARTITION):
            p.produce(topic, value=value, key=b"p%d-m%d" % (part, i), partition=part,
                      timestamp=-1)  # what 0053's C++ produce() call passes
            p.poll(0)
    assert p.flush(TIMEOUT_S) == 0
    time.sleep(MAINTENANCE_WAIT_S)  # the point: retention has had its ticks (and kept all)

    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
        "enable.partition.eof": False, "enable.auto.commit": False,
    })
    try:
        for part in (0, 1):
            assert c.get_watermark_offsets(TopicPartition(topic, part), TIMEOUT_S) == (
                0, PER_PARTITION), f"partition {part}: earliest/latest"
        c.assign([TopicPartition(topic, part, OFFSET_BEGINNING) for part in (0, 1)])
        got: dict[int, list[int]] = {0: [], 1: []}
        deadline = time.monotonic() + TIMEOUT_S
        while sum(map(len, got.values())) < 2 * PER_PARTITION and time.monotonic() < deadline:
            for msg in c.consume(100, 0.2):
                assert msg.error() is None, msg.error()
                got[msg.partition()].append(msg.offset())
        assert got == {0: list(range(PER_PARTITION)), 1: list(range(PER_PARTITION))}
    finally:
        c.close()


def test_0053_single_broker(broker_factory) -> None:
    b = broker_factory(num_partitions=4, auto_create_topics_enable=True)
    _run_0053(b.bootstrap)


@pytest.mark.slow  # about 20 s: three brokers start
def test_0053_three_broker_cluster(cluster_factory) -> None:  # noqa: F811 (fixture)
    c = cluster_factory(3, num_partitions="4", auto_create_topics_enable="true")
    _run_0053(c.bootstrap)
