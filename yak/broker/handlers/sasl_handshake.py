"""SaslHandshake: the client names the SASL mechanism it will log in with.

The connection's `SaslAuthenticator` (yak.security.sasl) decides; this handler only
translates. An unknown mechanism is UNSUPPORTED_SASL_MECHANISM with the enabled list, a
handshake out of order (or on a listener without SASL) ILLEGAL_SASL_STATE; both close
the connection after the answer, as Kafka does. v0 means the tokens that follow are bare
frames (the connection reads them); v1 means SaslAuthenticate requests.
"""

from __future__ import annotations

from typing import Any

from yak.broker.context import RequestContext
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = kio_compat.response_class(API_KEY, ctx.api_version)
    authenticator = ctx.session.authenticator if ctx.session is not None else None
    if authenticator is None:
        ctx.close_connection = True
        return cls(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    result = authenticator.handshake(request.mechanism, ctx.api_version)
    ctx.close_connection = result.close
    return cls(error_code=kio_compat.error_code(result.error_code),
               mechanisms=tuple(result.mechanisms))
