"""GROUP configs (ConfigResource type 32, issue 24) on the wire against a real `yak serve`:
DescribeConfigs for any group id (the broker's defaults with Kafka's sources, a group's
own values as DYNAMIC_GROUP_CONFIG), the legacy AlterConfigs replacing the whole set
with validate_only honoured, IncrementalAlterConfigs, and the broker's bounds. Through
confluent-kafka's AdminClient (librdkafka maps ResourceType.GROUP to 32) and, for what it
does not expose (documentation, config_names, an empty name), raw kio requests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 - fixtures
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

pytestmark = pytest.mark.timeout(90)

T = 15
GROUP = 32
DYNAMIC_GROUP_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 8, 4, 5
KEYS = {"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms",
        "share.session.timeout.ms", "share.heartbeat.interval.ms",
        "share.record.lock.duration.ms", "share.delivery.count.limit",
        "share.auto.offset.reset", "share.isolation.level",
        "errors.deadletterqueue.topic.name", "share.record.redelivery.delay.ms"}


@pytest.fixture
def cfg_broker(broker_factory: Callable[..., Any]) -> Any:
    # one static group.* setting, to see STATIC_BROKER_CONFIG under a group key
    return broker_factory(**{"group.share.delivery.count.limit": "7"})


def describe(bs: str, group: str) -> dict[str, ConfigEntry]:
    a = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ResourceType.GROUP, group)
    return a.describe_configs([res])[res].result(T)


def incremental(bs: str, group: str, **ops: str | None) -> None:
    a = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=(
            AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET))
        for k, v in ops.items()])
    a.incremental_alter_configs([res])[res].result(T)


def replace(bs: str, group: str, configs: dict[str, str], validate_only: bool = False) -> None:
    a = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ResourceType.GROUP, group, set_config=configs)
    with pytest.warns(DeprecationWarning):
        a.alter_configs([res], validate_only=validate_only)[res].result(T)


def refused(fn: Callable[[], None]) -> tuple[str, str]:
    with pytest.raises(KafkaException) as e:
        fn()
    err = e.value.args[0]
    return err.name(), err.str()


def raw_describe(bs: str, group: str, names: tuple[str, ...] | None) -> Any:
    mod = kio_compat.schema_module("describe_configs", 4, "request")
    req = kio_compat.build(mod.DescribeConfigsRequest, include_synonyms=True,
                           include_documentation=True, resources=(kio_compat.build(
                               mod.DescribeConfigsResource, resource_type=GROUP,
                               resource_name=group, configuration_keys=names),))
    with RawClient(bs) as c:
        return c.request(req).results[0]


def synonyms(bs: str, group: str, key: str) -> list[tuple[str, str | None, int]]:
    (c,) = raw_describe(bs, group, (key,)).configs
    return [(s.name, s.value, int(s.source)) for s in c.synonyms]


def test_any_group_describes_the_broker_defaults_with_kafkas_sources(cfg_broker) -> None:
    got = describe(cfg_broker.bootstrap, "no-such-group")
    assert set(got) == KEYS
    plain = {k: (e.value, e.source) for k, e in got.items()}
    assert plain["share.delivery.count.limit"] == ("7", STATIC_BROKER_CONFIG)
    assert plain["consumer.session.timeout.ms"] == ("45000", DEFAULT_CONFIG)
    assert plain["consumer.heartbeat.interval.ms"] == ("5000", DEFAULT_CONFIG)
    assert plain["share.record.lock.duration.ms"] == ("30000", DEFAULT_CONFIG)
    assert plain["share.auto.offset.reset"] == ("latest", DEFAULT_CONFIG)
    assert plain["share.isolation.level"] == ("read_uncommitted", DEFAULT_CONFIG)
    assert plain["errors.deadletterqueue.topic.name"] == (None, DEFAULT_CONFIG)
    assert all(not e.is_read_only for e in got.values())
    # the synonyms of a key with a broker setting are that setting's chain (Kafka's
    # group.<key>); read raw, as librdkafka keys synonyms by name (one per name)
    assert synonyms(cfg_broker.bootstrap, "no-such-group", "share.delivery.count.limit") == [
        ("group.share.delivery.count.limit", "7", STATIC_BROKER_CONFIG),
        ("group.share.delivery.count.limit", "5", DEFAULT_CONFIG)]
    assert synonyms(cfg_broker.bootstrap, "no-such-group", "share.auto.offset.reset") == [
        ("share.auto.offset.reset", "latest", DEFAULT_CONFIG)]


def test_set_values_are_dynamic_group_config_over_the_broker_chain(cfg_broker) -> None:
    bs = cfg_broker.bootstrap
    incremental(bs, "g", share_session_timeout_ms="50000", share_delivery_count_limit="3",
                share_auto_offset_reset="by_duration:PT1H")
    got = describe(bs, "g")
    assert (got["share.session.timeout.ms"].value,
            got["share.session.timeout.ms"].source) == ("50000", DYNAMIC_GROUP_CONFIG)
    assert got["share.auto.offset.reset"].value == "by_duration:PT1H"
    assert synonyms(bs, "g", "share.delivery.count.limit") == [
        ("share.delivery.count.limit", "3", DYNAMIC_GROUP_CONFIG),
        ("group.share.delivery.count.limit", "7", STATIC_BROKER_CONFIG),
        ("group.share.delivery.count.limit", "5", DEFAULT_CONFIG)]
    assert describe(bs, "other")["share.session.timeout.ms"].value == "45000"
    # DELETE: back to the broker's value
    incremental(bs, "g", share_session_timeout_ms=None)
    e = describe(bs, "g")["share.session.timeout.ms"]
    assert (e.value, e.source) == ("45000", DEFAULT_CONFIG)


def test_documentation_config_names_and_an_empty_name_on_the_raw_wire(cfg_broker) -> None:
    bs = cfg_broker.bootstrap
    r = raw_describe(bs, "g", ("share.record.lock.duration.ms", "no.such.key"))
    assert r.error_code is ErrorCode.none
    assert [c.name for c in r.configs] == ["share.record.lock.duration.ms"]
    c = r.configs[0]
    assert "lock" in (c.documentation or "")
    assert c.config_type == 3  # INT
    assert len(raw_describe(bs, "g", None).configs) == len(KEYS)
    empty = raw_describe(bs, "", None)
    assert empty.error_code is ErrorCode.invalid_request
    assert "Group name must not be empty" in (empty.error_message or "")


def test_legacy_alter_configs_replaces_the_whole_set(cfg_broker) -> None:
    bs = cfg_broker.bootstrap
    incremental(bs, "g", share_session_timeout_ms="50000", share_auto_offset_reset="earliest")
    replace(bs, "g", {"consumer.heartbeat.interval.ms": "6000"})
    got = describe(bs, "g")
    own = {k: e.value for k, e in got.items() if e.source == DYNAMIC_GROUP_CONFIG}
    assert own == {"consumer.heartbeat.interval.ms": "6000"}
    assert got["share.auto.offset.reset"].value == "latest"
    # validate_only: checked, nothing changed; a bad value is refused all the same
    replace(bs, "g", {"share.isolation.level": "read_committed"}, validate_only=True)
    own = {k: e.value for k, e in describe(bs, "g").items() if e.source == DYNAMIC_GROUP_CONFIG}
    assert own == {"consumer.heartbeat.interval.ms": "6000"}
    name, _ = refused(lambda: replace(bs, "g", {"share.isolation.level": "sometimes"},
                                      validate_only=True))
    assert name == "INVALID_CONFIG"
    replace(bs, "g", {})  # an empty set: every key back to the broker's
    assert all(e.source != DYNAMIC_GROUP_CONFIG for e in describe(bs, "g").values())


def test_bounds_are_invalid_config_naming_the_key_and_bounds(cfg_broker) -> None:
    bs = cfg_broker.bootstrap
    name, msg = refused(lambda: incremental(bs, "g", consumer_heartbeat_interval_ms="1000"))
    assert name == "INVALID_CONFIG"
    assert "consumer.heartbeat.interval.ms" in msg and "[5000, 15000]" in msg
    assert "group.consumer.min.heartbeat.interval.ms" in msg
    name, msg = refused(lambda: incremental(bs, "g", share_session_timeout_ms="70000"))
    assert name == "INVALID_CONFIG" and "[45000, 60000]" in msg
    incremental(bs, "g", consumer_heartbeat_interval_ms="15000")  # the upper bound itself
    for key, bad in (("share.auto.offset.reset", "by_duration:1h"),
                     ("share.auto.offset.reset", "by_duration:-PT1H"),
                     ("share.record.lock.duration.ms", "10"),
                     ("no.such.config", "1")):
        name, msg = refused(lambda k=key, v=bad: incremental(bs, "g", **{k: v}))
        assert name == "INVALID_CONFIG", (key, bad, msg)
        assert key in msg
    own = {k: e.value for k, e in describe(bs, "g").items() if e.source == DYNAMIC_GROUP_CONFIG}
    assert own == {"consumer.heartbeat.interval.ms": "15000"}


def test_session_must_be_greater_than_heartbeat(broker_factory) -> None:
    b = broker_factory(**{"group.share.min.session.timeout.ms": "1000",
                          "group.share.min.heartbeat.interval.ms": "1000"})
    name, msg = refused(lambda: incremental(b.bootstrap, "g", share_session_timeout_ms="4000",
                                            share_heartbeat_interval_ms="4000"))
    assert name == "INVALID_CONFIG"
    assert "share.session.timeout.ms (4000) must be greater than share.heartbeat" in msg
    incremental(b.bootstrap, "g", share_session_timeout_ms="4000",
                share_heartbeat_interval_ms="1000")


def test_every_broker_answers_from_the_cluster_wide_store(cluster_factory) -> None:  # noqa: F811
    """Set through one broker of a two-broker etcd cluster, described by each (raw
    requests, so each answer is that broker's own)."""
    c = cluster_factory(2)
    incremental(c[1].bootstrap, "g", share_record_lock_duration_ms="20000")
    for b in (c[1], c[2]):
        deadline = time.monotonic() + T
        while True:
            (e,) = raw_describe(b.bootstrap, "g", ("share.record.lock.duration.ms",)).configs
            if (e.value, int(e.config_source)) == ("20000", DYNAMIC_GROUP_CONFIG):
                break
            assert time.monotonic() < deadline, (b.bootstrap, e)
            time.sleep(0.2)
