"""How `yak serve` and `yak gateway` turn their security options into gateway settings.

Kept out of the CLI so both commands read the options the same way, and importable
without FastAPI or grpcio (both commands check options before anything starts).

- HTTPS (`--http-tls`) takes Kafka's server TLS settings, read by the same code as a
  broker listener (`yak.security.tls.build_server_context`): `ssl.keystore.type=PEM`,
  `ssl.keystore.location` (or `ssl.keystore.key` + `ssl.keystore.certificate.chain`),
  `ssl.key.password`, `ssl.truststore.location` and `ssl.client.auth` for client
  certificates, `ssl.enabled.protocols`, `ssl.cipher.suites`.
- `--http-auth basic` / `--grpc-auth basic` log callers in to the cluster with SASL
  (`--auth-mechanism`, SCRAM-SHA-512 by default): `yak gateway` at its `--bootstrap` with
  its own client security's protocol and TLS trust (so it must be SASL_PLAINTEXT or
  SASL_SSL), `yak serve` on one of its own listeners that takes that mechanism (the
  inter-broker listener when it does, else the first such listener in `listeners`).
- `--grpc-auth mtls` maps the gRPC client certificate to a principal with the TLS
  settings' `ssl.principal.mapping.rules`; it needs client certificates required
  (`ssl.client.auth=required`).
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Callable, Mapping
from typing import Any

HTTP_AUTH_MODES = ("none", "basic")
GRPC_AUTH_MODES = ("none", "basic", "mtls")
DEFAULT_MECHANISM = "SCRAM-SHA-512"


def check_modes(http_auth: str, grpc_auth: str, mechanism: str) -> tuple[str, str, str]:
    """Normalised (http_auth, grpc_auth, mechanism); ValueError naming the bad option."""
    from yak.security.client import MECHANISMS

    h, g, m = http_auth.lower(), grpc_auth.lower(), mechanism.upper()
    if h not in HTTP_AUTH_MODES:
        raise ValueError(f"--http-auth: expected one of {', '.join(HTTP_AUTH_MODES)}, "
                         f"got {http_auth!r}")
    if g not in GRPC_AUTH_MODES:
        raise ValueError(f"--grpc-auth: expected one of {', '.join(GRPC_AUTH_MODES)}, "
                         f"got {grpc_auth!r}")
    if m not in MECHANISMS:
        raise ValueError(f"--auth-mechanism: expected one of {', '.join(MECHANISMS)}, "
                         f"got {mechanism!r}")
    return h, g, m


def server_tls(settings: Mapping[str, str]) -> ssl.SSLContext:
    """The HTTPS context from Kafka's ssl.* server settings (ConfigError naming the key)."""
    from yak.security.tls import build_server_context

    return build_server_context(settings)


def principal_mapper(settings: Mapping[str, str]) -> Any:
    """`ssl.principal.mapping.rules` of these settings (ConfigError for a bad rule)."""
    from yak.security.settings import get_setting
    from yak.security.tls import SslPrincipalMapper

    return SslPrincipalMapper.from_rules(get_setting(settings, "ssl.principal.mapping.rules"))


def require_client_certificates(settings: Mapping[str, str]) -> None:
    """`--grpc-auth mtls` needs every caller to present a certificate."""
    from yak.security.settings import get_setting

    if get_setting(settings, "ssl.client.auth") != "required":
        raise ValueError("--grpc-auth mtls needs client certificates: "
                         "ssl.client.auth=required (and ssl.truststore.location)")


def gateway_login(bootstrap: str, security: Any, mechanism: str) -> Any:
    """`yak gateway`: users log in where the gateway does, over its protocol and TLS."""
    from yak.gateway.core.callers import UserLogin
    from yak.security.client import ClientSecurity

    security = security or ClientSecurity()
    if not security.uses_sasl:
        raise ValueError("--http-auth/--grpc-auth basic log users in to the cluster with "
                         "SASL: the gateway's own connection must be security.protocol="
                         f"SASL_PLAINTEXT or SASL_SSL, not {security.security_protocol}")
    base = dataclasses.replace(security, username=None, password=None)
    return UserLogin(bootstrap, base, mechanism)


def broker_login(settings: Mapping[str, str], security_config: Any,
                 bootstrap_of: Callable[[str], str], mechanism: str) -> Any:
    """`yak serve`: users log in on a listener of this broker that takes `mechanism`."""
    from yak.gateway.core.callers import UserLogin
    from yak.security.client import ClientSecurity
    from yak.security.settings import get_setting

    listeners = security_config.listeners
    names = [listeners.inter_broker_listener_name] + [
        ep.listener_name for ep in listeners.listeners
        if ep.listener_name != listeners.inter_broker_listener_name]
    for name in names:
        ls = security_config.by_listener.get(name)
        if ls is None or ls.sasl is None or mechanism not in ls.sasl.enabled_mechanisms:
            continue
        if listeners.advertised_for(name) is None:
            continue
        proto = ls.endpoint.security_protocol.name
        ca = check = None
        if proto == "SASL_SSL":
            trust = get_setting(settings, "ssl.truststore.location", name)
            keystore = get_setting(settings, "ssl.keystore.location", name)
            ca = trust or keystore
            algo = get_setting(settings, "ssl.endpoint.identification.algorithm", name)
            check = (algo or "").lower() == "https"
        base = ClientSecurity(proto, mechanism, ca_location=ca, check_hostname=bool(check))
        return UserLogin(bootstrap_of(name), base, mechanism)
    raise ValueError(f"--http-auth/--grpc-auth basic log users in with {mechanism}, which no "
                     "advertised SASL listener of this broker enables (sasl.enabled.mechanisms;"
                     " or choose another --auth-mechanism)")


__all__ = ["GRPC_AUTH_MODES", "HTTP_AUTH_MODES", "broker_login", "check_modes",
           "gateway_login", "principal_mapper", "require_client_certificates", "server_tls"]
