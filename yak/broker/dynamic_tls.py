"""A listener's keystore re-read without a restart (issue 23's dynamic configs).

Why: certificates expire, and Kafka operators renew a broker's with
`kafka-configs --alter --entity-type brokers --entity-name N --add-config
listener.name.<l>.ssl.keystore.location=NEW`, no restart. Yak does the same: the new
keystore is loaded into the listener's live server `SSLContext`, so every new handshake
presents it while connections already open keep the one they negotiated.

The dynamic configs live in `yak.cluster.dynamic_config`, below the security layer, so the
composition hands it these two hooks: `check` (before the change is stored: the keystore
must load, the listener must exist and use TLS; ConfigError, one line) and `apply` (after
it is applied to the broker's config).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from yak.config import BrokerConfig
from yak.security.security_config import ListenerSecurity, SecurityConfig
from yak.settings import LISTENER_PREFIX, ConfigError

__all__ = ["ListenerKeystores"]

log = logging.getLogger(__name__)

_KEYSTORE = "ssl.keystore."


def _listeners(keys: set[str]) -> set[str]:
    """The listeners (lower case) whose keystore settings are among `keys`."""
    out = set()
    for k in keys:
        if k.startswith(LISTENER_PREFIX):
            listener, _, base = k[len(LISTENER_PREFIX):].partition(".")
            if base.startswith(_KEYSTORE):
                out.add(listener.lower())
    return out


class ListenerKeystores:
    """`check` and `apply` hooks of `DynamicBrokerConfigs` for the listeners' keystores."""

    def __init__(self, config: BrokerConfig, security: SecurityConfig) -> None:
        self.config = config
        self.security = security

    def _listener(self, name: str) -> ListenerSecurity:
        for listener_name, ls in self.security.by_listener.items():
            if listener_name.lower() == name:
                if ls.ssl_context is None:
                    raise ConfigError(f"listener {listener_name} does not use TLS: it has no"
                                      " keystore to change")
                return ls
        raise ConfigError(f"no listener named {name} on this broker")

    def check(self, settings: Mapping[str, str], keys: set[str]) -> None:
        from yak.security.tls import reload_keystore

        for name in _listeners(keys):
            self._listener(name)
            reload_keystore(settings, name)

    def apply(self, keys: set[str]) -> None:
        from yak.security.tls import reload_keystore

        settings = self.config.effective_settings()
        for name in sorted(_listeners(keys)):
            ls = self._listener(name)
            reload_keystore(settings, name, ls.ssl_context)
            log.info("listener %s: keystore re-read (new connections present it)", name)
