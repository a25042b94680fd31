"""The security settings Yak reads, under Kafka's names, with Kafka's defaults.

Phase note: the project keeps every setting in ONE table (`yak.config.BROKER_SETTINGS`).
While that module is being reorganised these declarations live here, built from the same
`BrokerSetting` type; the integration phase moves this list into the table unchanged (and
this module then only keeps `get_setting`). Nothing else in `yak.security` declares a
default. `listeners`, `advertised.listeners` and `listener.security.protocol.map` are
already in the broker table and are not repeated here.

`get_setting` resolves Kafka's per-listener overrides: `listener.name.<listener>.<key>`
(listener name lowercased, as Kafka writes the prefix) wins over `<key>`, which wins over
the default. A bad value raises `ConfigError`, one line naming the key that held it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from yak.config import BrokerSetting, ConfigError

__all__ = ["SECURITY_SETTINGS", "SENSITIVE_SUFFIXES", "get_setting", "is_sensitive", "lookup"]

_B = BrokerSetting

SECURITY_SETTINGS: dict[str, BrokerSetting] = {
    s.name: s
    for s in [
        # listeners (the rest of the listener settings are in yak.config.BROKER_SETTINGS)
        _B(
            "inter.broker.listener.name",
            "string",
            None,
            doc="listener brokers use to talk to each other",
        ),
        _B(
            "security.inter.broker.protocol",
            "string",
            "PLAINTEXT",
            choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
            doc="inter-broker security protocol when inter.broker.listener.name is unset",
        ),
        # SASL
        _B(
            "sasl.enabled.mechanisms",
            "list",
            "GSSAPI",
            doc="SASL mechanisms offered on SASL listeners",
        ),
        _B(
            "sasl.mechanism.inter.broker.protocol",
            "string",
            "GSSAPI",
            doc="SASL mechanism brokers log in to each other with",
        ),
        _B(
            "sasl.server.max.receive.size",
            "int",
            "524288",
            lo=1,
            doc="largest SASL token accepted before authentication",
        ),
        _B(
            "connections.max.reauth.ms",
            "long",
            "0",
            lo=0,
            doc="KIP-368: a session must re-authenticate within this time (0: never)",
        ),
        _B(
            "connection.failed.authentication.delay.ms",
            "int",
            "100",
            lo=0,
            doc="delay before answering a failed login (slows password guessing)",
        ),
        _B(
            "principal.builder.class",
            "class",
            "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
            choices=(
                "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
            ),
            doc="only Kafka's default principal builder is implemented",
        ),
        _B(
            "sasl.jaas.config",
            "password",
            None,
            doc="JAAS login config; on a broker only as "
            "listener.name.<listener>.<mechanism>.sasl.jaas.config",
        ),
        # TLS
        _B("ssl.keystore.type", "string", "JKS", doc="only PEM is read by Yak"),
        _B(
            "ssl.keystore.location",
            "string",
            None,
            doc="PEM file: private key then certificate chain",
        ),
        _B("ssl.keystore.password", "password", None, doc="not used with PEM (Kafka's rule)"),
        _B("ssl.key.password", "password", None, doc="password of an encrypted PEM key"),
        _B("ssl.keystore.key", "password", None, doc="inline PEM private key"),
        _B("ssl.keystore.certificate.chain", "password", None, doc="inline PEM certificate chain"),
        _B("ssl.truststore.type", "string", "JKS", doc="only PEM is read by Yak"),
        _B("ssl.truststore.location", "string", None, doc="PEM file of trusted CAs"),
        _B("ssl.truststore.password", "password", None, doc="not used with PEM (Kafka's rule)"),
        _B("ssl.truststore.certificates", "password", None, doc="inline PEM trusted CAs"),
        _B(
            "ssl.client.auth",
            "string",
            "none",
            choices=("none", "requested", "required"),
            doc="ask for (requested) or demand (required) client certificates",
        ),
        _B("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3"),
        _B("ssl.protocol", "string", "TLSv1.3"),
        _B("ssl.cipher.suites", "list", "", doc="IANA or OpenSSL names; empty: defaults"),
        _B("ssl.principal.mapping.rules", "string", "DEFAULT"),
        _B(
            "ssl.endpoint.identification.algorithm",
            "string",
            "https",
            doc="client side: https verifies the broker's host name, empty does not",
        ),
        # authorization
        _B(
            "authorizer.class.name",
            "string",
            "",
            doc="org.apache.kafka.metadata.authorizer.StandardAuthorizer enables ACLs",
        ),
        _B("super.users", "string", None, doc="principals separated by ';'"),
        _B("allow.everyone.if.no.acl.found", "boolean", "false"),
        # quotas
        _B("quota.window.num", "int", "11", lo=1),
        _B("quota.window.size.seconds", "int", "1", lo=1),
        _B("controller.quota.window.num", "int", "11", lo=1),
        _B("controller.quota.window.size.seconds", "int", "1", lo=1),
    ]
}

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
        prefix = f"listener.name.{listener.lower()}."
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
    decl = SECURITY_SETTINGS.get(key)
    if decl is None:
        raise KeyError(f"{key} is not a security setting")
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
