from __future__ import annotations

import time

import pytest

from yak.errors import InvalidConfigurationError
from yak.protocol.records import Record, build_batch
from yak.storage import BROKER_SYNONYMS, TOPIC_CONFIG_DEFAULTS, LogConfig

from .conftest import make_batch


def test_defaults_are_kafkas():
    d = TOPIC_CONFIG_DEFAULTS
    assert d["segment.bytes"] == "1073741824"
    assert d["max.message.bytes"] == "1048588"
    assert d["retention.ms"] == "604800000"
    assert d["cleanup.policy"] == "delete"
    assert d["write.caching"] == "true"
    assert d["index.interval.bytes"] == "4096"
    assert d["min.cleanable.dirty.ratio"] == "0.5"
    assert d["message.timestamp.type"] == "CreateTime"


def test_from_props_topic_and_broker_names():
    cfg = LogConfig.from_props({"retention.ms": "1000", "cleanup.policy": "compact, delete",
                                "write.caching": "false"})
    assert cfg.retention_ms == 1000 and cfg.compact and cfg.delete and not cfg.write_caching
    base = LogConfig.from_props({"log.retention.hours": "2", "message.max.bytes": "5000",
                                 "log.segment.bytes": "100000",
                                 "log.flush.interval.messages": "10"})
    assert (base.retention_ms, base.max_message_bytes) == (7_200_000, 5000)
    assert (base.segment_bytes, base.flush_messages) == (100000, 10)
    # topic configs layer on broker defaults
    topic = LogConfig.from_props({"retention.bytes": "7"}, base)
    assert (topic.retention_bytes, topic.segment_bytes) == (7, 100000)
    assert all(v in TOPIC_CONFIG_DEFAULTS for v in BROKER_SYNONYMS.values())
    assert LogConfig.from_props(cfg.to_props()) == cfg


@pytest.mark.parametrize(
    "props, key",
    [
        ({"retention.ms": "abc"}, "retention.ms"),
        ({"cleanup.policy": "archive"}, "cleanup.policy"),
        ({"message.timestamp.type": "Now"}, "message.timestamp.type"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
        ({"segment.bytes": "10"}, "segment.bytes"),
        ({"write.caching": "maybe"}, "write.caching"),
        ({"no.such.config": "1"}, "no.such.config"),
    ],
)
def test_invalid_configs_name_the_key(props, key):
    with pytest.raises(InvalidConfigurationError) as ei:
        LogConfig.from_props(props)
    assert key in str(ei.value)


def test_live_config_update_and_rolls(manager):
    m = manager()
    log = m.create("t", 0)
    log.append_as_leader(make_batch(1), 0)
    # segment.bytes applied live
    log.update_config(LogConfig.from_props({"segment.bytes": "200"}))
    for _ in range(5):
        log.append_as_leader(make_batch(1, size=100), 0)
    assert len(log.segments) >= 4
    # segment.ms: maintenance rolls an old active segment
    log.update_config(LogConfig.from_props({"segment.ms": "1000"}))
    n = len(log.segments)
    m.maintenance(int(time.time() * 1000) + 5000)
    assert len(log.segments) == n + 1
    # index full: segment.index.bytes of 2 entries with an interval of 0 rolls every 2 batches
    log2 = m.create("u", 0, LogConfig.from_props({"segment.index.bytes": "24",
                                                 "index.interval.bytes": "0"}))
    for _ in range(9):
        log2.append_as_leader(make_batch(1), 0)
    assert len(log2.segments) >= 3


def test_flush_messages_advances_recovery_point(manager):
    log = manager(LogConfig.from_props({"flush.messages": "3"})).create("t", 0)
    for _ in range(2):
        log.append_as_leader(make_batch(1), 0)
    assert log.recovery_point == 0
    log.append_as_leader(build_batch([Record(b"k", b"v")]), 0)
    assert log.recovery_point == 3


def test_flush_ms_in_maintenance(manager):
    m = manager(LogConfig.from_props({"flush.ms": "1000"}))
    log = m.create("t", 0)
    log.append_as_leader(make_batch(2), 0)
    m.maintenance(int(time.time() * 1000))  # not due yet
    assert log.recovery_point == 0
    m.maintenance(int(time.time() * 1000) + 2000)
    assert log.recovery_point == 2
    m.checkpoint()
    with open(f"{m.data_dir}/recovery-point-offset-checkpoint") as f:
        assert f.read().splitlines() == ["0", "1", "t 0 2"]
