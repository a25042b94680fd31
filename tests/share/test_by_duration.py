"""`share.auto.offset.reset=by_duration:<ISO-8601 duration>` (issue 24) on a real `yak
serve`: a new share group's share partitions start at the first record whose timestamp
is at least now - duration (CreateTime timestamps set by the producer), and where no
record is that recent, at the log end (Kafka's fallback to latest)."""

from __future__ import annotations

import time
from contextlib import ExitStack

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from yak.share.group_configs import InvalidGroupConfig, by_duration_ms, validate_group_configs

pytestmark = pytest.mark.timeout(120)

T = 15
HOUR_MS = 3_600_000


def set_reset(bs: str, group: str, value: str) -> None:
    a = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", value,
                    incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(T)


def consume(bs: str, group: str, topic: str, want: int, seconds: float) -> list[tuple[int, int]]:
    """(partition, offset) of what a new share consumer of `group` gets in `seconds`
    (stops early once it has `want`)."""
    got: list[tuple[int, int]] = []
    with ExitStack() as stack:
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
        stack.callback(c.close)
        c.subscribe([topic])
        end = time.monotonic() + seconds
        while time.monotonic() < end and len(got) < want:
            for m in c.poll(0.25):
                assert m.error() is None, m.error()
                got.append((m.partition(), m.offset()))
    return sorted(got)


def test_by_duration_starts_at_the_first_record_that_recent(broker) -> None:
    bs = broker.bootstrap
    a = AdminClient({"bootstrap.servers": bs})
    a.create_topics([NewTopic("bd", 2, 1)])["bd"].result(T)
    now = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    # partition 0: offsets 0-4 three hours old, 5-9 ten minutes old;
    # partition 1: offsets 0-4 three hours old only
    for i in range(10):
        p.produce("bd", b"p0-%d" % i, partition=0,
                  timestamp=now - (3 * HOUR_MS if i < 5 else 600_000))
        p.flush(T)  # one batch per record: the time index finds each
    for i in range(5):
        p.produce("bd", b"p1-%d" % i, partition=1, timestamp=now - 3 * HOUR_MS)
        p.flush(T)
    set_reset(bs, "recent", "by_duration:PT1H")
    set_reset(bs, "all", "by_duration:P1D")
    # 10 minutes and 3 hours: the first record at most one hour old is offset 5 of
    # partition 0; partition 1 has none that recent and starts at its end
    assert consume(bs, "recent", "bd", 5, 8) == [(0, o) for o in range(5, 10)]
    assert consume(bs, "all", "bd", 15, 8) == sorted(
        [(0, o) for o in range(10)] + [(1, o) for o in range(5)])
    # the default (latest) gets none of it
    assert consume(bs, "plain", "bd", 1, 5) == []
    # partition 1 of "recent" started at its end: a new record is delivered, the old not
    with ExitStack() as stack:
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": "recent"})
        stack.callback(c.close)
        c.subscribe(["bd"])
        p.produce("bd", b"new", partition=1)
        p.flush(T)
        got = []  # partition 1 only: partition 0's records the first consumer closed on
        end = time.monotonic() + 10  # may come back (released), which is not the point here
        while time.monotonic() < end and not got:
            got += [(m.partition(), m.offset(), m.value()) for m in c.poll(0.25)
                    if m.partition() == 1]
    assert got == [(1, 5, b"new")]


@pytest.mark.parametrize(("value", "ms"), [
    ("by_duration:PT1H", HOUR_MS), ("by_duration:P1D", 24 * HOUR_MS),
    ("by_duration:pt1m30s", 90_000), ("by_duration:PT0.5S", 500),
    ("by_duration:P1DT2H", 26 * HOUR_MS), ("by_duration:PT0S", 0), ("latest", None)])
def test_durations_java_reads(value: str, ms: int | None) -> None:
    assert by_duration_ms(value) == ms


@pytest.mark.parametrize("value", ["by_duration:", "by_duration:P", "by_duration:PT",
                                   "by_duration:P1DT", "by_duration:1h", "by_duration:-PT1H",
                                   "by_duration:P1Y", "by_duration:PT1H "])
def test_bad_durations_are_invalid_config(value: str) -> None:
    with pytest.raises(InvalidGroupConfig):
        by_duration_ms(value)
    with pytest.raises(InvalidGroupConfig, match="share.auto.offset.reset"):
        validate_group_configs(lambda _name: None, lambda _topic: None,
                               {"share.auto.offset.reset": value})
