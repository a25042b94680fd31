"""BrokerConfig loading: Kafka names from .properties, TOML and --set, with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from yak.config import BrokerConfig, ConfigError, parse_properties, resolve_log_props


def load(tmp_path: Path, text: str | None = None, suffix: str = ".properties", **kw):
    warnings: list[str] = []
    cfg_file = None
    if text is not None:
        cfg_file = tmp_path / f"server{suffix}"
        cfg_file.write_text(text)
    cfg = BrokerConfig.load(config_file=cfg_file, warn=warnings.append, **kw)
    return cfg, warnings


def test_defaults_match_kafka(tmp_path: Path) -> None:
    cfg, warnings = load(tmp_path)
    assert warnings == []
    assert (cfg.node_id, cfg.listen_host, cfg.listen_port) == (1, "127.0.0.1", 9092)
    assert (cfg.advertised_host, cfg.advertised_port) == ("127.0.0.1", 9092)
    assert cfg.data_dir == Path("yak-data")
    assert cfg.num_partitions == 1
    assert cfg.default_replication_factor == 1
    assert cfg.auto_create_topics_enable is True
    assert cfg.message_max_bytes == 1048588
    assert cfg.socket_request_max_bytes == 104857600
    assert cfg.group_initial_rebalance_delay_ms == 3000
    assert cfg.offsets_retention_minutes == 10080
    assert cfg.log_defaults.retention_ms == 7 * 24 * 3600 * 1000
    assert cfg.raw == {}


def test_properties_file_with_kafka_syntax(tmp_path: Path) -> None:
    text = "\n".join(
        [
            "# Kafka server.properties style",
            "! also a comment",
            "node.id=3",
            "listeners=PLAINTEXT://127.0.0.1:19092",
            "advertised.listeners = PLAINTEXT://kafka.example:29092",
            "log.dirs=/tmp/yak-a,/tmp/yak-b",
            "num.partitions: 4",
            "auto.create.topics.enable FALSE",
            "log.retention.hours=1",
            "log.segment.bytes=\\",
            "   1048576",
            "message.max.bytes=2000000",
        ]
    )
    cfg, warnings = load(tmp_path, text)
    assert warnings == []
    assert cfg.node_id == 3
    assert (cfg.listen_host, cfg.listen_port) == ("127.0.0.1", 19092)
    assert (cfg.advertised_host, cfg.advertised_port) == ("kafka.example", 29092)
    assert cfg.data_dir == Path("/tmp/yak-a")
    assert cfg.num_partitions == 4
    assert cfg.auto_create_topics_enable is False
    assert cfg.message_max_bytes == 2000000
    # Broker-level log.* synonyms become every topic's defaults.
    assert cfg.log_props["retention.ms"] == "3600000"
    assert cfg.log_props["segment.bytes"] == "1048576"
    assert cfg.log_props["max.message.bytes"] == "2000000"
    assert cfg.log_defaults.retention_ms == 3600000
    assert cfg.log_defaults.segment_bytes == 1048576
    assert cfg.log_defaults.max_message_bytes == 2000000
    assert cfg.raw["num.partitions"] == "4"


def test_toml_file_flat_and_nested(tmp_path: Path) -> None:
    text = """
"num.partitions" = 3
"auto.create.topics.enable" = false
[log.retention]
ms = 60000
[log]
"cleanup.policy" = ["compact", "delete"]
"""
    cfg, warnings = load(tmp_path, text, suffix=".toml")
    assert warnings == []
    assert cfg.num_partitions == 3
    assert cfg.auto_create_topics_enable is False
    assert cfg.log_defaults.retention_ms == 60000
    assert cfg.raw["log.cleanup.policy"] == "compact,delete"
    assert cfg.log_defaults.compact and cfg.log_defaults.delete


def test_precedence_file_then_flags_then_set(tmp_path: Path) -> None:
    text = "listeners=PLAINTEXT://127.0.0.1:1111\nnum.partitions=2\nlog.dirs=/from/file\n"
    cfg, _ = load(
        tmp_path,
        text,
        data_dir=tmp_path / "d",
        listen="127.0.0.1:2222",
        overrides=["num.partitions=5"],
    )
    assert cfg.listen_port == 2222
    assert cfg.data_dir == tmp_path / "d"
    assert cfg.num_partitions == 5
    # --set wins even over the dedicated flags.
    cfg, _ = load(tmp_path, listen="127.0.0.1:2222", overrides=["listeners=127.0.0.1:3333"])
    assert cfg.listen_port == 3333


def test_retention_synonym_precedence() -> None:
    # Kafka: log.retention.ms > log.retention.minutes > log.retention.hours.
    props = resolve_log_props(
        {"log.retention.hours": "2", "log.retention.minutes": "3", "log.retention.ms": "4"}
    )
    assert props["retention.ms"] == "4"
    props = resolve_log_props({"log.retention.hours": "2", "log.retention.minutes": "3"})
    assert props["retention.ms"] == "180000"
    assert resolve_log_props({"log.retention.hours": "-1"})["retention.ms"] == "-1"
    assert resolve_log_props({"log.roll.hours": "1"})["segment.ms"] == "3600000"


def test_unknown_keys_warn_but_load(tmp_path: Path) -> None:
    cfg, warnings = load(tmp_path, overrides=["no.such.setting=1", "num.partitions=2"])
    assert cfg.num_partitions == 2
    assert cfg.unknown_keys == ["no.such.setting"]
    assert len(warnings) == 1 and "no.such.setting" in warnings[0]


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("num.partitions=abc", "num.partitions"),
        ("num.partitions=0", "num.partitions"),
        ("auto.create.topics.enable=yes", "auto.create.topics.enable"),
        ("listeners=nonsense", "listeners"),
        ("listeners=127.0.0.1:70000", "listeners"),
        ("log.retention.ms=soon", "log.retention.ms"),
        ("log.cleanup.policy=shred", "log.cleanup.policy"),
        ("log.segment.bytes=10", "log.segment.bytes"),
        ("log.cleaner.min.cleanable.ratio=2", "log.cleaner.min.cleanable.ratio"),
        ("compression.type=brotli", "compression.type"),
        ("missing-equals", "missing-equals"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(tmp_path: Path, override: str, fragment: str):
    with pytest.raises(ConfigError) as ei:
        load(tmp_path, overrides=[override])
    msg = str(ei.value)
    assert fragment in msg
    assert "\n" not in msg


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        BrokerConfig.load(config_file=tmp_path / "nope.properties")


def test_broken_toml_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TOML"):
        load(tmp_path, "num.partitions = = 3", suffix=".toml")


def test_wildcard_listener_advertises_loopback(tmp_path: Path) -> None:
    cfg, _ = load(tmp_path, listen="0.0.0.0:9999")
    assert cfg.listen_host == "0.0.0.0"
    assert (cfg.advertised_host, cfg.advertised_port) == ("127.0.0.1", 9999)


def test_properties_escapes_and_separators() -> None:
    props = parse_properties("a=1\nb : 2\nc 3\nd=x\\ty\ne\\=f=4\n  # indented comment\nempty=\n")
    assert props == {"a": "1", "b": "2", "c": "3", "d": "x\ty", "e=f": "4", "empty": ""}
