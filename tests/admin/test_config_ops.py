"""IncrementalAlterConfigs semantics and the DescribeConfigs view, without a broker."""

from __future__ import annotations

import pytest

from yak.broker.config_view import ConfigSource, broker_entries, topic_entries
from yak.broker.handlers.incremental_alter_configs import APPEND, DELETE, SET, SUBTRACT, apply_ops
from yak.config import BrokerConfig
from yak.errors import InvalidRequestError
from yak.settings import DYNAMIC_BROKER_SETTINGS, ConfigError


def test_apply_ops_kafka_semantics() -> None:
    current = {"retention.ms": "1000", "cleanup.policy": "compact"}
    effective = {"retention.ms": "1000", "cleanup.policy": "compact", "segment.bytes": "1024"}
    new = apply_ops(
        current,
        effective,
        [
            ("segment.bytes", SET, "2048"),
            ("retention.ms", DELETE, None),
            ("cleanup.policy", APPEND, "delete"),
            ("cleanup.policy", APPEND, "compact"),  # already there: no duplicate
        ],
    )
    assert new == {"segment.bytes": "2048", "cleanup.policy": "compact,delete"}
    assert current == {"retention.ms": "1000", "cleanup.policy": "compact"}  # not mutated
    # APPEND starts from the effective value (default included) when there is no override.
    assert apply_ops({}, {"cleanup.policy": "delete"}, [("cleanup.policy", APPEND, "compact")]) == {
        "cleanup.policy": "delete,compact"
    }
    assert apply_ops(
        {}, {"cleanup.policy": "delete,compact"}, [("cleanup.policy", SUBTRACT, "delete")]
    ) == {"cleanup.policy": "compact"}
    with pytest.raises(InvalidRequestError, match="append"):
        apply_ops({}, effective, [("retention.ms", APPEND, "1")])
    with pytest.raises(InvalidRequestError):
        apply_ops({}, effective, [("retention.ms", SET, None)])
    with pytest.raises(InvalidRequestError):
        apply_ops({}, effective, [("retention.ms", 9, "1")])


def test_topic_entries_sources() -> None:
    cfg = BrokerConfig.from_settings({"log.retention.minutes": "5", "log.segment.bytes": "2000000"})
    entries = {e.name: e for e in topic_entries({"segment.bytes": "4096"}, cfg)}
    assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == (
        "4096",
        ConfigSource.TOPIC_CONFIG,
    )
    assert [(s.name, s.source) for s in entries["segment.bytes"].synonyms] == [
        ("segment.bytes", ConfigSource.TOPIC_CONFIG),
        ("log.segment.bytes", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.segment.bytes", ConfigSource.DEFAULT_CONFIG),
    ]
    r = entries["retention.ms"]
    assert (r.value, r.source) == ("300000", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value) for s in r.synonyms] == [
        ("log.retention.minutes", "5"),
        ("log.retention.hours", "168"),
    ]
    assert entries["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG
    # Every topic config storage implements is described.
    from yak.storage import TOPIC_CONFIG_DEFAULTS

    assert set(TOPIC_CONFIG_DEFAULTS) <= set(entries)
    only = topic_entries({}, cfg, keys=["retention.ms"])
    assert [e.name for e in only] == ["retention.ms"]


def test_broker_entries() -> None:
    cfg = BrokerConfig.from_settings({"num.partitions": "6"})
    entries = {e.name: e for e in broker_entries(cfg)}
    assert (entries["num.partitions"].value, entries["num.partitions"].source) == (
        "6",
        ConfigSource.STATIC_BROKER_CONFIG,
    )
    assert (
        entries["auto.create.topics.enable"].value,
        entries["auto.create.topics.enable"].source,
    ) == (
        "true",
        ConfigSource.DEFAULT_CONFIG,
    )
    # Read-only unless the settings table marks the key dynamic (issue 23).
    assert {n for n, e in entries.items() if not e.read_only} == set(DYNAMIC_BROKER_SETTINGS)
    assert entries["node.id"].read_only and not entries["num.partitions"].read_only


def test_dynamic_layers_sources_and_synonyms() -> None:
    """Kafka's precedence and synonym order: per broker > cluster default > static >
    built-in default, synonyms by layer then by the chain (ms, minutes, hours)."""
    cfg = BrokerConfig.from_settings({"num.partitions": "6", "log.retention.hours": "5"})
    changed = cfg.reconfigure({"num.partitions": "4", "log.retention.ms": "60000"},
                              {"num.partitions": "8"})
    assert changed == {"num.partitions", "log.retention.ms"}
    assert cfg.num_partitions == 8
    assert cfg.log_defaults.retention_ms == 60000
    entries = {e.name: e for e in broker_entries(cfg)}
    e = entries["num.partitions"]
    assert (e.value, e.source) == ("8", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(s.value, s.source) for s in e.synonyms] == [
        ("8", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("4", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("6", ConfigSource.STATIC_BROKER_CONFIG),
        ("1", ConfigSource.DEFAULT_CONFIG),
    ]
    r = entries["log.retention.ms"]
    assert (r.value, r.source) == ("60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert [(s.name, s.source) for s in r.synonyms] == [
        ("log.retention.ms", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", ConfigSource.DEFAULT_CONFIG),
    ]
    # The cluster-wide default resource lists only the dynamic defaults that are set.
    default = {e.name: e for e in broker_entries(cfg, default_resource=True)}
    assert set(default) == {"num.partitions", "log.retention.ms"}
    assert default["num.partitions"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    # A topic without its own value runs with (and shows) the dynamic default.
    t = {e.name: e for e in topic_entries({}, cfg)}["retention.ms"]
    assert (t.value, t.source) == ("60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    # Layers removed: back to the static values.
    assert cfg.reconfigure({}, {}) == {"num.partitions", "log.retention.ms"}
    assert cfg.num_partitions == 6 and cfg.log_defaults.retention_ms == 5 * 3_600_000
    # A read-only key or a bad value is refused before anything changes.
    with pytest.raises(ConfigError, match="node.id"):
        cfg.reconfigure({"node.id": "3"}, {})
    with pytest.raises(ConfigError, match="num.partitions"):
        cfg.reconfigure({"num.partitions": "0"}, {})
    assert cfg.num_partitions == 6
