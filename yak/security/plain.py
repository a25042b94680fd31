"""SASL/PLAIN's server side (RFC 4616; Kafka's PlainSaslServer), sans-IO.

One `PlainServer` per login attempt, made by `sasl.SaslListenerConfig.new_server`; the users
and passwords are the listener's PlainLoginModule JAAS options (`jaas.plain_users`). It
answers one token; the connection's `sasl.SaslAuthenticator` drives it.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from yak.errors import SaslAuthenticationError

__all__ = ["PlainServer"]


class PlainServer:
    """RFC 4616 PLAIN: `[authzid] NUL authcid NUL passwd`, checked against JAAS users."""

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.authorization_id: str | None = None
        self.credential_expiry_ms: int | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationError("PLAIN authentication already complete")
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}"
            )
        authzid, user, password = parts
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(user)
        # Compare against something even for unknown users: same work either way.
        ok = hmac.compare_digest(
            (expected if expected is not None else "\x00" + password).encode(), password.encode()
        )
        if expected is None or not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self.complete = True
        self.authorization_id = user
        return b""
