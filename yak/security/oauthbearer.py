"""SASL/OAUTHBEARER on the server side (KIP-255, KIP-768), sans-IO.

The client sends one message (RFC 7628): a GS2 header, then `auth=Bearer <token>` and
optional extensions, separated by \\x01. The token is a JWT; its subject becomes the
principal `User:<sub>` and its expiry bounds the session (KIP-368: the client must
re-authenticate before the token expires).

How a token is validated follows Kafka's two broker-side handlers:
- With `sasl.oauthbearer.jwks.endpoint.url` (a `file://` or `https://` JWKS) and Kafka's
  `OAuthBearerValidatorCallbackHandler` as `sasl.server.callback.handler.class` (KIP-768):
  the signature is checked against the key the token's `kid` names (pyjwt), and `exp`,
  `iat`, `sasl.oauthbearer.expected.audience` and `.expected.issuer` are enforced with
  `sasl.oauthbearer.clock.skew.seconds` of leeway. The key set is read at start-up (and a
  `file://` set again when a token names a key it does not have, at most once a minute).
- Without them, Kafka's default `OAuthBearerUnsecuredValidatorCallbackHandler`: unsigned
  tokens (`"alg": "none"`) are accepted with only `exp` and the subject checked. That is
  for development, as in Kafka, and the broker says so in its log at start-up.
A refused token fails the login with SASL_AUTHENTICATION_FAILED and a message naming what
was wrong (never the token).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yak.errors import SaslAuthenticationError
from yak.security.settings import get_setting, lookup
from yak.settings import ConfigError

__all__ = ["OAUTHBEARER", "OAuthBearerServer", "OAuthBearerValidator", "VALIDATOR_CLASSES"]

log = logging.getLogger(__name__)

OAUTHBEARER = "OAUTHBEARER"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# `sasl.server.callback.handler.class` values that select JWKS validation (Kafka 3.1+'s
# class, and its 3.x name before it moved to the `secured` package).
VALIDATOR_CLASSES = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
)
UNSECURED_CLASS = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                   "OAuthBearerUnsecuredValidatorCallbackHandler")
_KEY_RELOAD_S = 60.0


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


@dataclass
class OAuthBearerValidator:
    """Validates one token; `jwks` None means Kafka's unsecured validator."""

    listener_name: str
    sub_claim: str = "sub"
    clock_skew_s: int = 30
    audience: tuple[str, ...] = ()
    issuer: str | None = None
    jwks_url: str | None = None
    _keys: Any = field(default=None, repr=False)  # jwt.PyJWKSet
    _loaded_at: float = 0.0

    @property
    def secured(self) -> bool:
        return self.jwks_url is not None

    @classmethod
    def from_settings(cls, settings: Mapping[str, str], listener: str) -> OAuthBearerValidator:
        """ConfigError (one line, naming the key) for an unknown handler class, a JWKS URL
        of another scheme, or a key set that cannot be read."""
        mech = OAUTHBEARER
        found = lookup(settings, "sasl.server.callback.handler.class", listener, mech)
        handler = found[1].strip() if found else ""
        url = get_setting(settings, "sasl.oauthbearer.jwks.endpoint.url", listener)
        if handler and handler not in VALIDATOR_CLASSES and handler != UNSECURED_CLASS:
            raise ConfigError(
                f"invalid value {handler!r} for {found[0]}: Yak validates OAUTHBEARER tokens"
                f" with {VALIDATOR_CLASSES[0]} (JWKS) or Kafka's unsecured default")
        if handler in VALIDATOR_CLASSES and not url:
            raise ConfigError(
                f"{found[0]} = {handler} needs sasl.oauthbearer.jwks.endpoint.url (the keys)")
        if handler == UNSECURED_CLASS:
            url = None
        v = cls(
            listener_name=listener.upper(),
            sub_claim=get_setting(settings, "sasl.oauthbearer.sub.claim.name", listener),
            clock_skew_s=get_setting(settings, "sasl.oauthbearer.clock.skew.seconds", listener),
            audience=tuple(get_setting(settings, "sasl.oauthbearer.expected.audience",
                                       listener)),
            issuer=get_setting(settings, "sasl.oauthbearer.expected.issuer", listener) or None,
            jwks_url=url or None,
        )
        if v.secured:
            key = (lookup(settings, "sasl.oauthbearer.jwks.endpoint.url", listener)
                   or ("sasl.oauthbearer.jwks.endpoint.url", ""))[0]
            if not url.startswith(("file://", "https://")):
                raise ConfigError(f"invalid value {url!r} for {key}: a file:// or https:// URL")
            try:
                v._load_keys()
            except ValueError as e:
                raise ConfigError(f"invalid value {url!r} for {key}: {e}") from None
        else:
            log.warning("listener %s: OAUTHBEARER accepts unsecured (unsigned) tokens, Kafka's"
                        " development default; set sasl.oauthbearer.jwks.endpoint.url and"
                        " sasl.server.callback.handler.class=%s to require signed ones",
                        v.listener_name, VALIDATOR_CLASSES[0])
        return v

    # ------------------------------------------------------------------ keys

    def _load_keys(self) -> None:
        import jwt

        url = self.jwks_url or ""
        try:
            if url.startswith("file://"):
                text = Path(url[len("file://"):]).read_text("utf-8")
            else:
                import httpx

                r = httpx.get(url, timeout=10.0)
                r.raise_for_status()
                text = r.text
            self._keys = jwt.PyJWKSet.from_json(text)
        except (OSError, ValueError, jwt.PyJWTError, Exception) as e:  # noqa: BLE001
            raise ValueError(f"cannot read the JWKS: {e}") from None
        self._loaded_at = time.monotonic()

    def _key_for(self, kid: str | None) -> Any:
        import jwt

        def find() -> Any:
            for k in self._keys.keys:
                if kid is None or k.key_id == kid:
                    return k
            return None

        found = find()
        if (found is None and self.jwks_url and self.jwks_url.startswith("file://")
                and time.monotonic() - self._loaded_at > _KEY_RELOAD_S):
            try:
                self._load_keys()  # keys rotated: read the file again
            except ValueError as e:
                log.warning("listener %s: %s", self.listener_name, e)
            found = find()
        if found is None:
            raise jwt.InvalidTokenError(f"no key with kid {kid!r} in the JWKS")
        return found

    # ------------------------------------------------------------------ tokens

    def validate(self, token: str, now_s: float) -> tuple[str, int]:
        """(the principal name, the token's expiry in ms since the epoch) or
        SaslAuthenticationError saying what is wrong."""
        if self.secured:
            return self._validate_signed(token)
        return self._validate_unsecured(token, now_s)

    def _validate_signed(self, token: str) -> tuple[str, int]:
        import jwt

        try:
            header = jwt.get_unverified_header(token)
            key = self._key_for(header.get("kid"))
            alg = header.get("alg") or ""
            if alg == "none" or (key.algorithm_name and alg != key.algorithm_name):
                raise jwt.InvalidAlgorithmError(f"algorithm {alg!r} not allowed for this key")
            claims = jwt.decode(
                token, key.key, algorithms=[alg], audience=list(self.audience) or None,
                issuer=self.issuer, leeway=self.clock_skew_s,
                options={"require": ["exp", self.sub_claim],
                         "verify_aud": bool(self.audience)})
        except jwt.PyJWTError as e:
            raise SaslAuthenticationError(f"OAUTHBEARER token rejected: {e}") from None
        return self._principal(claims), int(float(claims["exp"]) * 1000)

    def _validate_unsecured(self, token: str, now_s: float) -> tuple[str, int]:
        parts = token.split(".")
        if len(parts) != 3:
            raise SaslAuthenticationError("OAUTHBEARER token rejected: not a JWT")
        try:
            header = json.loads(_b64url(parts[0]))
            claims = json.loads(_b64url(parts[1]))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise SaslAuthenticationError("OAUTHBEARER token rejected: not a JWT") from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise SaslAuthenticationError("OAUTHBEARER token rejected: not a JWT")
        if header.get("alg") != "none":
            raise SaslAuthenticationError(
                "OAUTHBEARER token rejected: a signed token on a listener with the unsecured"
                " validator (configure sasl.oauthbearer.jwks.endpoint.url)")
        exp = claims.get("exp")
        if not isinstance(exp, (int, float)):
            raise SaslAuthenticationError("OAUTHBEARER token rejected: no exp claim")
        if exp + self.clock_skew_s < now_s:
            raise SaslAuthenticationError("OAUTHBEARER token rejected: expired")
        iat = claims.get("iat")
        if isinstance(iat, (int, float)) and iat - self.clock_skew_s > now_s:
            raise SaslAuthenticationError("OAUTHBEARER token rejected: issued in the future")
        return self._principal(claims), int(float(exp) * 1000)

    def _principal(self, claims: Mapping[str, Any]) -> str:
        sub = claims.get(self.sub_claim)
        if not isinstance(sub, str) or not sub.strip():
            raise SaslAuthenticationError(
                f"OAUTHBEARER token rejected: no {self.sub_claim!r} claim to name the principal")
        return sub.strip()


