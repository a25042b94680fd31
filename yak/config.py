"""Broker settings under Apache Kafka's own names: reading them from files and flags.

Operators bring their `server.properties` habits (and files) with them, so Yak reads
the same keys (`num.partitions`, `log.retention.hours`, `message.max.bytes`, ...) from a
`.properties` or `.toml` file plus `--set key=value` overrides. Like Kafka, an unknown key
is only a warning (files are shared between versions and tools), while a bad value for a
known key is fatal: starting a broker with a silently wrong retention loses data.

What a setting is (type, default, bounds, which part reads it) is declared once, in
`yak.settings`; this module only loads values and builds the typed `BrokerConfig`.
Topic configs (`retention.ms`, `segment.bytes`, ...) have broker-level synonyms
(`log.retention.ms`, `log.segment.bytes`, ...) that set the default of every topic; they
are resolved here into `log_defaults`, the base `LogConfig` for topics without overrides.

Dynamic broker configs (issue 23): `reconfigure(default, per_broker)` lays the cluster-wide
default and this broker's own dynamic configs over the static settings (Kafka's
precedence: per broker > cluster default > static > built-in default) and updates the
fields of the settings marked `dynamic` in place, so every part holding this object reads
the new value on its next use. `raw` stays what was given at start-up (the static layer).
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yak.settings import (
    BROKER_SETTINGS,
    DYNAMIC_BROKER_SETTINGS,
    LISTENER_PREFIX,
    LONG_MAX,
    ConfigError,
    Setting,
    dynamic_setting,
    host_port,
    resolve_topic_defaults,
    topic_config_for_broker_key,
)

if TYPE_CHECKING:
    from yak.storage import LogConfig

__all__ = [
    "BROKER_SETTINGS",
    "LONG_MAX",
    "BrokerConfig",
    "BrokerSetting",
    "ConfigError",
    "parse_host_port",
    "parse_properties",
    "read_config_file",
    "resolve_log_props",
]

# The record type of the settings table (kept under this name for the modules that
# declared settings with it before the table moved to `yak.settings`).
BrokerSetting = Setting


# --------------------------------------------------------------------------- file formats


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and i + 6 <= len(s):
                try:
                    out.append(chr(int(s[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Java `.properties` syntax, as Kafka's `server.properties` uses it.

    Handles `#`/`!` comments, `=`, `:` or whitespace separators, backslash line
    continuations and escapes, so a file written for Kafka reads the same here.
    """
    props: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw_line in text.splitlines():
        line = raw_line.lstrip() if not pending else raw_line.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        i = 0
        key_chars: list[str] = []
        while i < len(line):
            c = line[i]
            if c == "\\" and i + 1 < len(line):
                key_chars.append(line[i : i + 2])
                i += 2
                continue
            if c in "=:" or c.isspace():
                break
            key_chars.append(c)
            i += 1
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape("".join(key_chars))] = _unescape(rest.rstrip("\r\n"))
    return props


def _toml_value(key: str, v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float | str):
        return str(v)
    if isinstance(v, list):
        return ",".join(_toml_value(key, x) for x in v)
    raise ConfigError(f"invalid value for {key} in TOML file: unsupported type {type(v).__name__}")


