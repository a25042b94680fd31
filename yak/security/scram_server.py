"""SASL/SCRAM-SHA-256/512's server side (RFC 5802/7677; Kafka's ScramSaslServer),
sans-IO, over scramp.

One `ScramServer` per login attempt, made by `sasl.SaslListenerConfig.new_server`; the
credentials come from the `scram.CredentialStore` (what is stored and how is `scram.py`'s).
The connection's `sasl.SaslAuthenticator` drives it: client-first -> server-first,
client-final -> server-final. scramp is imported only when a SCRAM login starts.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from yak.errors import SaslAuthenticationError
from yak.security.scram import MIN_ITERATIONS, SCRAM_MECHANISMS, ScramCredential

if TYPE_CHECKING:
    import scramp

__all__ = ["ScramServer"]


def _failed(mechanism: str, reauth: bool = False) -> SaslAuthenticationError:
    """Kafka's generic message: says nothing about whether the user exists."""
    what = "re-authentication" if reauth else "authentication"
    return SaslAuthenticationError(
        f"Authentication failed during {what} due to invalid credentials with SASL mechanism "
        f"{mechanism}"
    )


def _unescape_saslname(name: str) -> str:
    """RFC 5802 saslname: `=2C` is `,` and `=3D` is `=`; any other `=` is malformed."""
    out: list[str] = []
    i = 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise SaslAuthenticationError("Invalid SCRAM client first message: bad saslname")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


class ScramServer:
    """SCRAM-SHA-256/512 via scramp. Kafka's extensions (`,tokenauth=true` and any other
    `,key=value` after the nonce) are taken off the client-first message before scramp
    parses it -- scramp refuses multi-letter attributes -- and put back into the
    AuthMessage the proofs are computed over, as the client computed them. Delegation
    tokens (`tokenauth=true`) are not supported and fail the login.

    An unknown user gets a made-up credential (salt derived from the name with a per-broker
    secret, so repeated tries look the same) and fails at the proof, exactly like a wrong
    password: the exchange does not reveal which users exist."""

    def __init__(
        self,
        mechanism: str,
        lookup_credential: Callable[[str], ScramCredential | None],
        secret: bytes,
    ) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(mechanism)
        self.mechanism = mechanism
        self._lookup = lookup_credential
        self._secret = secret
        self._server: scramp.core.ScramServer | None = None
        self._stage = 0
        self.complete = False
        self.authorization_id: str | None = None
        self.credential_expiry_ms: int | None = None
        self._user: str | None = None
        self._known = False

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SCRAM message: not UTF-8") from None
        if self._stage == 0:
            return self._client_first(text)
        if self._stage == 1:
            return self._client_final(text)
        raise SaslAuthenticationError("SCRAM exchange already finished")

    def _client_first(self, text: str) -> bytes:
        parts = text.split(",")
        if (
            len(parts) < 4
            or parts[0] not in ("n", "y", "p")
            or not parts[2].startswith("n=")
            or not parts[3].startswith("r=")
        ):
            raise SaslAuthenticationError("Invalid SCRAM client first message")
        if parts[0] == "p":
            raise SaslAuthenticationError("SCRAM channel binding is not supported")
        authzid = parts[1]
        extensions = {}
        for ext in parts[4:]:
            k, eq, v = ext.partition("=")
            if not eq or not k.isalpha():
                raise SaslAuthenticationError("Invalid SCRAM client first message")
            extensions[k] = v
        if extensions.get("tokenauth", "").lower() == "true":
            raise SaslAuthenticationError(
                "Token Authentication failed: delegation tokens are not supported"
            )
        user = _unescape_saslname(parts[2][2:])
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if authzid and (not authzid.startswith("a=") or _unescape_saslname(authzid[2:]) != user):
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        cred = self._lookup(user)
        self._known = cred is not None
        if cred is None or cred.iterations < MIN_ITERATIONS:
            cred = self._fake(user)
        self._user = user
        bare = ",".join(parts[2:])
        stripped = ",".join(parts[:4])

        def auth_fn(_name: str) -> tuple[bytes, bytes, bytes, int]:
            return cred.salt, cred.stored_key, cred.server_key, cred.iterations

        # scramp (and the asn1crypto it loads: ~0.8 MB resident, ~20 ms to import) only
        # once a SCRAM login starts: a broker without SCRAM logins never pays for it.
        from scramp import ScramException, ScramMechanism

        server = ScramMechanism(self.mechanism).make_server(auth_fn)
        try:
            server.set_client_first(stripped)
            server.client_first_bare = bare  # the AuthMessage covers what the client sent
            first = server.get_server_first()
        except ScramException:
            raise _failed(self.mechanism) from None
        self._server = server
        self._stage = 1
        return first.encode()

    def _client_final(self, text: str) -> bytes:
        from scramp import ScramException

        assert self._server is not None
        self._stage = 2
        # Kafka accepts a final nonce that *ends with* the server's (ScramSaslServer:
        # `nonce().endsWith(...)`); librdkafka before 2.1 (kcat 1.7) sends its own nonce
        # twice. The proof is still checked over the message exactly as the client sent it.
        nonce, expected = _attribute(text, "r"), str(self._server.nonce)
        if nonce is not None and nonce != expected and nonce.endswith(expected):
            self._server.nonce = type(self._server.nonce)(nonce)  # scramp 1.5's Nonce
        try:
            self._server.set_client_final(text)
            final = self._server.get_server_final()
        except ScramException:
            raise _failed(self.mechanism) from None
        if not self._known:  # cannot happen with a random stored key; never let it through
            raise _failed(self.mechanism)
        self.complete = True
        self.authorization_id = self._user
        return final.encode()

    def _fake(self, user: str) -> ScramCredential:
        h = hashlib.sha256 if self.mechanism == "SCRAM-SHA-256" else hashlib.sha512
        salt = hmac.new(self._secret, b"salt:" + user.encode(), hashlib.sha256).digest()
        size = h().digest_size
        return ScramCredential(salt, os.urandom(size), os.urandom(size), MIN_ITERATIONS)


def _attribute(message: str, name: str) -> str | None:
    for part in message.split(","):
        if part.startswith(name + "="):
            return part[len(name) + 1:]
    return None
