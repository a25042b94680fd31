"""The client side of Kafka security: one set of client settings for every Yak client.

Kafka's tools read client security from a properties file (`--command-config`), kcat and
librdkafka from `-X key=value`; both spellings are accepted here and mean the same thing:

    security.protocol=SASL_SSL                     PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    sasl.mechanism=SCRAM-SHA-512                   PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    sasl.username=alice / sasl.password=...        librdkafka's names
    sasl.jaas.config=...ScramLoginModule required username="alice" password="...";  (Java)
    ssl.ca.location=ca.pem                         librdkafka; Java: ssl.truststore.location
                                                   with ssl.truststore.type=PEM
    ssl.certificate.location / ssl.key.location    client certificate (mTLS); Java:
                                                   ssl.keystore.location (one PEM file)
    ssl.key.password, ssl.endpoint.identification.algorithm (https or none/empty)

`ClientSecurity.from_properties(props)` checks them (ValueError with one line naming the
key) and then speaks each client library's dialect: `librdkafka()` for confluent-kafka,
`kafka_python()` / `aiokafka()` keyword arguments, and, for Yak's own blocking client,
`ssl_context()` plus `sasl_exchange()` (the SASL tokens, sans-IO). Secrets never appear
in a repr or an error message.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import scramp

from yak.security.jaas import parse_jaas_config

__all__ = ["CLIENT_SECURITY_KEYS", "ClientSecurity", "SaslStep"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# Every key this module reads (the rest of a properties file is left to the caller).
CLIENT_SECURITY_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
    "sasl.password", "sasl.jaas.config", "ssl.ca.location", "ssl.truststore.location",
    "ssl.truststore.type", "ssl.truststore.certificates", "ssl.certificate.location",
    "ssl.key.location", "ssl.keystore.location", "ssl.keystore.type", "ssl.key.password",
    "ssl.keystore.password", "ssl.truststore.password",
    "ssl.endpoint.identification.algorithm",
})

# One step of a SASL exchange: given the server's last token (None first), the next one
# to send, or None when the exchange is complete.
SaslStep = Callable[[bytes | None], bytes | None]


@dataclass(frozen=True)
class ClientSecurity:
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    # ------------------------------------------------------------------ parsing

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        """Kafka (Java) or librdkafka client settings -> ClientSecurity; ValueError, one
        line naming the key, for anything unusable."""
        def get(key: str) -> str | None:
            v = props.get(key)
            return None if v is None else v.strip()

        proto = (get("security.protocol") or "PLAINTEXT").upper()
        if proto not in PROTOCOLS:
            raise ValueError(f"invalid value {proto!r} for security.protocol: expected one of "
                             + ", ".join(PROTOCOLS))
        mech = get("sasl.mechanism") or get("sasl.mechanisms")
        username, password = get("sasl.username"), props.get("sasl.password")
        jaas = props.get("sasl.jaas.config")
        if jaas:
            try:
                entries = parse_jaas_config(jaas, "sasl.jaas.config")
            except Exception as e:  # noqa: BLE001 - the parser's message names the key
                raise ValueError(str(e)) from None
            if len(entries) != 1:
                raise ValueError("invalid value for sasl.jaas.config: expected one login module")
            opts = entries[0].options
            username = username or opts.get("username")
            password = password if password is not None else opts.get("password")
        if not proto.startswith("SASL"):
            # The Java client only warns about an unused sasl.* setting and connects in the
            # clear: a forgotten security.protocol would then silently send no credentials.
            given = [k for k in ("sasl.mechanism", "sasl.mechanisms", "sasl.username",
                                 "sasl.jaas.config") if get(k)]
            if given:
                raise ValueError(f"{given[0]} is set but security.protocol is {proto}: "
                                 "set security.protocol=SASL_PLAINTEXT or SASL_SSL")
        if proto.startswith("SASL"):
            mech = (mech or "PLAIN").upper()
            if mech not in MECHANISMS:
                raise ValueError(f"invalid value {mech!r} for sasl.mechanism: Yak's clients "
                                 "support " + ", ".join(MECHANISMS))
            if not username or password is None:
                raise ValueError(f"security.protocol={proto} needs sasl.username and "
                                 "sasl.password (or a sasl.jaas.config with both)")
        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            t = get(key)
            if t is not None and t.upper() != "PEM":
                raise ValueError(f"invalid value {t!r} for {key}: only PEM files are read "
                                 "(convert with openssl)")
        def path(*keys: str) -> str | None:
            for k in keys:
                p = get(k)
                if p:
                    if not Path(p).is_file():
                        raise ValueError(f"invalid value for {k}: no such file {p}")
                    return p
            return None

        ca = path("ssl.ca.location", "ssl.truststore.location")
        cert = path("ssl.certificate.location", "ssl.keystore.location")
        key = path("ssl.key.location", "ssl.keystore.location") if cert else None
        algo = (get("ssl.endpoint.identification.algorithm") or "https").lower()
        if algo not in ("https", "none", ""):
            raise ValueError(f"invalid value {algo!r} for ssl.endpoint.identification.algorithm:"
                             " expected https or none")
        return cls(proto, mech if proto.startswith("SASL") else None, username, password, ca,
                   cert, key, props.get("ssl.key.password"), algo == "https")

    @classmethod
    def from_args(cls, command_config: str | None, overrides: list[str]) -> ClientSecurity:
        """`--command-config FILE` (a Java .properties file) then `-X key=value` (wins)."""
        return cls.from_properties(client_properties(command_config, overrides))

    @classmethod
    def for_inter_broker(cls, settings: Mapping[str, str], listeners: Any) -> ClientSecurity:
        """How a broker's own client (the embedded gateway) reaches it: on the inter-broker
        listener, with the broker's credentials as Kafka brokers use them -- the
        `username`/`password` of that listener's JAAS config for
        `sasl.mechanism.inter.broker.protocol` (else its first enabled mechanism), the
        truststore (else the keystore's CA) and, for mTLS, the keystore."""
        from yak.security.jaas import parse_jaas_config as parse
        from yak.security.settings import get_setting, lookup

        name = listeners.inter_broker_listener_name
        proto = listeners.inter_broker_security_protocol.name
        props: dict[str, str] = {"security.protocol": proto}
        if proto.startswith("SASL"):
            enabled = get_setting(settings, "sasl.enabled.mechanisms", name)
            mech = (settings.get("sasl.mechanism.inter.broker.protocol") or enabled[0]).upper()
            found = lookup(settings, "sasl.jaas.config", name, mech)
            opts = parse(found[1])[0].options if found else {}
            if "username" not in opts or "password" not in opts:
                raise ValueError(
                    f"listener {name} ({proto}) needs the broker's own credentials: "
                    f'username="..." password="..." in listener.name.{name.lower()}.'
                    f"{mech.lower()}.sasl.jaas.config")
            props.update({"sasl.mechanism": mech, "sasl.username": opts["username"],
                          "sasl.password": opts["password"]})
        if proto.endswith("SSL"):
            trust = get_setting(settings, "ssl.truststore.location", name)
            keystore = get_setting(settings, "ssl.keystore.location", name)
            if trust or keystore:
                props["ssl.ca.location"] = trust or keystore
            if keystore and get_setting(settings, "ssl.client.auth", name) != "none":
                props["ssl.certificate.location"] = props["ssl.key.location"] = keystore
            algo = get_setting(settings, "ssl.endpoint.identification.algorithm", name)
            props["ssl.endpoint.identification.algorithm"] = algo or "none"
        return cls.from_properties(props)

    # ------------------------------------------------------------------ dialects

    def librdkafka(self) -> dict[str, str]:
        """confluent-kafka / librdkafka configuration."""
        out = {"security.protocol": self.security_protocol.lower()}
        if self.uses_sasl:
            out.update({"sasl.mechanism": self.sasl_mechanism or "PLAIN",
                        "sasl.username": self.username or "",
                        "sasl.password": self.password or ""})
        if self.uses_tls:
            if self.ca_location:
                out["ssl.ca.location"] = self.ca_location
            if self.certificate_location:
                out["ssl.certificate.location"] = self.certificate_location
            if self.key_location:
                out["ssl.key.location"] = self.key_location
            if self.key_password is not None:
                out["ssl.key.password"] = self.key_password
            out["ssl.endpoint.identification.algorithm"] = (
                "https" if self.check_hostname else "none")
        return out

    def kafka_python(self) -> dict[str, Any]:
        """kafka-python keyword arguments (aiokafka takes the same names)."""
        out: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.uses_sasl:
            out.update({"sasl_mechanism": self.sasl_mechanism,
                        "sasl_plain_username": self.username,
                        "sasl_plain_password": self.password})
        if self.uses_tls:
            out["ssl_context"] = self.ssl_context()
        return out

    aiokafka = kafka_python

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context (None on plaintext protocols): the CA file (else the
        system's), the client certificate for mTLS, host-name checking unless disabled."""
        if not self.uses_tls:
            return None
        ctx = ssl.create_default_context(cafile=self.ca_location)
        ctx.check_hostname = self.check_hostname
        if self.certificate_location:
            ctx.load_cert_chain(self.certificate_location, self.key_location,
                                password=self.key_password)
        return ctx

    def sasl_exchange(self) -> SaslStep:
        """A fresh SASL client for one login (see `SaslStep`)."""
        if self.sasl_mechanism == "PLAIN":
            return _plain(self.username or "", self.password or "")
        return _scram(self.sasl_mechanism or "", self.username or "", self.password or "")


def _plain(user: str, password: str) -> SaslStep:
    sent = False

    def step(server: bytes | None) -> bytes | None:
        nonlocal sent
        if sent:
            return None
        sent = True
        return b"\0" + user.encode() + b"\0" + password.encode()

    return step


def _scram(mechanism: str, user: str, password: str) -> SaslStep:
    # Kafka escapes ',' and '=' in the SCRAM user name (RFC 5802 saslname).
    name = user.replace("=", "=3D").replace(",", "=2C")
    client = scramp.ScramClient([mechanism], name, password)
    stage = iter(_scram_stages(client))
    return lambda server: next(stage)(server)


def _scram_stages(client: Any) -> Iterator[Callable[[bytes | None], bytes | None]]:
    yield lambda _: client.get_client_first().encode()

    def final(server: bytes | None) -> bytes | None:
        client.set_server_first((server or b"").decode())
        return client.get_client_final().encode()

    yield final

    def verify(server: bytes | None) -> bytes | None:
        client.set_server_final((server or b"").decode())  # raises on a forged server
        return None

    yield verify


def client_properties(command_config: str | None, overrides: list[str]) -> dict[str, str]:
    """A Java .properties file, then `key=value` overrides; ValueError, one line."""
    from yak.config import ConfigError, read_config_file

    props: dict[str, str] = {}
    if command_config:
        try:
            props.update(read_config_file(command_config))
        except ConfigError as e:
            raise ValueError(str(e)) from None
    for item in overrides:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"invalid client setting {item!r}: expected key=value")
        props[k.strip()] = v.strip()
    return props


__all__ += ["client_properties"]
