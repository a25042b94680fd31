"""Every security setting checked at start-up, in one call the composition makes.

`SecurityConfig.from_settings(settings)` parses the listeners and, for each listener, what
its protocol needs: an `ssl.SSLContext` (SSL, SASL_SSL), a `SaslListenerConfig` (SASL_*),
and the principal mapper for client certificates; plus whether an authorizer is enabled.
Any unusable value raises `ConfigError`, one line naming the key, so `yak serve` can stop
with exit 2 before opening a port. Secrets are never part of a message or a repr.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from yak.security.authorizer import AUTHORIZER_CLASS_NAMES
from yak.security.listeners import Endpoint, ListenerConfig, parse_listeners
from yak.security.principal import parse_super_users
from yak.security.sasl import SaslListenerConfig
from yak.security.settings import get_setting
from yak.security.ssl_principal import SslPrincipalMapper
from yak.settings import ConfigError

__all__ = ["ListenerSecurity", "SecurityConfig"]


@dataclass(frozen=True)
class ListenerSecurity:
    endpoint: Endpoint
    ssl_context: ssl.SSLContext | None  # for SSL and SASL_SSL
    sasl: SaslListenerConfig | None  # for SASL_PLAINTEXT and SASL_SSL
    principal_mapper: SslPrincipalMapper | None  # for SSL (client certificates)


@dataclass(frozen=True)
class SecurityConfig:
    listeners: ListenerConfig
    by_listener: Mapping[str, ListenerSecurity]
    authorizer_enabled: bool
    failed_authentication_delay_ms: int
    warnings: tuple[str, ...]

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> SecurityConfig:
        lc = parse_listeners(settings)
        by: dict[str, ListenerSecurity] = {}
        for ep in lc.listeners:
            name = ep.listener_name
            sp = ep.security_protocol
            ctx = None
            if sp.uses_tls:
                # Key material needs `cryptography` (~7.5 MB resident, ~50 ms to import):
                # imported only by a broker that has a TLS listener.
                from yak.security.tls import build_server_context

                ctx = build_server_context(settings, name)
            sasl = SaslListenerConfig.from_settings(settings, name) if sp.uses_sasl else None
            mapper = (
                SslPrincipalMapper.from_rules(
                    get_setting(settings, "ssl.principal.mapping.rules", name)
                )
                if sp.uses_tls
                else None
            )
            by[name] = ListenerSecurity(ep, ctx, sasl, mapper)

        ib = by.get(lc.inter_broker_listener_name)
        if "sasl.mechanism.inter.broker.protocol" in settings and ib is not None and ib.sasl:
            mech = get_setting(settings, "sasl.mechanism.inter.broker.protocol")
            if mech not in ib.sasl.enabled_mechanisms:
                raise ConfigError(
                    "sasl.mechanism.inter.broker.protocol must be included in "
                    "sasl.enabled.mechanisms when SASL is used for inter-broker communication"
                )

        cls_name = get_setting(settings, "authorizer.class.name") or ""
        if cls_name and cls_name not in AUTHORIZER_CLASS_NAMES:
            raise ConfigError(
                f"invalid value {cls_name!r} for authorizer.class.name: Yak implements "
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer (or yak.StandardAuthorizer)"
            )
        try:
            parse_super_users(get_setting(settings, "super.users"))
        except ValueError as e:
            raise ConfigError(str(e)) from None
        get_setting(settings, "allow.everyone.if.no.acl.found")
        get_setting(settings, "principal.builder.class")
        for k in (
            "quota.window.num",
            "quota.window.size.seconds",
            "controller.quota.window.num",
            "controller.quota.window.size.seconds",
        ):
            get_setting(settings, k)
        return cls(
            listeners=lc,
            by_listener=by,
            authorizer_enabled=bool(cls_name),
            failed_authentication_delay_ms=get_setting(
                settings, "connection.failed.authentication.delay.ms"
            ),
            warnings=lc.warnings,
        )
