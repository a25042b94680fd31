"""Reading the security settings, with Kafka's per-listener overrides.

The settings themselves (names, types, defaults) are declared in the one table,
`yak.settings.BROKER_SETTINGS` (part "security"); nothing in `yak.security` declares a
default.

`get_setting` resolves Kafka's per-listener overrides: `listener.name.<listener>.<key>`
(listener name lowercased, as Kafka writes the prefix) wins over `<key>`, which wins over
the default. A bad value raises `ConfigError`, one line naming the key that held it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from yak.settings import BROKER_SETTINGS, LISTENER_PREFIX, ConfigError

__all__ = ["SENSITIVE_SUFFIXES", "get_setting", "is_sensitive", "lookup"]

# A key ending in one of these is secret: never logged, null in DescribeConfigs (as Kafka).
SENSITIVE_SUFFIXES = (
    "sasl.jaas.config",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
)


def is_sensitive(key: str) -> bool:
    """True for settings whose value must never be shown (passwords, keys, JAAS configs)."""
    return key.endswith(SENSITIVE_SUFFIXES)


def lookup(
    settings: Mapping[str, str],
    key: str,
    listener: str | None = None,
    mechanism: str | None = None,
) -> tuple[str, str] | None:
    """(the key that was set, its raw value) or None; listener/mechanism overrides first."""
    if listener is not None:
        prefix = f"{LISTENER_PREFIX}{listener.lower()}."
        if mechanism is not None:
            k = f"{prefix}{mechanism.lower()}.{key}"
            if k in settings:
                return k, settings[k]
        k = prefix + key
        if k in settings:
            return k, settings[k]
    if key in settings:
        return key, settings[key]
    return None


def get_setting(
    settings: Mapping[str, str],
    key: str,
    listener: str | None = None,
    mechanism: str | None = None,
) -> Any:
    """The typed value of a security setting (override, then plain key, then default)."""
    decl = BROKER_SETTINGS.get(key)
    if decl is None:
        raise KeyError(f"{key} is not a broker setting")
    found = lookup(settings, key, listener, mechanism)
    if found is None:
        if decl.default is None:
            return None
        return decl.parse(decl.default)
    used_key, raw = found
    if used_key != key:
        decl = dataclasses.replace(decl, name=used_key)
    return decl.parse(raw)


__all__ += ["ConfigError"]
