"""Per-log configuration, named after Kafka's topic configs so that operators' settings carry over.

`TOPIC_CONFIG_DEFAULTS` is what DescribeConfigs shows; `BROKER_SYNONYMS` maps the broker-level
names (`log.retention.hours`, `message.max.bytes`, ...) onto topic names so that a broker
properties file sets the defaults every topic inherits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from yak.errors import InvalidConfigurationError

LONG_MAX = 9223372036854775807


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    write_caching: bool = True
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

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
            name = raw_name
            value = raw_value
            if name == "log.retention.hours":
                name, value = "retention.ms", str(_parse_int(name, raw_value) * 3600 * 1000)
            elif name == "log.retention.minutes":
                name, value = "retention.ms", str(_parse_int(name, raw_value) * 60 * 1000)
            elif name == "log.roll.hours":
                name, value = "segment.ms", str(_parse_int(name, raw_value) * 3600 * 1000)
            name = BROKER_SYNONYMS.get(name, name)
            attr = _FIELD_OF.get(name)
            if attr is None:
                raise InvalidConfigurationError(f"unknown config {raw_name!r}")
            changes[attr] = _parse(name, attr, str(value))
        cfg = dataclasses.replace(base or cls(), **changes)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        def need(ok: bool, key: str, why: str) -> None:
            if not ok:
                raise InvalidConfigurationError(f"invalid value for {key!r}: {why}")

        need(self.segment_bytes >= 14, "segment.bytes", "must be at least 14")
        need(self.segment_bytes <= 2**31 - 1, "segment.bytes", "must fit in an int32")
        need(self.segment_ms >= 1, "segment.ms", "must be at least 1")
        need(self.segment_index_bytes >= 12, "segment.index.bytes", "must be at least 12")
        need(self.index_interval_bytes >= 0, "index.interval.bytes", "must be >= 0")
        need(self.retention_ms >= -1, "retention.ms", "must be >= -1")
        need(self.max_message_bytes >= 0, "max.message.bytes", "must be >= 0")
        need(
            self.message_timestamp_type in ("CreateTime", "LogAppendTime"),
            "message.timestamp.type",
            "must be CreateTime or LogAppendTime",
        )
        need(self.message_timestamp_before_max_ms >= 0, "message.timestamp.before.max.ms", ">= 0")
        need(self.message_timestamp_after_max_ms >= 0, "message.timestamp.after.max.ms", ">= 0")
        policies = [p.strip() for p in self.cleanup_policy.split(",") if p.strip()]
        need(
            bool(policies) and all(p in ("compact", "delete") for p in policies),
            "cleanup.policy",
            "must be delete, compact or compact,delete",
        )
        need(self.delete_retention_ms >= 0, "delete.retention.ms", "must be >= 0")
        need(
            0.0 <= self.min_cleanable_dirty_ratio <= 1.0,
            "min.cleanable.dirty.ratio",
            "must be in [0, 1]",
        )
        need(self.min_compaction_lag_ms >= 0, "min.compaction.lag.ms", "must be >= 0")
        need(self.max_compaction_lag_ms >= 1, "max.compaction.lag.ms", "must be >= 1")
        need(self.flush_messages >= 1, "flush.messages", "must be >= 1")
        need(self.flush_ms >= 0, "flush.ms", "must be >= 0")
        need(self.file_delete_delay_ms >= 0, "file.delete.delay.ms", "must be >= 0")
        need(self.min_insync_replicas >= 1, "min.insync.replicas", "must be >= 1")
        need(
            self.compression_type in ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
            "compression.type",
            "unknown codec",
        )


# Kafka topic config name -> LogConfig attribute.
_FIELD_OF: dict[str, str] = {
    f.name.replace("_", "."): f.name for f in dataclasses.fields(LogConfig)
}

# Broker-level names (server.properties) -> topic config names.
BROKER_SYNONYMS: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "write_caching_default": "write.caching",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

_INT_FIELDS = {f.name for f in dataclasses.fields(LogConfig) if f.type == "int"}


def _parse_int(name: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise InvalidConfigurationError(f"invalid value for {name!r}: {value!r}") from None


def _parse(name: str, attr: str, value: str) -> object:
    ftype = LogConfig.__dataclass_fields__[attr].type
    if ftype == "int":
        return _parse_int(name, value)
    if ftype == "float":
        try:
            return float(value)
        except ValueError:
            raise InvalidConfigurationError(f"invalid value for {name!r}: {value!r}") from None
    if ftype == "bool":
        v = value.strip().lower()
        if v not in ("true", "false"):
            raise InvalidConfigurationError(f"invalid value for {name!r}: {value!r}")
        return v == "true"
    if attr == "cleanup_policy":
        return ",".join(p.strip() for p in value.split(",") if p.strip())
    return value.strip()


def _to_str(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


TOPIC_CONFIG_DEFAULTS: dict[str, str] = LogConfig().to_props()
