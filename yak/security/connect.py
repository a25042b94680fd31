"""Asyncio connections to a broker, logged in as a `ClientSecurity` says.

For whoever speaks a few requests itself rather than through a client library: a broker
reaching another one on its inter-broker listener (replica fetchers, transaction markers,
KIP-890 checks), the gateway checking a caller's password with one real SASL login, the
schema registry's leader election keeping a group membership (the edges import it as
`yak.client.aio`). The SASL exchange itself (the tokens) is
`ClientSecurity.sasl_exchange()`, sans-IO in `yak.security.client`; this module owns the
socket, TLS and the SaslHandshake/SaslAuthenticate framing.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from typing import Any

from yak.security.client import ClientSecurity

__all__ = ["login", "open_connection"]

_FRAME = struct.Struct(">i")
_MAX_LOGIN_FRAME = 1 << 20


async def login(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                security: ClientSecurity, client_id: str = "yak") -> None:
    """Log an asyncio connection in, as Kafka's clients do: SaslHandshake v1, then
    SaslAuthenticate v1 until the mechanism is done (nothing to do on a non-SASL
    protocol). A refused login raises `SaslAuthenticationError` with the broker's message,
    a mechanism the listener does not take `UnsupportedSaslMechanismError`; a broken
    connection OSError / asyncio.IncompleteReadError. The caller bounds the time."""
    if not security.uses_sasl:
        return
    from yak.errors import SaslAuthenticationError, UnsupportedSaslMechanismError
    from yak.protocol import kio_compat

    cid = 0

    async def call(request: Any) -> Any:
        nonlocal cid
        cid += 1
        writer.write(kio_compat.encode_request(request, cid, client_id))
        await writer.drain()
        (size,) = _FRAME.unpack(await reader.readexactly(4))
        if not 0 < size <= _MAX_LOGIN_FRAME:
            raise OSError(f"bad frame size {size} from the broker")
        got, response = kio_compat.decode_response(
            int(request.__api_key__), int(request.__version__), await reader.readexactly(size))
        if got != cid:
            raise OSError("correlation id mismatch")
        return response

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


async def open_connection(host: str, port: int, security: ClientSecurity | None,
                          timeout_s: float, client_id: str = "yak", limit: int = 1 << 16,
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An asyncio connection to a broker, with TLS and logged in as `security` says
    (`limit`: the StreamReader's buffer limit)."""
    ctx = None
    if security is not None and security.uses_tls:
        ctx = _cached_context(security)
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=ctx, limit=limit,
                                server_hostname=host if ctx is not None else None),
        timeout_s)
    if security is not None and security.uses_sasl:
        try:
            await asyncio.wait_for(login(reader, writer, security, client_id), timeout_s)
        except BaseException:
            writer.close()
            raise
    return reader, writer


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
