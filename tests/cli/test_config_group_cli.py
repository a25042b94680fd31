"""`yak config describe|set|delete --group` (GROUP configs, issue 24) against a real `yak
serve`: what it sets, confluent-kafka's AdminClient describes as DYNAMIC_GROUP_CONFIG;
--all lists every group config with the broker's defaults; a value outside the broker's
bounds or a bad duration is the broker's INVALID_CONFIG in one line with exit 2;
--validate-only changes nothing; delete falls back to the broker's setting."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from tests.cli.test_cli import ok, one_line_error, yak


def described(bootstrap: str, group: str) -> dict[str, tuple[str | None, int]]:
    a = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group)
    return {k: (e.value, e.source) for k, e in a.describe_configs([res])[res].result(15).items()}


@pytest.mark.slow
def test_group_configs_from_the_cli(broker_factory) -> None:
    broker = broker_factory(**{"group.consumer.min.heartbeat.interval.ms": "1000"})
    b = ["--bootstrap", broker.bootstrap]
    assert "group jobs has no dynamic configs" in ok("config", "describe", "--group", "jobs", *b)
    out = ok("config", "set", "--group", "jobs", "share.auto.offset.reset=by_duration:PT1H",
             "consumer.heartbeat.interval.ms=1000", *b)
    assert "set share.auto.offset.reset, consumer.heartbeat.interval.ms on group jobs" in out
    got = described(broker.bootstrap, "jobs")
    assert got["share.auto.offset.reset"] == ("by_duration:PT1H", 8)
    assert got["consumer.heartbeat.interval.ms"] == ("1000", 8)
    assert got["consumer.session.timeout.ms"] == ("45000", 5)
    every = json.loads(ok("config", "describe", "--group", "jobs", "--all", "--json", *b))
    assert every["resource"] == {"type": "group", "name": "jobs"}
    by_name = {c["name"]: (c["value"], c["source"]) for c in every["configs"]}
    assert by_name["share.auto.offset.reset"] == ("by_duration:PT1H", "DYNAMIC_GROUP_CONFIG")
    assert by_name["share.session.timeout.ms"] == ("45000", "DEFAULT_CONFIG")
    assert len(by_name) == 10
    # bad input: the broker's error in one line, exit 2; nothing changed
    r = yak("config", "set", "--group", "jobs", "consumer.heartbeat.interval.ms=100", *b)
    assert r.returncode == 2
    one_line_error(r, "INVALID_CONFIG", "consumer.heartbeat.interval.ms", "[1000, 15000]")
    r = yak("config", "set", "--group", "jobs", "share.auto.offset.reset=by_duration:1h", *b)
    assert r.returncode == 2
    one_line_error(r, "INVALID_CONFIG", "ISO-8601")
    r = yak("config", "describe", "--group", "", *b)
    assert r.returncode == 2
    one_line_error(r, "must not be empty")
    assert "nothing changed" in ok("config", "set", "--group", "jobs",
                                   "share.isolation.level=read_committed", "--validate-only", *b)
    assert described(broker.bootstrap, "jobs")["share.isolation.level"] == (
        "read_uncommitted", 5)
    # delete: back to the broker's group.consumer.heartbeat.interval.ms
    assert "deleted consumer.heartbeat.interval.ms on group jobs" in ok(
        "config", "delete", "--group", "jobs", "consumer.heartbeat.interval.ms", *b)
    assert described(broker.bootstrap, "jobs")["consumer.heartbeat.interval.ms"] == ("5000", 5)
    table = ok("config", "describe", "--group", "jobs", *b)
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[1:]}
    assert rows == {"share.auto.offset.reset": ["by_duration:PT1H", "DYNAMIC_GROUP_CONFIG",
                                                "no"]}
