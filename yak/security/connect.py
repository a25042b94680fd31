"""Connections to a broker, with TLS and logged in as a `ClientSecurity` says.

The connection itself is `yak.wire.KafkaConnection` (the one Kafka client stack inside
Yak: framing, correlation ids, pipelining, timeouts); this module gives it what the
security layer knows: the TLS context and the SASL login (`dialer`). The composition hands
a broker's `Dialer` to the replica fetchers and the inter-broker client (cluster layer,
which only takes one); the edges (the gateway checking a caller's password with one real
login, the schema registry's election) use it as `yak.client.aio`. The SASL exchange
itself (the tokens) is `ClientSecurity.sasl_exchange()`, sans-IO in
`yak.security.client`; this module drives SaslHandshake/SaslAuthenticate over the
connection's requests.
"""

from __future__ import annotations

import asyncio
import ssl
from functools import partial
from typing import Any

from yak.security.client import ClientSecurity
from yak.wire import Call, Dialer, KafkaConnection

__all__ = ["connection", "dialer", "login", "open_connection"]


async def login(call: Call, security: ClientSecurity) -> None:
    """Log a new connection in, as Kafka's clients do: SaslHandshake v1, then
    SaslAuthenticate v1 until the mechanism is done (nothing to do on a non-SASL
    protocol). A refused login raises `SaslAuthenticationError` with the broker's message,
    a mechanism the listener does not take `UnsupportedSaslMechanismError`; a broken
    connection `BrokerConnectionError`. The connection bounds the time."""
    if not security.uses_sasl:
        return
    from yak.errors import SaslAuthenticationError, UnsupportedSaslMechanismError
    from yak.protocol import kio_compat

    hs_mod = kio_compat.schema_module("sasl_handshake", 1, "request")
    auth_mod = kio_compat.schema_module("sasl_authenticate", 1, "request")
    mech = security.sasl_mechanism or "PLAIN"
    hs = await call(hs_mod.SaslHandshakeRequest(mechanism=mech))
    if hs.error_code:
        raise UnsupportedSaslMechanismError(
            f"the listener does not take {mech} logins (enabled: "
            f"{', '.join(hs.mechanisms) or 'none'})")
    step = security.sasl_exchange()
    token = step(None)
    while token is not None:
        resp = await call(auth_mod.SaslAuthenticateRequest(auth_bytes=token))
        if resp.error_code:
            raise SaslAuthenticationError(resp.error_message or f"SASL {mech} login refused")
        try:
            token = step(bytes(resp.auth_bytes))
        except Exception as e:  # noqa: BLE001 - scramp: a server final we cannot verify
            raise SaslAuthenticationError(f"the broker's SCRAM proof is wrong: {e}") from None


def dialer(security: ClientSecurity | None) -> Dialer:
    """How to reach a broker as `security` says: its TLS context, its SASL login."""
    if security is None:
        return Dialer()
    ctx = _cached_context(security) if security.uses_tls else None
    return Dialer(ssl=ctx, login=partial(_login, security=security)
                  if security.uses_sasl else None)


async def _login(call: Call, *, security: ClientSecurity) -> None:
    await login(call, security)


def connection(host: str, port: int, security: ClientSecurity | None, timeout_s: float,
               client_id: str = "yak") -> KafkaConnection:
    """A `KafkaConnection` to `host:port`, secured as `security` says (opened on first
    use)."""
    return KafkaConnection(host, port, client_id=client_id, dialer=dialer(security),
                           timeout_s=timeout_s)


async def open_connection(host: str, port: int, security: ClientSecurity | None,
                          timeout_s: float, client_id: str = "yak", limit: int = 1 << 16,
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An open, logged-in connection handed over as asyncio streams, for a caller that
    only needs the login (the gateway's password check). `limit` is kept for the
    callers' signature; the reader's buffer limit is the streams' default."""
    del limit
    conn = connection(host, port, security, timeout_s, client_id)
    await conn.open()
    return conn.detach()


_contexts: dict[tuple[Any, ...], ssl.SSLContext] = {}


def _cached_context(security: ClientSecurity) -> ssl.SSLContext:
    """One client context per TLS setup: loading a CA file for every connection costs
    about a millisecond, and logins may be frequent (the gateway checks passwords)."""
    key = (security.ca_location, security.certificate_location, security.key_location,
           security.check_hostname)
    ctx = _contexts.get(key)
    if ctx is None:
        ctx = security.ssl_context()
        assert ctx is not None
        _contexts[key] = ctx
    return ctx
