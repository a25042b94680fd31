"""Broker settings under Apache Kafka's own names.

Operators bring their `server.properties` habits (and files) with them, so Yak reads
the same keys (`num.partitions`, `log.retention.hours`, `message.max.bytes`, ...) from a
`.properties` or `.toml` file plus `--set key=value` overrides. Like Kafka, an unknown key
is only a warning (files are shared between versions and tools), while a bad value for a
known key is fatal: starting a broker with a silently wrong retention loses data.

Topic configs (`retention.ms`, `segment.bytes`, ...) have broker-level synonyms
(`log.retention.ms`, `log.segment.bytes`, ...) that set the default of every topic; they
are resolved here into `log_defaults`, the base `LogConfig` for topics without overrides.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from yak.storage import LogConfig

__all__ = [
    "BROKER_SETTINGS",
    "TOPIC_SYNONYMS",
    "BrokerConfig",
    "BrokerSetting",
    "ConfigError",
    "parse_host_port",
    "parse_properties",
    "read_config_file",
]

LONG_MAX = 9223372036854775807


class ConfigError(ValueError):
    """A setting that cannot be used; the message is one line naming the key."""


# --------------------------------------------------------------------------- value types


def _parse_int(key: str, value: str, lo: int | None, hi: int | None) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise ConfigError(f"invalid value {value!r} for {key}: expected an integer") from None
    if lo is not None and n < lo:
        raise ConfigError(f"invalid value {value!r} for {key}: must be at least {lo}")
    if hi is not None and n > hi:
        raise ConfigError(f"invalid value {value!r} for {key}: must be at most {hi}")
    return n


def _parse_bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v == "true":
        return True
    if v == "false":
        return False
    raise ConfigError(f"invalid value {value!r} for {key}: expected true or false")


def _parse_double(key: str, value: str, lo: float | None, hi: float | None) -> float:
    try:
        x = float(value.strip())
    except ValueError:
        raise ConfigError(f"invalid value {value!r} for {key}: expected a number") from None
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise ConfigError(f"invalid value {value!r} for {key}: must be in [{lo}, {hi}]")
    return x


@dataclass(frozen=True)
class BrokerSetting:
    """One broker setting Yak knows: its Kafka type and default, as DescribeConfigs reports.

    `field` names the `BrokerConfig` attribute it fills (None: accepted for compatibility
    or consumed elsewhere, e.g. a `log.*` synonym feeding `log_defaults`).
    """

    name: str
    type: str  # Kafka's ConfigType: boolean, string, int, short, long, double, list, password
    default: str | None
    field: str | None = None
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    doc: str = ""

    def parse(self, value: str) -> Any:
        """Validate `value` (a string as written in the file) and return the typed value."""
        if self.type in ("int", "short", "long"):
            hi = self.hi if self.hi is not None else (2**31 - 1 if self.type == "int" else LONG_MAX)
            return _parse_int(
                self.name,
                value,
                int(self.lo) if self.lo is not None else None,
                int(hi),
            )
        if self.type == "boolean":
            return _parse_bool(self.name, value)
        if self.type == "double":
            return _parse_double(self.name, value, self.lo, self.hi)
        if self.choices:
            if value.strip() not in self.choices:
                raise ConfigError(
                    f"invalid value {value!r} for {self.name}: expected one of "
                    + ", ".join(self.choices)
                )
            return value.strip()
        if self.type == "list":
            return [v.strip() for v in value.split(",") if v.strip()]
        return value


def _s(
    name: str,
    type_: str,
    default: str | None,
    field_: str | None = None,
    *,
    lo: float | None = None,
    hi: float | None = None,
    choices: tuple[str, ...] = (),
    doc: str = "",
) -> BrokerSetting:
    return BrokerSetting(name, type_, default, field_, lo, hi, choices, doc)


_CLEANUP = ("delete", "compact", "compact,delete", "delete,compact")
_COMPRESSION = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
_TS_TYPE = ("CreateTime", "LogAppendTime")

# Every broker setting Yak understands. Defaults are Kafka 4.x's, written as Kafka's
# DescribeConfigs shows them, so `kafka-configs --describe --all` looks the same.
BROKER_SETTINGS: dict[str, BrokerSetting] = {
    s.name: s
    for s in [
        _s("node.id", "int", "1", "node_id", lo=0, doc="id of this broker in the cluster"),
        _s("broker.id", "int", "1", "node_id", lo=0, doc="legacy synonym of node.id"),
        _s("log.dirs", "string", None, doc="data directory (first entry used)"),
        _s("log.dir", "string", "./yak-data", doc="data directory if log.dirs is unset"),
        _s("listeners", "string", "PLAINTEXT://127.0.0.1:9092", doc="HOST:PORT to accept on"),
        _s("advertised.listeners", "string", None, doc="HOST:PORT given to clients"),
        _s("num.partitions", "int", "1", "num_partitions", lo=1),
        _s(
            "default.replication.factor",
            "int",
            "1",
            "default_replication_factor",
            lo=1,
            hi=32767,
        ),
        _s("auto.create.topics.enable", "boolean", "true", "auto_create_topics_enable"),
        _s("delete.topic.enable", "boolean", "true"),
        _s("message.max.bytes", "int", "1048588", "message_max_bytes", lo=0),
        _s("socket.request.max.bytes", "int", "104857600", "socket_request_max_bytes", lo=1),
        _s(
            "group.initial.rebalance.delay.ms",
            "int",
            "3000",
            "group_initial_rebalance_delay_ms",
            lo=0,
        ),
        _s("group.min.session.timeout.ms", "int", "6000", "group_min_session_timeout_ms", lo=0),
        _s(
            "group.max.session.timeout.ms",
            "int",
            "1800000",
            "group_max_session_timeout_ms",
            lo=0,
        ),
        _s("offsets.retention.minutes", "int", "10080", "offsets_retention_minutes", lo=1),
        _s(
            "offsets.topic.num.partitions",
            "int",
            "50",
            "offsets_topic_num_partitions",
            lo=1,
        ),
        _s("offsets.topic.replication.factor", "short", "3", lo=1),
        _s("offsets.topic.segment.bytes", "int", "104857600", lo=1),
        _s("offsets.commit.timeout.ms", "int", "5000", lo=1),
        _s(
            "offsets.retention.check.interval.ms",
            "long",
            "600000",
            "offsets_retention_check_interval_ms",
            lo=1,
        ),
        _s("offset.metadata.max.bytes", "int", "4096", "offset_metadata_max_bytes", lo=0),
        _s("group.max.size", "int", "2147483647", "group_max_size", lo=1),
        _s("transaction.state.log.num.partitions", "int", "50", lo=1),
        _s("transaction.state.log.replication.factor", "short", "3", lo=1),
        _s("transaction.state.log.min.isr", "int", "2", lo=1),
        _s("transactional.id.expiration.ms", "int", "604800000", lo=1),
        _s("transaction.max.timeout.ms", "int", "900000", lo=1),
        _s("producer.id.expiration.ms", "int", "86400000", lo=1),
        _s(
            "log.retention.check.interval.ms",
            "long",
            "300000",
            "log_retention_check_interval_ms",
            lo=1,
        ),
        _s("log.flush.scheduler.interval.ms", "long", str(LONG_MAX), lo=0),
        _s("log.flush.offset.checkpoint.interval.ms", "int", "60000", lo=0),
        _s("num.network.threads", "int", "3", lo=1, doc="accepted; Yak uses one event loop"),
        _s("num.io.threads", "int", "8", lo=1, doc="accepted; Yak uses one event loop"),
        _s("num.recovery.threads.per.data.dir", "int", "2", lo=1),
        _s("socket.send.buffer.bytes", "int", "102400"),
        _s("socket.receive.buffer.bytes", "int", "102400"),
        _s("process.roles", "list", "broker,controller"),
        _s("controller.quorum.voters", "list", ""),
        _s("controller.listener.names", "list", ""),
        _s("listener.security.protocol.map", "string", ""),
        _s("inter.broker.listener.name", "string", "PLAINTEXT"),
        # log.* synonyms of topic configs: the default of every topic.
        _s("log.segment.bytes", "int", "1073741824", lo=14),
        _s("log.roll.ms", "long", None, lo=1),
        _s("log.roll.hours", "int", "168", lo=1),
        _s("log.roll.jitter.ms", "long", None, lo=0),
        _s("log.roll.jitter.hours", "int", "0", lo=0),
        _s("log.index.size.max.bytes", "int", "10485760", lo=4),
        _s("log.index.interval.bytes", "int", "4096", lo=0),
        _s("log.flush.interval.messages", "long", str(LONG_MAX), lo=1),
        _s("log.flush.interval.ms", "long", None, lo=0),
        _s("log.retention.bytes", "long", "-1"),
        _s("log.retention.ms", "long", None, lo=-1),
        _s("log.retention.minutes", "int", None, lo=-1),
        _s("log.retention.hours", "int", "168", lo=-1),
        _s("log.cleanup.policy", "list", "delete", choices=_CLEANUP),
        _s("log.cleaner.enable", "boolean", "true"),
        _s("log.cleaner.delete.retention.ms", "long", "86400000", lo=0),
        _s("log.cleaner.min.compaction.lag.ms", "long", "0", lo=0),
        _s("log.cleaner.max.compaction.lag.ms", "long", str(LONG_MAX), lo=1),
        _s("log.cleaner.min.cleanable.ratio", "double", "0.5", lo=0, hi=1),
        _s("log.segment.delete.delay.ms", "long", "60000", lo=0),
        _s("log.preallocate", "boolean", "false"),
        _s(
            "log.message.timestamp.type",
            "string",
            "CreateTime",
            choices=_TS_TYPE,
        ),
        _s(
            "log.message.timestamp.before.max.ms",
            "long",
            str(LONG_MAX),
            lo=0,
        ),
        _s("log.message.timestamp.after.max.ms", "long", str(LONG_MAX), lo=0),
        _s("min.insync.replicas", "int", "1", lo=1),
        _s("compression.type", "string", "producer", choices=_COMPRESSION),
        _s("unclean.leader.election.enable", "boolean", "false"),
    ]
}

# Topic config -> broker synonyms in Kafka's precedence order, each with the factor that
# turns the broker value into the topic config's unit (hours -> ms and so on).
TOPIC_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "retention.bytes": (("log.retention.bytes", 1),),
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ),
    "max.message.bytes": (("message.max.bytes", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "preallocate": (("log.preallocate", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "message.timestamp.before.max.ms": (("log.message.timestamp.before.max.ms", 1),),
    "message.timestamp.after.max.ms": (("log.message.timestamp.after.max.ms", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "compression.type": (("compression.type", 1),),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
}


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
    v = value.split(",")[0].strip()
    if "://" in v:
        v = v.split("://", 1)[1]
    if v.startswith("["):
        host, sep, port = v[1:].partition("]:")
    else:
        host, sep, port = v.rpartition(":")
    if not sep or not port:
        raise ConfigError(f"invalid value {value!r} for {key}: expected HOST:PORT")
    port_n = _parse_int(key, port, 0, 65535)
    return (host or "0.0.0.0"), port_n


def _parse_override(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"invalid setting {item!r}: expected key=value")
    return key.strip(), value.strip()


def _stderr_warning(msg: str) -> None:
    print(f"yak: warning: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- BrokerConfig


@dataclass
class BrokerConfig:
    """The broker's settings, typed. `raw` keeps every setting exactly as given."""

    node_id: int = 1
    data_dir: Path = field(default_factory=lambda: Path("./yak-data"))
    listen_host: str = "127.0.0.1"
    listen_port: int = 9092
    advertised_host: str = ""
    advertised_port: int = 0
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    message_max_bytes: int = 1048588
    socket_request_max_bytes: int = 104857600
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    offsets_retention_minutes: int = 10080
    # Kafka's default is 50; Yak honours the setting, and the group coordinator may
    # choose fewer partitions for a one-broker cluster (see its docs).
    offsets_topic_num_partitions: int = 50
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    group_max_size: int = 2147483647
    log_retention_check_interval_ms: int = 300000
    log_defaults: LogConfig = None  # type: ignore[assignment]  # filled by __post_init__
    raw: dict[str, str] = field(default_factory=dict)
    # Topic-config-name -> value derived from the broker's `log.*` synonyms that were
    # actually set (what DescribeConfigs reports as STATIC_BROKER_CONFIG).
    log_props: dict[str, str] = field(default_factory=dict)
    unknown_keys: list[str] = field(default_factory=list)

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
        for key, value in settings.items():
            spec = BROKER_SETTINGS.get(key)
            if spec is None:
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
            first = dirs.split(",")[0].strip()
            if not first:
                raise ConfigError(f"invalid value {dirs!r} for log.dirs: empty path")
            kwargs["data_dir"] = Path(first)
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
        if kwargs.get("group_min_session_timeout_ms", 6000) > kwargs.get(
            "group_max_session_timeout_ms", 1800000
        ):
            raise ConfigError(
                "invalid value for group.min.session.timeout.ms: "
                "greater than group.max.session.timeout.ms"
            )
        log_props = resolve_log_props(settings)
        return cls(
            **kwargs,
            raw=dict(settings),
            log_props=log_props,
            log_defaults=_build_log_defaults(log_props),
            unknown_keys=unknown,
        )

    @property
    def listen(self) -> str:
        return f"{self.listen_host}:{self.listen_port}"

    @property
    def advertised(self) -> str:
        return f"{self.advertised_host}:{self.advertised_port}"


def resolve_log_props(settings: Mapping[str, str]) -> dict[str, str]:
    """Topic-config defaults from the broker settings that were set, Kafka's precedence."""
    out: dict[str, str] = {}
    for topic_key, synonyms in TOPIC_SYNONYMS.items():
        for broker_key, factor in synonyms:
            if broker_key in settings:
                value = settings[broker_key].strip()
                if factor != 1:
                    n = int(value)
                    value = str(n * factor if n >= 0 else -1)
                out[topic_key] = value
                break
    return out


def _build_log_defaults(log_props: Mapping[str, str]) -> LogConfig:
    from yak.errors import InvalidConfigurationError
    from yak.storage import TOPIC_CONFIG_DEFAULTS, LogConfig

    # Broker settings storage does not implement (e.g. log.preallocate) are accepted for
    # compatibility but cannot change a log, so they are not passed on.
    known = {k: v for k, v in log_props.items() if k in TOPIC_CONFIG_DEFAULTS}
    try:
        return LogConfig.from_props(known)
    except InvalidConfigurationError as e:
        raise ConfigError(f"invalid broker log setting: {e.message}") from None
