"""`yak topic trim`, `add-partitions` and `describe --print-configs`, against a real broker."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer

from tests.cli.test_cli import ok, one_line_error, yak


def _produce(bootstrap: str, topic: str, partition: int, timestamps: list[int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for ts in timestamps:
        p.produce(topic, value=b"v", partition=partition, timestamp=ts)
    assert p.flush(30) == 0


def _starts(bootstrap: str, topic: str) -> list[int]:
    desc = json.loads(ok("topic", "describe", topic, "--format", "json", "--bootstrap", bootstrap))
    return [p["log_start_offset"] for p in desc["partitions"]]


@pytest.mark.slow
def test_trim(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    ok("topic", "create", "logs", "-p", "2", *b)
    now = int(time.time() * 1000)
    _produce(broker.bootstrap, "logs", 0, [now - 3000, now - 2000, now - 1000, now])
    _produce(broker.bootstrap, "logs", 1, [now - 3000, now - 2000])

    out = ok("topic", "trim", "logs", "--partition", "0", "--offset", "1", *b)
    assert "trimmed logs partition 0: log start offset now 1" in out
    assert _starts(broker.bootstrap, "logs") == [1, 0]

    got = json.loads(
        ok(
            "topic",
            "trim",
            "logs",
            "-p",
            "0",
            "--before-timestamp",
            str(now - 1500),
            "--format",
            "json",
            *b,
        )
    )
    assert got == {"topic": "logs", "partitions": [{"partition": 0, "log_start_offset": 2}]}

    # Every partition, every record (-1: up to the high watermark).
    got = json.loads(ok("topic", "trim", "logs", "--offset", "-1", "--format", "json", *b))
    assert got["partitions"] == [
        {"partition": 0, "log_start_offset": 4},
        {"partition": 1, "log_start_offset": 2},
    ]
    assert _starts(broker.bootstrap, "logs") == [4, 2]

    # A time after every record: none is left to delete past the end.
    got = json.loads(
        ok(
            "topic",
            "trim",
            "logs",
            "-p",
            "1",
            "--before-timestamp",
            str(now + 60_000),
            "--format",
            "json",
            *b,
        )
    )
    assert got["partitions"] == [{"partition": 1, "log_start_offset": 2}]

    # Bad input: one line, exit 2.
    for args in (
        ("-p", "0"),
        ("-p", "0", "--offset", "1", "--before-timestamp", "5"),
        ("-p", "7", "--offset", "1"),
        ("-p", "0", "--offset", "-5"),
        ("-p", "0", "--offset", "1", "--format", "yaml"),
    ):
        r = yak("topic", "trim", "logs", *args, *b)
        one_line_error(r)
        assert r.returncode == 2, r.stderr
    r = yak("topic", "trim", "nope", "--offset", "1", *b)
    one_line_error(r, "nope")
    # Past the high watermark: the broker refuses, one line, exit 1.
    r = yak("topic", "trim", "logs", "-p", "0", "--offset", "99", *b)
    one_line_error(r, "OFFSET_OUT_OF_RANGE")
    assert r.returncode == 1


@pytest.mark.slow
def test_add_partitions(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    ok("topic", "create", "grow", "-p", "2", *b)
    out = ok("topic", "add-partitions", "grow", "--total", "5", *b)
    assert "topic grow now has 5 partitions" in out
    desc = json.loads(ok("topic", "describe", "grow", "--format", "json", *b))
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2, 3, 4]
    assert all(p["leader"] == 1 for p in desc["partitions"])
    for total in ("5", "3", "0"):
        r = yak("topic", "add-partitions", "grow", "--total", total, *b)
        one_line_error(r)
        assert r.returncode == 2, r.stderr
    r = yak("topic", "add-partitions", "grow", "--total", "3", *b)
    one_line_error(r, "already has 5 partitions")
    r = yak("topic", "add-partitions", "nope", "--total", "3", *b)
    one_line_error(r, "nope")


def test_describe_print_configs(broker_factory) -> None:
    broker = broker_factory(**{"log.retention.ms": "86400000"})
    b = ["--bootstrap", broker.bootstrap]
    ok("topic", "create", "cfg", "-c", "segment.bytes=1048576", *b)
    got = json.loads(ok("topic", "describe", "cfg", "--print-configs", "--format", "json", *b))
    assert got["topic"] == "cfg"
    configs = got["configs"]
    # Only the non-default values: the topic's own, and the broker's override.
    assert set(configs) == {"segment.bytes", "retention.ms"}, configs
    seg = configs["segment.bytes"]
    assert (seg["value"], seg["source"]) == ("1048576", "topic")
    assert seg["synonyms"][0] == {"name": "segment.bytes", "value": "1048576", "source": "topic"}
    assert {"name": "log.segment.bytes", "value": "1073741824", "source": "default"} in seg[
        "synonyms"
    ]
    ret = configs["retention.ms"]
    assert (ret["value"], ret["source"]) == ("86400000", "broker")
    assert ret["synonyms"][0] == {
        "name": "log.retention.ms",
        "value": "86400000",
        "source": "broker",
    }

    text = ok("topic", "describe", "cfg", "-c", *b)
    assert "SOURCE" in text and "PARTITION" not in text
    seg_line = next(line for line in text.splitlines() if line.startswith("segment.bytes"))
    assert "1048576" in seg_line and "topic" in seg_line
    assert "log.segment.bytes=1073741824 (default)" in seg_line
    ret_line = next(line for line in text.splitlines() if line.startswith("retention.ms"))
    assert "86400000" in ret_line and "broker" in ret_line

    every = json.loads(
        ok("topic", "describe", "cfg", "-c", "--all-configs", "--format", "json", *b)
    )["configs"]
    assert every["cleanup.policy"]["source"] == "default"
    assert len(every) > len(configs)
