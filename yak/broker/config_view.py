"""Effective configs as Kafka reports them: value, source, synonyms, type, read-only.

Admin tools (`kafka-configs --describe`, AdminClient.describe_configs, UIs) show where a
value comes from — a topic override, the broker's `server.properties`, or a built-in
default — through the `config_source` and the synonym chain. Reproducing Kafka's chain
exactly (e.g. `retention.ms` <- `log.retention.ms` <- `log.retention.hours=168`) is what
lets those tools show Yak's configuration correctly without knowing it is not Kafka.
Dynamic broker configs (issue 23) are two more layers above the static settings
(`BrokerConfig.dynamic_broker`, `.dynamic_default`), shown with Kafka's sources.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import dropwhile

from yak.config import BrokerConfig
from yak.settings import (
    BROKER_SETTINGS,
    LISTENER_PREFIX,
    TOPIC_CONFIGS,
    dynamic_setting,
    topic_config_for_broker_key,
)

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


def _broker_chain(name: str) -> list[str]:
    """Kafka's `brokerSynonyms`: a `log.*` setting's whole chain in precedence order
    (`log.retention.ms`, `.minutes`, `.hours`), else the name alone."""
    found = topic_config_for_broker_key(name)
    return [n for n, _ in found[0].synonyms] if found is not None else [name]


def _layers(config: BrokerConfig, per_broker: bool) -> list[tuple[Mapping[str, str], int]]:
    """Where a broker setting's value can come from, highest first (Kafka's order)."""
    static = {k: v for k, v in config.raw.items()
              if k in BROKER_SETTINGS or k.startswith(LISTENER_PREFIX)}
    layers: list[tuple[Mapping[str, str], int]] = []
    if per_broker:
        layers.append((config.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG))
    layers += [(config.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
               (static, ConfigSource.STATIC_BROKER_CONFIG), (_BUILT_IN, ConfigSource.DEFAULT_CONFIG)]
    return layers


_BUILT_IN = {k: s.default for k, s in BROKER_SETTINGS.items() if s.default is not None}


def _chain_synonyms(chain: list[str], layers: list[tuple[Mapping[str, str], int]],
                    sensitive: bool = False) -> list[Synonym]:
    """Kafka's `configSynonyms`: by layer, then by the chain's order."""
    return [Synonym(n, None if sensitive else layer[n], source)
            for layer, source in layers for n in chain if n in layer]


def topic_entries(
    topic_configs: Mapping[str, str],
    config: BrokerConfig,
    keys: Iterable[str] | None = None,
) -> list[ConfigEntry]:
    """A topic's effective configs: override > broker `log.*` setting (dynamic for this
    broker, dynamic cluster default, static) > built-in default."""
    defaults = topic_config_defaults()
    names = sorted(set(defaults) | set(topic_configs))
    if keys:
        wanted = set(keys)
        names = [n for n in names if n in wanted]
    layers = _layers(config, per_broker=True)
    out: list[ConfigEntry] = []
    for name in names:
        synonyms: list[Synonym] = []
        if name in topic_configs:
            synonyms.append(Synonym(name, topic_configs[name], ConfigSource.TOPIC_CONFIG))
        chain = [b for b, _ in _synonyms(name)]
        broker = _chain_synonyms(chain, layers)
        synonyms += broker
        if not chain and name in defaults:
            synonyms.append(Synonym(name, defaults[name], ConfigSource.DEFAULT_CONFIG))
        if name in topic_configs:
            value, source = topic_configs[name], ConfigSource.TOPIC_CONFIG
        elif name in config.log_props:
            value = config.log_props[name]
            source = broker[0].source if broker else ConfigSource.STATIC_BROKER_CONFIG
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


def broker_entries(config: BrokerConfig, keys: Iterable[str] | None = None,
                   default_resource: bool = False) -> list[ConfigEntry]:
    """A BROKER resource's configs, as Kafka describes them.

    This broker (`default_resource` False): every setting, valued from the highest layer
    that sets it (this broker's dynamic configs, the cluster-wide dynamic default, the
    static settings, the built-in default); read-only unless the settings table marks it
    dynamic. The cluster-wide default resource (the empty name): only the dynamic defaults
    that are set, as Kafka lists them.

    Secrets (passwords, keys, JAAS configs) are sensitive: their value is null, as Kafka
    returns them. Per-listener settings (`listener.name.<l>.<key>`) that were set are
    listed too, like Kafka's."""
    from yak.security.settings import is_sensitive

    if default_resource:
        names = sorted(config.dynamic_default)
    else:
        listener_keys = [k for layer in (config.raw, config.dynamic_default,
                                         config.dynamic_broker)
                         for k in layer if k.startswith(LISTENER_PREFIX)]
        names = sorted(set(BROKER_SETTINGS) | set(listener_keys))
    if keys:
        wanted = set(keys)
        names = [n for n in names if n in wanted]
    layers = _layers(config, per_broker=not default_resource)
    out: list[ConfigEntry] = []
    for name in names:
        spec = BROKER_SETTINGS.get(name)
        sensitive = is_sensitive(name) or (spec is not None and spec.type == "password")
        synonyms = list(dropwhile(lambda s, n=name: s.name != n,
                                  _chain_synonyms(_broker_chain(name), layers, sensitive)))
        if synonyms:
            value, source = synonyms[0].value, synonyms[0].source
        else:
            value, source = None, ConfigSource.DEFAULT_CONFIG
        out.append(
            ConfigEntry(
                name=name,
                value=value,
                source=source,
                read_only=dynamic_setting(name) is None,
                type=(_TYPE_CODES.get(spec.type, ConfigType.UNKNOWN) if spec
                      else ConfigType.PASSWORD if sensitive else ConfigType.STRING),
                synonyms=tuple(synonyms),
                documentation=(spec.doc or None) if spec else None,
                is_sensitive=sensitive,
            )
        )
    return out
