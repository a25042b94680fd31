"""Effective configs as Kafka reports them: value, source, synonyms, type, read-only.

Admin tools (`kafka-configs --describe`, AdminClient.describe_configs, UIs) show where a
value comes from — a topic override, the broker's `server.properties`, or a built-in
default — through the `config_source` and the synonym chain. Reproducing Kafka's chain
exactly (e.g. `retention.ms` <- `log.retention.ms` <- `log.retention.hours=168`) is what
lets those tools show Yak's configuration correctly without knowing it is not Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from yak.config import BrokerConfig
from yak.settings import BROKER_SETTINGS, LISTENER_PREFIX, TOPIC_CONFIGS

__all__ = [
    "ConfigEntry",
    "ConfigSource",
    "ConfigType",
    "ResourceType",
    "broker_entries",
    "topic_config_defaults",
    "topic_config_type",
    "topic_entries",
]


class ResourceType:
    """`ConfigResource.Type` codes on the wire."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigSource:
    """`DescribeConfigsResponse.ConfigSource` codes."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType:
    """`DescribeConfigsResponse.ConfigType` codes (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


_TYPE_CODES = {
    "boolean": ConfigType.BOOLEAN,
    "string": ConfigType.STRING,
    "int": ConfigType.INT,
    "short": ConfigType.SHORT,
    "long": ConfigType.LONG,
    "double": ConfigType.DOUBLE,
    "list": ConfigType.LIST,
    "class": ConfigType.CLASS,
    "password": ConfigType.PASSWORD,
}

# The only topic configs whose values are lists (IncrementalAlterConfigs APPEND/SUBTRACT).
LIST_TOPIC_CONFIGS = frozenset(k for k, spec in TOPIC_CONFIGS.items() if spec.type == "list")


def topic_config_type(name: str) -> str:
    spec = TOPIC_CONFIGS.get(name)
    return "string" if spec is None else spec.type


def _as_string(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(v) for v in value)
    return str(value)


def topic_config_defaults() -> dict[str, str | None]:
    """Every topic config storage knows, with its built-in default as a string."""
    from yak.storage import TOPIC_CONFIG_DEFAULTS

    return {k: _as_string(v) for k, v in TOPIC_CONFIG_DEFAULTS.items()}


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool
    type: int
    synonyms: tuple[Synonym, ...] = field(default=())
    documentation: str | None = None
    is_sensitive: bool = False


def _synonyms(topic_key: str) -> tuple[tuple[str, int], ...]:
    spec = TOPIC_CONFIGS.get(topic_key)
    return () if spec is None else spec.synonyms


def _broker_default_synonym(topic_key: str) -> Synonym | None:
    """The broker setting whose built-in default is the topic default (Kafka's last synonym)."""
    for broker_key, _ in _synonyms(topic_key):
        spec = BROKER_SETTINGS.get(broker_key)
        if spec is not None and spec.default is not None:
            return Synonym(broker_key, spec.default, ConfigSource.DEFAULT_CONFIG)
    return None


def topic_entries(
    topic_configs: Mapping[str, str],
    config: BrokerConfig,
    keys: Iterable[str] | None = None,
) -> list[ConfigEntry]:
    """A topic's effective configs: override > broker `log.*` setting > default."""
    defaults = topic_config_defaults()
    names = sorted(set(defaults) | set(topic_configs))
    if keys:
        wanted = set(keys)
        names = [n for n in names if n in wanted]
    out: list[ConfigEntry] = []
    for name in names:
        synonyms: list[Synonym] = []
        if name in topic_configs:
            synonyms.append(Synonym(name, topic_configs[name], ConfigSource.TOPIC_CONFIG))
        for broker_key, _ in _synonyms(name):
            if broker_key in config.raw:
                synonyms.append(
                    Synonym(broker_key, config.raw[broker_key], ConfigSource.STATIC_BROKER_CONFIG)
                )
        default_syn = _broker_default_synonym(name)
        if default_syn is not None:
            synonyms.append(default_syn)
        elif name in defaults:
            synonyms.append(Synonym(name, defaults[name], ConfigSource.DEFAULT_CONFIG))
        if name in topic_configs:
            value, source = topic_configs[name], ConfigSource.TOPIC_CONFIG
        elif name in config.log_props:
            value, source = config.log_props[name], ConfigSource.STATIC_BROKER_CONFIG
        else:
            value, source = defaults.get(name), ConfigSource.DEFAULT_CONFIG
        out.append(
            ConfigEntry(
                name=name,
                value=value,
                source=source,
                read_only=False,
                type=_TYPE_CODES[topic_config_type(name)],
                synonyms=tuple(synonyms),
            )
        )
    return out


def broker_entries(config: BrokerConfig, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """The broker's settings. All read-only: Yak has no dynamic broker configs (yet).

    Secrets (passwords, keys, JAAS configs) are sensitive: their value is null, as Kafka
    returns them. Per-listener settings (`listener.name.<l>.<key>`) that were set are
    listed too, like Kafka's."""
    from yak.security.settings import is_sensitive

    listener_keys = [k for k in config.raw if k.startswith(LISTENER_PREFIX)]
    names = sorted(set(BROKER_SETTINGS) | set(listener_keys))
    if keys:
        wanted = set(keys)
        names = [n for n in names if n in wanted]
    out: list[ConfigEntry] = []
    for name in names:
        spec = BROKER_SETTINGS.get(name)
        sensitive = is_sensitive(name) or (spec is not None and spec.type == "password")
        synonyms: list[Synonym] = []
        if name in config.raw:
            value, source = config.raw[name], ConfigSource.STATIC_BROKER_CONFIG
            synonyms.append(Synonym(name, None if sensitive else value, source))
        else:
            value, source = (spec.default if spec else None), ConfigSource.DEFAULT_CONFIG
        if spec is not None and spec.default is not None:
            synonyms.append(Synonym(name, None if sensitive else spec.default,
                                    ConfigSource.DEFAULT_CONFIG))
        if sensitive:
            value = None
        out.append(
            ConfigEntry(
                name=name,
                value=value,
                source=source,
                read_only=True,
                type=(_TYPE_CODES.get(spec.type, ConfigType.UNKNOWN) if spec
                      else ConfigType.PASSWORD if sensitive else ConfigType.STRING),
                synonyms=tuple(synonyms),
                documentation=(spec.doc or None) if spec else None,
                is_sensitive=sensitive,
            )
        )
    return out