def _flatten_toml(table: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested TOML tables join with dots: `[log.retention] ms = 1` is `log.retention.ms`."""
    out: dict[str, str] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten_toml(v, key + "."))
        else:
            out[key] = _toml_value(key, v)
    return out


def read_config_file(path: str | Path) -> dict[str, str]:
    """Settings from a `.toml` file (by extension) or a Java `.properties` file."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror or e}") from None
    if p.suffix.lower() == ".toml":
        try:
            return _flatten_toml(tomllib.loads(data.decode("utf-8")))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot parse TOML config file {p}: {e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return parse_properties(text)


def parse_host_port(value: str, key: str) -> tuple[str, int]:
    """`HOST:PORT`, `[v6]:PORT` or a Kafka listener `PLAINTEXT://HOST:PORT` (first entry)."""
    return host_port(key, value)


def _parse_override(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"invalid setting {item!r}: expected key=value")
    return key.strip(), value.strip()


def _stderr_warning(msg: str) -> None:
    print(f"yak: warning: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- BrokerConfig


def _d(name: str) -> Any:
    """A field's default: the setting's default in the table, typed."""
    return BROKER_SETTINGS[name].parse_default()


@dataclass
class BrokerConfig:
    """The broker's settings, typed. `raw` keeps every setting exactly as given.

    Each field is filled from the setting whose `field` names it; defaults come from the
    settings table, never from here.
    """

    node_id: int = _d("node.id")
    data_dir: Path = field(default_factory=lambda: Path(_d("log.dir")))
    listen_host: str = "127.0.0.1"
    listen_port: int = 9092
    advertised_host: str = ""
    advertised_port: int = 0
    num_partitions: int = _d("num.partitions")
    default_replication_factor: int = _d("default.replication.factor")
    auto_create_topics_enable: bool = _d("auto.create.topics.enable")
    delete_topic_enable: bool = _d("delete.topic.enable")
    socket_request_max_bytes: int = _d("socket.request.max.bytes")
    socket_sendfile_enable: bool = _d("socket.sendfile.enable")
    group_initial_rebalance_delay_ms: int = _d("group.initial.rebalance.delay.ms")
    group_min_session_timeout_ms: int = _d("group.min.session.timeout.ms")
    group_max_session_timeout_ms: int = _d("group.max.session.timeout.ms")
    group_max_size: int = _d("group.max.size")
    group_consumer_session_timeout_ms: int = _d("group.consumer.session.timeout.ms")
    group_consumer_heartbeat_interval_ms: int = _d("group.consumer.heartbeat.interval.ms")
    group_share_record_lock_duration_ms: int = _d("group.share.record.lock.duration.ms")
    group_share_min_record_lock_duration_ms: int = _d("group.share.min.record.lock.duration.ms")
    group_share_max_record_lock_duration_ms: int = _d("group.share.max.record.lock.duration.ms")
    group_share_delivery_count_limit: int = _d("group.share.delivery.count.limit")
    group_share_min_delivery_count_limit: int = _d("group.share.min.delivery.count.limit")
    group_share_max_delivery_count_limit: int = _d("group.share.max.delivery.count.limit")
    group_share_partition_max_record_locks: int = _d("group.share.partition.max.record.locks")
    group_share_session_timeout_ms: int = _d("group.share.session.timeout.ms")
    group_share_heartbeat_interval_ms: int = _d("group.share.heartbeat.interval.ms")
    group_share_max_size: int = _d("group.share.max.size")
    group_share_max_share_sessions: int = _d("group.share.max.share.sessions")
    offsets_retention_minutes: int = _d("offsets.retention.minutes")
    offsets_retention_check_interval_ms: int = _d("offsets.retention.check.interval.ms")
    offset_metadata_max_bytes: int = _d("offset.metadata.max.bytes")
    offsets_topic_num_partitions: int = _d("offsets.topic.num.partitions")
    offsets_topic_segment_bytes: int = _d("offsets.topic.segment.bytes")
    offsets_commit_timeout_ms: int = _d("offsets.commit.timeout.ms")
    offsets_topic_replication_factor: int = _d("offsets.topic.replication.factor")
    transaction_state_log_replication_factor: int = _d(
        "transaction.state.log.replication.factor")
    # the cluster (issue 11): "local" or an etcd:// URL, and the broker's session
    metadata_store: str = _d("metadata.store")
    broker_session_timeout_ms: int = _d("broker.session.timeout.ms")
    broker_heartbeat_interval_ms: int = _d("broker.heartbeat.interval.ms")
    broker_rack: str | None = _d("broker.rack")
    replica_selector_class: str | None = _d("replica.selector.class")
    auto_leader_rebalance_enable: bool = _d("auto.leader.rebalance.enable")
    leader_imbalance_check_interval_seconds: int = _d("leader.imbalance.check.interval.seconds")
    leader_imbalance_per_broker_percentage: int = _d("leader.imbalance.per.broker.percentage")
    controlled_shutdown_enable: bool = _d("controlled.shutdown.enable")
    broker_liveness_probe_enable: bool = _d("broker.liveness.probe.enable")
    broker_liveness_unresponsive_ms: int = _d("broker.liveness.unresponsive.ms")
    broker_load_report_interval_ms: int = _d("broker.load.report.interval.ms")
    cordoned_log_dirs: list[str] = field(default_factory=lambda: _d("cordoned.log.dirs"))
    partition_autobalancing_mode: str = _d("partition.autobalancing.mode")
    partition_autobalancing_tick_interval_ms: int = _d("partition.autobalancing.tick.interval.ms")
    partition_autobalancing_disk_imbalance_threshold_percent: int = _d(
        "partition.autobalancing.disk.imbalance.threshold.percent")
    transaction_state_log_num_partitions: int = _d("transaction.state.log.num.partitions")
    transaction_state_log_min_isr: int = _d("transaction.state.log.min.isr")
    transaction_state_log_segment_bytes: int = _d("transaction.state.log.segment.bytes")
    transactional_id_expiration_ms: int = _d("transactional.id.expiration.ms")
    transaction_max_timeout_ms: int = _d("transaction.max.timeout.ms")
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = _d(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms")
    transaction_remove_expired_transaction_cleanup_interval_ms: int = _d(
        "transaction.remove.expired.transaction.cleanup.interval.ms")
    # replication (issue 11)
    replica_lag_time_max_ms: int = _d("replica.lag.time.max.ms")
    replica_fetch_wait_max_ms: int = _d("replica.fetch.wait.max.ms")
    replica_fetch_dead_ms: int = _d("replica.fetch.dead.ms")
    replica_fetch_min_bytes: int = _d("replica.fetch.min.bytes")
    replica_fetch_max_bytes: int = _d("replica.fetch.max.bytes")
    replica_fetch_response_max_bytes: int = _d("replica.fetch.response.max.bytes")
    replica_fetch_backoff_ms: int = _d("replica.fetch.backoff.ms")
    replica_socket_timeout_ms: int = _d("replica.socket.timeout.ms")
    num_replica_fetchers: int = _d("num.replica.fetchers")
    num_recovery_threads_per_data_dir: int = _d("num.recovery.threads.per.data.dir")
    # KIP-73 throttles (dynamic; enforced by cluster/replication_throttle.py)
    leader_replication_throttled_rate: int = _d("leader.replication.throttled.rate")
    follower_replication_throttled_rate: int = _d("follower.replication.throttled.rate")
    log_defaults: LogConfig = None  # type: ignore[assignment]  # filled by __post_init__
    raw: dict[str, str] = field(default_factory=dict)
    # Topic-config-name -> value derived from the broker's `log.*` synonyms that were
    # actually set (what DescribeConfigs reports as STATIC_BROKER_CONFIG).
    log_props: dict[str, str] = field(default_factory=dict)
    unknown_keys: list[str] = field(default_factory=list)
    # The dynamic layers (issue 23): the cluster-wide default and this broker's own, as
    # stored in the metadata (`yak.cluster.dynamic_config`); empty until it applies them.
    dynamic_default: dict[str, str] = field(default_factory=dict)
    dynamic_broker: dict[str, str] = field(default_factory=dict)
    _static: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.advertised_host:
            self.advertised_host = self.listen_host
        if not self.advertised_port:
            self.advertised_port = self.listen_port
        self.data_dir = Path(self.data_dir)
        if self.log_defaults is None:
            self.log_defaults = _build_log_defaults(self.log_props)

    @classmethod
    def load(
        cls,
        data_dir: str | Path | None = None,
        listen: str | None = None,
        advertised_listener: str | None = None,
        config_file: str | Path | None = None,
        overrides: Iterable[str] = (),
        warn: Callable[[str], None] = _stderr_warning,
    ) -> BrokerConfig:
        """Settings from defaults < config file < explicit flags < `--set` overrides.

        `--set` wins over everything, like Kafka's `--override` on kafka-server-start:
        it is the most specific thing the operator typed.
        """
        settings: dict[str, str] = {}
        if config_file is not None:
            settings.update(read_config_file(config_file))
        if data_dir is not None:
            settings["log.dirs"] = str(data_dir)
        if listen is not None:
            settings["listeners"] = listen
        if advertised_listener is not None:
            settings["advertised.listeners"] = advertised_listener
        for item in overrides:
            k, v = _parse_override(item)
            settings[k] = v
        return cls.from_settings(settings, warn=warn)

    @classmethod
    def from_settings(
        cls, settings: Mapping[str, str], warn: Callable[[str], None] = _stderr_warning
    ) -> BrokerConfig:
        """Validate Kafka-named settings and build the typed config."""
        kwargs: dict[str, Any] = {}
        unknown: list[str] = []
        parsed: dict[str, Any] = {}
        settings = _with_listener_names(settings)
        for key, value in settings.items():
            spec = BROKER_SETTINGS.get(key)
            if spec is None:
                if key.startswith(LISTENER_PREFIX):
                    continue  # per-listener overrides: checked by the security part
                unknown.append(key)
                warn(f"unknown setting {key!r} ignored")
                continue
            parsed[key] = spec.parse(value)
            if spec.field is not None:
                kwargs[spec.field] = parsed[key]
        if (
            "broker.id" in parsed
            and "node.id" in parsed
            and parsed["broker.id"] != parsed["node.id"]
        ):
            raise ConfigError("broker.id and node.id are both set and differ; set only node.id")
        dirs = settings.get("log.dirs") or settings.get("log.dir")
        if dirs is not None:
            kwargs["data_dir"] = Path(dirs.split(",")[0].strip())
        if "listeners" in settings:
            kwargs["listen_host"], kwargs["listen_port"] = parse_host_port(
                settings["listeners"], "listeners"
            )
        if "advertised.listeners" in settings:
            kwargs["advertised_host"], kwargs["advertised_port"] = parse_host_port(
                settings["advertised.listeners"], "advertised.listeners"
            )
            if kwargs["advertised_host"] == "0.0.0.0":
                raise ConfigError(
                    "invalid value for advertised.listeners: 0.0.0.0 is not a routable address"
                )
        elif kwargs.get("listen_host") in ("0.0.0.0", "::"):
            # Clients cannot connect to a wildcard: advertise the loopback name, as a
            # single-node dev broker would be used; set advertised.listeners otherwise.
            kwargs["advertised_host"] = "127.0.0.1" if kwargs["listen_host"] == "0.0.0.0" else "::1"
        if kwargs.get("broker_heartbeat_interval_ms", _d("broker.heartbeat.interval.ms")) >= \
                kwargs.get("broker_session_timeout_ms", _d("broker.session.timeout.ms")):
            raise ConfigError("broker.heartbeat.interval.ms must be below"
                              " broker.session.timeout.ms")
        if kwargs.get("replica_fetch_wait_max_ms", _d("replica.fetch.wait.max.ms")) > \
                kwargs.get("replica_socket_timeout_ms", _d("replica.socket.timeout.ms")):
            raise ConfigError("replica.fetch.wait.max.ms must not be above"
                              " replica.socket.timeout.ms")
        log_props = resolve_log_props(settings)
        return cls(
            **kwargs,
            raw=dict(settings),
            log_props=log_props,
            log_defaults=_build_log_defaults(log_props),
            unknown_keys=unknown,
        )

    # ------------------------------------------------------------------ dynamic configs

    def reconfigured(self, default: Mapping[str, str], per_broker: Mapping[str, str]
                     ) -> BrokerConfig:
        """The config these dynamic layers would give, checked as a start-up would check
        it (`ConfigError`, one line naming the key); changes nothing."""
        for layer in (default, per_broker):
            for key, value in layer.items():
                spec = dynamic_setting(key)
                if spec is None:
                    raise ConfigError(f"{key} is not a dynamic broker config")
                try:
                    spec.parse(value)
                except ConfigError as e:  # name the key as it was set (per listener)
                    raise ConfigError(str(e).replace(spec.name, key, 1)) from None
        return BrokerConfig.from_settings({**self.raw, **default, **per_broker},
                                          warn=lambda _msg: None)

    def reconfigure(self, default: Mapping[str, str], per_broker: Mapping[str, str]
                    ) -> set[str]:
        """Apply new dynamic layers in place; the dynamic keys whose effective value
        changed (`log.*` synonyms, `message.max.bytes`, ...: `log_defaults` is rebuilt).
        A key no layer sets any more goes back to its value at start-up."""
        new = self.reconfigured(default, per_broker)
        if self._static is None:  # the start-up values, for keys left unset later
            self._static = {s.field: getattr(self, s.field)
                            for k in DYNAMIC_BROKER_SETTINGS
                            if (s := BROKER_SETTINGS[k]).field is not None}
            self._static["log_props"] = self.log_props
            self._static["log_defaults"] = self.log_defaults
        layered = {**default, **per_broker}
        before = self.effective_values()
        for key in DYNAMIC_BROKER_SETTINGS:
            spec = BROKER_SETTINGS[key]
            if spec.field is not None:
                value = (getattr(new, spec.field) if key in layered
                         else self._static[spec.field])
                setattr(self, spec.field, value)
        if any(topic_config_for_broker_key(k) is not None for k in layered):
            self.log_props, self.log_defaults = new.log_props, new.log_defaults
        else:
            self.log_props = self._static["log_props"]
            self.log_defaults = self._static["log_defaults"]
        self.dynamic_default, self.dynamic_broker = dict(default), dict(per_broker)
        after = self.effective_values()
        return {k for k in set(before) | set(after) if before.get(k) != after.get(k)}

    def effective_values(self) -> dict[str, str]:
        """The dynamic keys set in some layer, with their effective value (the highest
        layer's): what DescribeConfigs shows for them."""
        out: dict[str, str] = {}
        for layer in (self.raw, self.dynamic_default, self.dynamic_broker):
            out.update({k: v for k, v in layer.items() if dynamic_setting(k) is not None})
        return out

    def effective_settings(self) -> dict[str, str]:
        """Every setting as given, with the dynamic layers over the static ones (what a
        part that reads raw settings, the listeners' TLS, must use after a change)."""
        return {**self.raw, **self.dynamic_default, **self.dynamic_broker}

    @property
    def message_max_bytes(self) -> int:
        """`message.max.bytes`: the broker-wide default of `max.message.bytes`."""
        return self.log_defaults.max_message_bytes

    @property
    def listen(self) -> str:
        return f"{self.listen_host}:{self.listen_port}"

    @property
    def advertised(self) -> str:
        return f"{self.advertised_host}:{self.advertised_port}"


def _with_listener_names(settings: Mapping[str, str]) -> dict[str, str]:
    """`--listen HOST:PORT` (and a bare `listeners=HOST:PORT`) is the PLAINTEXT listener:
    give such entries Kafka's `PLAINTEXT://` so every later reader sees one syntax."""
    out = dict(settings)
    for key in ("listeners", "advertised.listeners"):
        value = out.get(key)
        if value is None:
            continue
        items = [v.strip() for v in value.split(",") if v.strip()]
        out[key] = ",".join(v if "://" in v else f"PLAINTEXT://{v}" for v in items)
    return out


def resolve_log_props(settings: Mapping[str, str]) -> dict[str, str]:
    """Topic-config defaults from the broker settings that were set, Kafka's precedence."""
    return resolve_topic_defaults(settings)


def _build_log_defaults(log_props: Mapping[str, str]) -> LogConfig:
    from yak.errors import InvalidConfigurationError
    from yak.storage import TOPIC_CONFIG_DEFAULTS, LogConfig

    # Topic configs storage does not act on (e.g. preallocate from log.preallocate) are
    # accepted for compatibility but cannot change a log, so they are not passed on.
    known = {k: v for k, v in log_props.items() if k in TOPIC_CONFIG_DEFAULTS}
    try:
        return LogConfig.from_props(known)
    except InvalidConfigurationError as e:  # values were checked one by one: a combination
        raise ConfigError(f"invalid broker log setting: {e.message}") from None
