"""SaslAuthenticate: one SASL token each way (PLAIN: one round; SCRAM: two).

The connection's `SaslAuthenticator` evaluates the token. A failed login is answered with
SASL_AUTHENTICATION_FAILED and a message that never says whether the user exists, held
back by the failed-authentication delay (per client IP, growing with repeated failures),
and then the connection closes. Waiting here blocks only this connection. On success the
response carries the session lifetime when `connections.max.reauth.ms` is set (KIP-368).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from typing import Any

from yak.broker.context import RequestContext
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2

log = logging.getLogger(__name__)


async def handle(ctx: RequestContext, request: Any) -> Any:
    cls = kio_compat.response_class(API_KEY, ctx.api_version)
    authenticator = ctx.session.authenticator if ctx.session is not None else None
    if authenticator is None:
        ctx.close_connection = True
        return kio_compat.build(cls, error_code=ErrorCode.illegal_sasl_state,
                                error_message="SASL is not enabled on this listener",
                                auth_bytes=b"", session_lifetime=datetime.timedelta(0))
    result = authenticator.authenticate(bytes(request.auth_bytes),
                                        time.monotonic_ns() // 1_000_000)
    if result.error_code:
        log.info("SASL authentication failed for %s on %s: %s", ctx.client_ip,
                 ctx.listener_name, result.error_message)
        if result.delay_ms:
            await asyncio.sleep(result.delay_ms / 1000)
    elif result.complete:
        log.debug("%s authenticated as %s", ctx.client_ip, ctx.principal)
    ctx.close_connection = result.close
    return kio_compat.build(
        cls,
        error_code=kio_compat.error_code(result.error_code),
        error_message=result.error_message,
        auth_bytes=result.auth_bytes,
        session_lifetime=datetime.timedelta(milliseconds=result.session_lifetime_ms),
    )