class OAuthBearerServer:
    """One OAUTHBEARER login: one client message, validated; `credential_expiry_ms` bounds
    the session."""

    mechanism = OAUTHBEARER

    def __init__(self, validator: OAuthBearerValidator, clock: Any = time.time) -> None:
        self._validator = validator
        self._clock = clock
        self.complete = False
        self.authorization_id: str | None = None
        self.credential_expiry_ms: int | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationError("OAUTHBEARER authentication already complete")
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid OAUTHBEARER message: not UTF-8") from None
        gs2, sep, rest = text.partition("\x01")
        if not sep or not gs2.startswith(("n,", "y,")) or not rest.endswith("\x01\x01"):
            raise SaslAuthenticationError("Invalid OAUTHBEARER message: not RFC 7628's form")
        authzid = None
        for attr in gs2.split(",")[1:]:
            if attr.startswith("a="):
                authzid = attr[2:]
        fields: dict[str, str] = {}
        for kv in rest[:-2].split("\x01"):
            k, eq, v = kv.partition("=")
            if not eq or not k:
                raise SaslAuthenticationError("Invalid OAUTHBEARER message: bad key=value")
            fields[k] = v
        auth = fields.get("auth", "")
        scheme, _, bearer = auth.partition(" ")
        if scheme.lower() != "bearer" or not bearer.strip():
            raise SaslAuthenticationError("Invalid OAUTHBEARER message: no auth=Bearer token")
        principal, expiry_ms = self._validator.validate(bearer.strip(), self._clock())
        if authzid and authzid != principal:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different"
                " from the token's principal")
        self.complete = True
        self.authorization_id = principal
        self.credential_expiry_ms = expiry_ms
        return b""
