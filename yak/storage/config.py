"""Per-log configuration, named after Kafka's topic configs so that operators' settings carry over.

Names, types, defaults and bounds are not declared here: they are the topic configs of the one
settings table, `yak.settings.TOPIC_CONFIGS`, which the broker's loader and DescribeConfigs
read too. `LogConfig` is the typed form storage runs with; `from_props` also takes the
broker-level synonyms (`log.retention.hours`, `message.max.bytes`, ...) that set the default
every topic inherits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from yak.errors import InvalidConfigurationError
from yak.settings import (
    BROKER_SETTINGS,
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigError,
    topic_config_for_broker_key,
)

__all__ = ["BROKER_SYNONYMS", "LONG_MAX", "TOPIC_CONFIG_DEFAULTS", "LogConfig"]


def _default(name: str) -> object:
    return TOPIC_CONFIGS[name].parse_default()


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The topic configs storage acts on; every default comes from `yak.settings`."""

    segment_bytes: int = _default("segment.bytes")  # type: ignore[assignment]
    segment_ms: int = _default("segment.ms")  # type: ignore[assignment]
    segment_index_bytes: int = _default("segment.index.bytes")  # type: ignore[assignment]
    index_interval_bytes: int = _default("index.interval.bytes")  # type: ignore[assignment]
    retention_ms: int = _default("retention.ms")  # type: ignore[assignment]
    retention_bytes: int = _default("retention.bytes")  # type: ignore[assignment]
    max_message_bytes: int = _default("max.message.bytes")  # type: ignore[assignment]
    message_timestamp_type: str = _default("message.timestamp.type")  # type: ignore[assignment]
    message_timestamp_before_max_ms: int = _default(  # type: ignore[assignment]
        "message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = _default(  # type: ignore[assignment]
        "message.timestamp.after.max.ms")
    cleanup_policy: str = _default("cleanup.policy")  # type: ignore[assignment]
    delete_retention_ms: int = _default("delete.retention.ms")  # type: ignore[assignment]
    min_cleanable_dirty_ratio: float = _default(  # type: ignore[assignment]
        "min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")  # type: ignore[assignment]
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")  # type: ignore[assignment]
    flush_messages: int = _default("flush.messages")  # type: ignore[assignment]
    flush_ms: int = _default("flush.ms")  # type: ignore[assignment]
    file_delete_delay_ms: int = _default("file.delete.delay.ms")  # type: ignore[assignment]
    write_caching: bool = _default("write.caching")  # type: ignore[assignment]
    min_insync_replicas: int = _default("min.insync.replicas")  # type: ignore[assignment]
    unclean_leader_election_enable: bool = _default(  # type: ignore[assignment]
        "unclean.leader.election.enable")
    compression_type: str = _default("compression.type")  # type: ignore[assignment]
    # Tiered storage (docs/tiered.md): -2 = the same as retention.ms / retention.bytes.
    remote_storage_enable: bool = _default("remote.storage.enable")  # type: ignore[assignment]
    local_retention_ms: int = _default("local.retention.ms")  # type: ignore[assignment]
    local_retention_bytes: int = _default("local.retention.bytes")  # type: ignore[assignment]

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def local_retention(self) -> tuple[int, int]:
        """(ms, bytes) a tiered log keeps locally once uploaded: `local.retention.*`, where
        -2 means the whole log's `retention.*` (Kafka's rule)."""
        ms = self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms
        size = (self.retention_bytes if self.local_retention_bytes == -2
                else self.local_retention_bytes)
        return ms, size

    def to_props(self) -> dict[str, str]:
        """Kafka names -> values as strings (DescribeConfigs)."""
        return {name: _to_str(getattr(self, attr)) for name, attr in _FIELD_OF.items()}

    @classmethod
    def from_props(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Apply Kafka-named settings (topic or broker-level names) on top of `base`.

        Unknown names raise, so a typo in a topic config is reported rather than ignored.
        """
        changes: dict[str, object] = {}
        for raw_name, raw_value in props.items():
            name, value = raw_name, str(raw_value)
            if name not in _FIELD_OF:
                synonym = topic_config_for_broker_key(name)
                if synonym is not None:
                    spec, factor = synonym
                    if factor != 1:
                        n = _parse(name, value)
                        value = str(n * factor if n >= 0 else -1)  # type: ignore[operator]
                    name = spec.name
            attr = _FIELD_OF.get(name)
            if attr is None:
                raise InvalidConfigurationError(f"unknown config {raw_name!r}")
            changes[attr] = _parse(name, value)
        cfg = dataclasses.replace(base or cls(), **changes)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Every field within the bounds the settings table gives its topic config."""
        for name, attr in _FIELD_OF.items():
            _parse(name, _to_str(getattr(self, attr)))
        if self.remote_storage_enable and self.compact:
            # Kafka's rule (LogConfig.validateRemoteStorageOnlyIfSystemEnabled & co.): a
            # compacted log rewrites old segments, which an uploaded copy cannot follow.
            raise InvalidConfigurationError(
                "remote.storage.enable=true is not supported on a topic with"
                f" cleanup.policy={self.cleanup_policy}: tiered topics must be delete-only")
        for local, whole, name in (
                (self.local_retention_ms, self.retention_ms, "ms"),
                (self.local_retention_bytes, self.retention_bytes, "bytes")):
            if whole != -1 and local not in (-2, -1) and local > whole:
                raise InvalidConfigurationError(
                    f"local.retention.{name}={local} must not be above"
                    f" retention.{name}={whole}")
            if whole != -1 and local == -1:
                raise InvalidConfigurationError(
                    f"local.retention.{name}=-1 (unlimited) must not be above"
                    f" retention.{name}={whole}")


# Kafka topic config name -> LogConfig attribute.
_FIELD_OF: dict[str, str] = {
    f.name.replace("_", "."): f.name for f in dataclasses.fields(LogConfig)
}
assert set(_FIELD_OF) <= set(TOPIC_CONFIGS), "every LogConfig field is a declared topic config"

# Broker-level names -> the topic config they default (derived from the settings table).
BROKER_SYNONYMS: dict[str, str] = {
    broker: spec.name
    for spec in TOPIC_CONFIGS.values()
    if spec.name in _FIELD_OF
    for broker, _factor in spec.synonyms
}


def _parse(name: str, value: str) -> object:
    """The typed value, or InvalidConfigurationError (INVALID_CONFIG) naming the key."""
    spec = TOPIC_CONFIGS.get(name) or BROKER_SETTINGS[name]
    try:
        typed = spec.parse(value)
    except ConfigError as e:
        raise InvalidConfigurationError(str(e)) from None
    if isinstance(typed, list):  # cleanup.policy
        return ",".join(typed)
    return typed


def _to_str(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


TOPIC_CONFIG_DEFAULTS: dict[str, str] = LogConfig().to_props()
