"""A consumer whose offset is out of range (past the log end, or below the log start after
records were deleted) must get OFFSET_OUT_OF_RANGE in a Fetch response librdkafka can
parse, so `auto.offset.reset` fires: earliest and latest reset the position,
`error` hands the error to the application.

Regression (issue 10): error partitions were encoded with null records, librdkafka
refused the whole response ("invalid MessageSetSize -1") and re-fetched about 2,000
times a second without ever resetting.
"""

from __future__ import annotations

import json
import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.waiting import wait_until

from .rawclient import RawClient

TIMEOUT_S = 20.0


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(TIMEOUT_S) == 0


def _setup(bootstrap: str, prefix: str, n: int = 10) -> str:
    topic = _topic(prefix)
    with RawClient(bootstrap) as rc:
        rc.create_topic(topic, partitions=1)
    _produce(bootstrap, topic, [b"m%d" % i for i in range(n)])
    return topic


def _consumer(bootstrap: str, reset: str, **extra: object) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": "oor-" + uuid.uuid4().hex[:6],
        "enable.auto.commit": False, "auto.offset.reset": reset, **extra,
    })


def _poll_until(c: Consumer, want: int, timeout_s: float = TIMEOUT_S) -> list:
    """Messages (and errors) until `want` of them arrived or the deadline passed."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got.extend(c.consume(100, 0.2))
    return got


def test_past_log_end_resets_to_earliest(module_broker) -> None:
    topic = _setup(module_broker.bootstrap, "oor-early")
    c = _consumer(module_broker.bootstrap, "earliest")
    try:
        c.assign([TopicPartition(topic, 0, 1000)])
        got = _poll_until(c, 10)
    finally:
        c.close()
    assert [m.error() for m in got if m.error()] == []
    assert [(m.offset(), m.value()) for m in got] == [(i, b"m%d" % i) for i in range(10)]


def test_past_log_end_resets_to_latest_and_long_polls(module_broker) -> None:
    """Reset to the end: nothing old is delivered, what is produced after the reset is.
    Then, idle at the end, the consumer long-polls instead of re-fetching in a loop."""
    topic = _setup(module_broker.bootstrap, "oor-late")
    stats: list[dict] = []
    c = _consumer(module_broker.bootstrap, "latest", **{
        "statistics.interval.ms": 500, "stats_cb": lambda s: stats.append(json.loads(s)),
    })
    try:
        c.assign([TopicPartition(topic, 0, 1000)])
        got: list = []
        deadline = time.monotonic() + TIMEOUT_S
        i = 0
        # The reset's timing is the client's: keep producing until something arrives.
        while not got and time.monotonic() < deadline:
            _produce(module_broker.bootstrap, topic, [b"new%d" % i])
            i += 1
            got.extend(c.consume(100, 0.5))
        got.extend(_poll_until(c, i - len(got), 3.0))
        assert [m.error() for m in got if m.error()] == []
        offsets = [m.offset() for m in got]
        assert offsets and offsets[0] >= 10, offsets  # reset to the end, not the start
        assert offsets == list(range(offsets[0], 10 + i)), offsets
        assert [m.value() for m in got] == [b"new%d" % (o - 10) for o in offsets]

        before = _fetch_requests(stats)
        t0 = time.monotonic()
        assert c.consume(100, 3.0) == []
        # librdkafka hands statistics over only inside poll/consume: keep polling (idle)
        # until a snapshot taken after that consume has come, and count the idle time to it.
        seen = len(stats)

        def new_snapshot() -> bool:
            assert c.consume(100, 0.1) == []
            return len(stats) > seen

        wait_until(new_snapshot, 10, "one more statistics snapshot")
        elapsed = time.monotonic() - t0
        # The broker holds an empty Fetch for fetch.wait.max.ms (500 ms): a handful per
        # second. The bug made it ~2,000 per second.
        assert _fetch_requests(stats) - before < 10 * (elapsed + 1)
    finally:
        c.close()


def _fetch_requests(stats: list[dict]) -> int:
    assert stats, "no librdkafka statistics yet"
    return sum(b.get("req", {}).get("Fetch", 0) for b in stats[-1]["brokers"].values())


def test_past_log_end_with_reset_error_reaches_the_application(module_broker) -> None:
    topic = _setup(module_broker.bootstrap, "oor-err")
    c = _consumer(module_broker.bootstrap, "error")
    try:
        c.assign([TopicPartition(topic, 0, 1000)])
        got = _poll_until(c, 1)
    finally:
        c.close()
    assert got, "no error delivered"
    err = got[0].error()
    assert err is not None and err.code() == KafkaError._AUTO_OFFSET_RESET
    assert "out of range" in err.str().lower()


def test_below_log_start_resets_to_earliest(module_broker) -> None:
    """After DeleteRecords moved the log start to 5, offset 2 is out of range: the
    consumer resumes at the new log start."""
    topic = _setup(module_broker.bootstrap, "oor-deleted")
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        assert f.result(TIMEOUT_S).low_watermark == 5
    c = _consumer(module_broker.bootstrap, "earliest")
    try:
        c.assign([TopicPartition(topic, 0, 2)])
        got = _poll_until(c, 5)
    finally:
        c.close()
    assert [m.error() for m in got if m.error()] == []
    assert [m.offset() for m in got] == [5, 6, 7, 8, 9]


def test_below_log_start_with_reset_error_reaches_the_application(module_broker) -> None:
    topic = _setup(module_broker.bootstrap, "oor-deleted-err")
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        f.result(TIMEOUT_S)
    c = _consumer(module_broker.bootstrap, "error")
    try:
        c.assign([TopicPartition(topic, 0, 2)])
        got = _poll_until(c, 1)
    finally:
        c.close()
    assert got and got[0].error() is not None
    assert got[0].error().code() == KafkaError._AUTO_OFFSET_RESET
