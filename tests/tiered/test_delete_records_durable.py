"""DeleteRecords on a tiered partition is durable before it is answered (issue 25): the
new log start offset is committed to the remote log metadata (the single broker's local
metadata store, then the bucket's manifest) before the low watermark comes back, so a
broker SIGKILLed right after the answer, before any round of the remote log manager could
commit it, still starts with the new start: ListOffsets EARLIEST gives it and nothing
below it is fetched. A store that cannot take the commit gets a retriable error, never a
success.

Real broker processes on a `file://` store. The round interval is long after a restart and
the copy quota is small with segments waiting to be uploaded, so no round commits the
start in between (the old code answered at once and left the commit to a round: these
tests failed on it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.broker.rawclient import RawClient
from tests.conftest import YakBroker
from tests.tiered.test_broker_tiered import (
    consume_confluent,
    create_topic,
    local_segments,
    low_watermark,
    produce,
    wait_for,
)
from tests.tiered.test_tiered_metrics import file_store_settings
from yak.errors import ErrorCode

TOPIC = "durable-delete"
EARLIEST = -2
SEGMENT = 256 << 10


def _tiered_broker(tmp_path: Path, broker_factory: Callable[..., YakBroker]) -> YakBroker:
    """A broker whose remote log holds offsets 0..~700 and whose local disk keeps only
    the last segments; then restarted with rounds far apart and a slow copy, with more
    segments waiting to be uploaded."""
    store = tmp_path / "store"
    store.mkdir()
    b = broker_factory(**file_store_settings(store))
    create_topic(b, TOPIC, **{"segment.bytes": str(SEGMENT), "remote.storage.enable": "true",
                              "local.retention.bytes": str(SEGMENT)})
    produce(b, TOPIC, 0, 1200)
    wait_for(lambda: int(local_segments(b, TOPIC)[0].stem) > 700, 60,
             "uploaded segments deleted locally")
    b.stop()
    b.settings.update({"remote.log.manager.task.interval.ms": "600000",
                       "remote.log.manager.copy.max.bytes.per.second": "65536"})
    b.start()
    produce(b, TOPIC, 1200, 800)  # ~3 segments to copy at 64 KiB/s: a round of ~8 s
    return b


def _delete_records(b: YakBroker, offset: int, topic: str = TOPIC) -> int:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    fut = admin.delete_records([TopicPartition(topic, 0, offset)],
                               operation_timeout=20, request_timeout=30)
    (res,) = fut.values()
    return int(res.result(40).low_watermark)


def _check_start(b: YakBroker, start: int, topic: str = TOPIC) -> None:
    """EARLIEST is `start`, a Fetch below it is OFFSET_OUT_OF_RANGE, and a consumer
    reset to the earliest reads from `start` on (`b`: the partition's leader)."""
    assert low_watermark(b, topic) == start
    with RawClient(b.bootstrap) as c:
        assert c.list_offset(topic, 0, EARLIEST).offset == start
        for below in (0, start // 2, start - 1):
            p = c.fetch(topic, 0, below).responses[0].partitions[0]
            assert p.error_code == ErrorCode.offset_out_of_range, (below, p.error_code)
            assert p.log_start_offset == start
        p = c.fetch(topic, 0, start).responses[0].partitions[0]
        assert p.error_code == 0 and p.records
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "durable-earliest",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])  # below the start: reset to the earliest
    try:
        first = None
        deadline = time.monotonic() + 30
        while first is None and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                first = int(m.value()[:8])
        assert first == start
    finally:
        c.close()


def test_an_answered_delete_records_survives_a_sigkill_right_after_it(
        tmp_path: Path, broker_factory: Callable[..., YakBroker]) -> None:
    b = _tiered_broker(tmp_path, broker_factory)
    assert low_watermark(b, TOPIC) == 0
    assert _delete_records(b, 500) == 500  # 0..~700 is remote only
    b.kill()  # before any round: the copy round is paced, the next one is 10 minutes off
    b.start()
    _check_start(b, 500)
    assert consume_confluent(b, TOPIC, 500, 1500) == list(range(500, 2000))
    assert "Traceback" not in b.log()


@pytest.mark.slow
def test_an_answered_delete_records_into_the_local_part_survives_a_sigkill(
        tmp_path: Path, broker_factory: Callable[..., YakBroker]) -> None:
    """The local log start checkpoint is periodic: the committed remote log start puts
    it back at start-up (the old code answered 50 records below the start after this)."""
    b = _tiered_broker(tmp_path, broker_factory)
    local = int(local_segments(b, TOPIC)[0].stem) + 50
    assert _delete_records(b, local) == local
    b.kill()
    b.start()
    _check_start(b, local)
    assert "Traceback" not in b.log()


def test_delete_records_fails_retriably_while_the_store_cannot_take_the_commit(
        tmp_path: Path, broker_factory: Callable[..., YakBroker]) -> None:
    b = _tiered_broker(tmp_path, broker_factory)
    store = tmp_path / "store"
    moved = tmp_path / "store-away"
    store.rename(moved)
    store.write_text("not a directory: the store is broken")
    try:
        _delete_records(b, 600)
        raise AssertionError("DeleteRecords answered while the bucket was broken")
    except KafkaException as e:
        err = e.args[0]  # both retriable in Kafka's protocol (librdkafka flags neither)
        assert err.code() in (ErrorCode.kafka_storage_error, ErrorCode.request_timed_out), err
    # Refused to readers at once all the same (the round commits it once it can).
    with RawClient(b.bootstrap) as c:
        p = c.fetch(TOPIC, 0, 100).responses[0].partitions[0]
        assert p.error_code == ErrorCode.offset_out_of_range
    store.unlink()
    moved.rename(store)
    assert _delete_records(b, 600) == 600  # the retry: committed (or found committed)
    b.kill()
    b.start()
    _check_start(b, 600)
