"""SASL on the server side, sans-IO: mechanisms and the per-connection authenticator.

The broker's connection feeds requests to a `SaslAuthenticator` and does what it says; no
socket, clock or thread lives here (the clock is passed in), so every path is unit-tested.

Sequence (Kafka's SaslServerAuthenticator, KIP-152, KIP-368):
  ApiVersions (optional) -> SaslHandshake(mechanism) -> SaslAuthenticate(token)... -> done.
Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served;
any other request closes the connection unanswered. A SASL request out of order is
answered with ILLEGAL_SASL_STATE, then the connection closes. An unknown mechanism gets
UNSUPPORTED_SASL_MECHANISM with the enabled list, then the connection closes. A failed
login gets SASL_AUTHENTICATION_FAILED with a message (never saying whether the user
exists), after a delay (`connection.failed.authentication.delay.ms`, grown per client IP
by `FailedAuthenticationDelay`), then the connection closes.

With `connections.max.reauth.ms` > 0 the SaslAuthenticate response carries the session
lifetime; the client must re-authenticate (a new SaslHandshake with the same mechanism,
ending in the same principal) before it expires, or the next request closes the connection.

Mechanisms, one module each, behind the `SaslServer` protocol: PLAIN (`plain.py`, users
from PlainLoginModule's JAAS options), SCRAM-SHA-256/512 (`scram_server.py`, scramp,
credentials from a `CredentialStore`) and OAUTHBEARER (`oauthbearer.py`, JWTs).
`SaslListenerConfig` says which a listener enables and makes one per login attempt; this
module is the handshake state machine around them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, auto
from typing import Protocol

from yak.errors import ErrorCode, SaslAuthenticationError
from yak.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, plain_users, single_entry
from yak.security.oauthbearer import (
    OAUTHBEARER,
    OAUTHBEARER_LOGIN_MODULE,
    OAuthBearerServer,
    OAuthBearerValidator,
)
from yak.security.plain import PlainServer
from yak.security.principal import USER_TYPE, KafkaPrincipal
from yak.security.scram import CredentialStore
from yak.security.scram_server import ScramServer
from yak.security.settings import get_setting, lookup
from yak.settings import ConfigError

__all__ = [
    "API_VERSIONS",
    "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE",
    "AuthenticateResult",
    "FailedAuthenticationDelay",
    "GateAction",
    "HandshakeResult",
    "SaslAuthenticator",
    "SaslListenerConfig",
    "SaslServer",
    "SUPPORTED_MECHANISMS",
]

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslServer(Protocol):
    """One mechanism's server side for one login attempt."""

    mechanism: str
    complete: bool
    authorization_id: str | None  # the user name once complete
    credential_expiry_ms: int | None  # when the credential itself expires (a token's exp)

    def evaluate(self, token: bytes) -> bytes:
        """The next challenge; raises SaslAuthenticationError on failure."""
        ...


# --------------------------------------------------------------------------- listener config


@dataclass(frozen=True)
class SaslListenerConfig:
    """What a SASL listener offers: enabled mechanisms, PLAIN users, reauth, size limit."""

    listener_name: str
    enabled_mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]
    max_receive_size: int
    connections_max_reauth_ms: int
    oauthbearer: OAuthBearerValidator | None = None

    def __repr__(self) -> str:
        return (
            f"SaslListenerConfig({self.listener_name}, {self.enabled_mechanisms}, "
            f"{len(self.plain_users)} PLAIN users)"
        )

    @classmethod
    def from_settings(cls, settings: Mapping[str, str], listener_name: str) -> SaslListenerConfig:
        """Kafka's settings for one SASL listener; ConfigError (one line, naming the key)
        for an unsupported mechanism or a missing/malformed JAAS config."""
        mechs = get_setting(settings, "sasl.enabled.mechanisms", listener_name)
        key = (
            lookup(settings, "sasl.enabled.mechanisms", listener_name)
            or ("sasl.enabled.mechanisms", "")
        )[0]
        if not mechs:
            raise ConfigError(f"invalid value for {key}: no SASL mechanism enabled")
        for m in mechs:
            if m not in SUPPORTED_MECHANISMS:
                raise ConfigError(
                    f"invalid value {','.join(mechs)!r} for {key}: {m} is not supported by Yak "
                    f"(supported: {', '.join(SUPPORTED_MECHANISMS)})"
                )
        users: dict[str, str] = {}
        for m in mechs:
            found = lookup(settings, "sasl.jaas.config", listener_name, m)
            jkey = f"listener.name.{listener_name.lower()}.{m.lower()}.sasl.jaas.config"
            if found is None or found[0] != jkey:
                if m == "PLAIN":
                    raise ConfigError(
                        f"{jkey} is required: PLAIN needs its users in a PlainLoginModule "
                        "JAAS config"
                    )
                continue  # SCRAM, OAUTHBEARER: the login module is optional on a broker
            module = {"PLAIN": PLAIN_LOGIN_MODULE,
                      OAUTHBEARER: OAUTHBEARER_LOGIN_MODULE}.get(m, SCRAM_LOGIN_MODULE)
            entry = single_entry(found[1], jkey, module)
            if m == "PLAIN":
                users = plain_users(entry)
                if not users:
                    raise ConfigError(f'invalid value for {jkey}: no user_<name>="<password>"')
        oauthbearer = (OAuthBearerValidator.from_settings(settings, listener_name)
                       if OAUTHBEARER in mechs else None)
        return cls(
            listener_name=listener_name.upper(),
            enabled_mechanisms=tuple(mechs),
            plain_users=users,
            oauthbearer=oauthbearer,
            max_receive_size=get_setting(settings, "sasl.server.max.receive.size", listener_name),
            connections_max_reauth_ms=get_setting(
                settings, "connections.max.reauth.ms", listener_name
            ),
        )

    def new_server(
        self, mechanism: str, credentials: CredentialStore | None, secret: bytes
    ) -> SaslServer:
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users)
        if mechanism == OAUTHBEARER:
            assert self.oauthbearer is not None
            return OAuthBearerServer(self.oauthbearer)
        if credentials is None:
            raise ValueError("SCRAM needs a credential store")
        return ScramServer(mechanism, lambda u: credentials.get(u, mechanism), secret)


# --------------------------------------------------------------------------- authenticator


class GateAction(Enum):
    SERVE = auto()  # pass to the normal handler (ApiVersions before login; all after)
    SASL = auto()  # hand to `handshake` / `authenticate`
    ILLEGAL_STATE = auto()  # answer with ILLEGAL_SASL_STATE, then close
    CLOSE = auto()  # close without answering


class _State(Enum):
    HANDSHAKE = auto()
    AUTHENTICATE = auto()
    COMPLETE = auto()
    FAILED = auto()


@dataclass(frozen=True)
class HandshakeResult:
    error_code: int
    mechanisms: tuple[str, ...]
    close: bool


@dataclass(frozen=True)
class AuthenticateResult:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int
    close: bool  # after sending (failures)
    delay_ms: int  # hold the failure answer back this long (failed-auth delay)
    complete: bool


class FailedAuthenticationDelay:
    """Per-IP delay before a failed login is answered: the base delay
    (`connection.failed.authentication.delay.ms`, Kafka's) doubled for each further failure
    from the same IP within `window_ms`, capped; a success from that IP resets it. Slows a
    password-guessing client without touching anyone else's connections."""

    def __init__(
        self, base_ms: int, cap_ms: int = 5000, window_ms: int = 60000, max_ips: int = 10000
    ) -> None:
        self.base_ms = base_ms
        self.cap_ms = cap_ms
        self.window_ms = window_ms
        self.max_ips = max_ips
        self._fails: dict[str, tuple[int, int]] = {}  # ip -> (count, last failure ms)

    def failed(self, ip: str, now_ms: int) -> int:
        count, last = self._fails.get(ip, (0, 0))
        if now_ms - last > self.window_ms:
            count = 0
        count += 1
        if ip not in self._fails and len(self._fails) >= self.max_ips:
            self._prune(now_ms)
        self._fails[ip] = (count, now_ms)
        if self.base_ms == 0:
            return 0
        return min(self.cap_ms, self.base_ms * (1 << min(count - 1, 20)))

    def succeeded(self, ip: str) -> None:
        self._fails.pop(ip, None)

    def _prune(self, now_ms: int) -> None:
        stale = [ip for ip, (_, t) in self._fails.items() if now_ms - t > self.window_ms]
        for ip in stale:
            del self._fails[ip]
        while len(self._fails) >= self.max_ips:  # still full: forget the oldest
            del self._fails[min(self._fails, key=lambda k: self._fails[k][1])]


class SaslAuthenticator:
    """The SASL state of one connection on a SASL listener (see the module docstring)."""

    def __init__(
        self,
        config: SaslListenerConfig,
        *,
        credentials: CredentialStore | None,
        client_ip: str,
        failed_delay: FailedAuthenticationDelay,
        secret: bytes,
    ) -> None:
        self.config = config
        self._credentials = credentials
        self.client_ip = client_ip
        self._failed_delay = failed_delay
        self._secret = secret
        self._state = _State.HANDSHAKE
        self._server: SaslServer | None = None
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self.session_expiry_ms: int | None = None
        self._reauth = False
        self._handshake_version = 1
        self.raw_tokens = False  # SaslHandshake v0: tokens follow as bare size-prefixed frames

    @property
    def authenticated(self) -> bool:
        if self._state == _State.FAILED:
            return False
        return self._state == _State.COMPLETE or (self._reauth and self.principal is not None)

    @property
    def awaiting_raw_token(self) -> bool:
        """After a SaslHandshake v0 the next frame is a bare SASL token, not a request."""
        return self.raw_tokens and self._state == _State.AUTHENTICATE

    def gate(self, api_key: int, now_ms: int) -> GateAction:
        """What to do with a request of `api_key` arriving now."""
        st = self._state
        if st == _State.FAILED:
            return GateAction.CLOSE
        if st == _State.COMPLETE:
            if api_key == SASL_HANDSHAKE:
                return GateAction.SASL  # KIP-368 re-authentication
            if api_key == SASL_AUTHENTICATE:
                return GateAction.ILLEGAL_STATE
            if self.session_expiry_ms is not None and now_ms >= self.session_expiry_ms:
                return GateAction.CLOSE  # session expired without re-authenticating
            return GateAction.SERVE
        if st == _State.HANDSHAKE:
            if api_key == API_VERSIONS:
                return GateAction.SERVE
            if api_key == SASL_HANDSHAKE:
                return GateAction.SASL
            if api_key == SASL_AUTHENTICATE:
                self._state = _State.FAILED
                return GateAction.ILLEGAL_STATE
            return GateAction.CLOSE
        # AUTHENTICATE
        if api_key == SASL_AUTHENTICATE:
            return GateAction.SASL
        if api_key in (SASL_HANDSHAKE, API_VERSIONS):
            self._state = _State.FAILED
            return GateAction.ILLEGAL_STATE
        if self._reauth and self.session_expiry_ms is not None and now_ms < self.session_expiry_ms:
            # Re-authenticating clients may keep sending requests on the old session.
            return GateAction.SERVE
        return GateAction.CLOSE

    def handshake(self, mechanism: str, version: int) -> HandshakeResult:
        enabled = self.config.enabled_mechanisms
        reauth = self._state == _State.COMPLETE
        if self._state not in (_State.HANDSHAKE, _State.COMPLETE):
            self._state = _State.FAILED
            return HandshakeResult(ErrorCode.illegal_sasl_state, enabled, True)
        if mechanism not in enabled:
            self._state = _State.FAILED
            return HandshakeResult(ErrorCode.unsupported_sasl_mechanism, enabled, True)
        if reauth:
            if version < 1 or self._handshake_version < 1:
                self._state = _State.FAILED
                return HandshakeResult(ErrorCode.illegal_sasl_state, enabled, True)
            if mechanism != self.mechanism:
                # Kafka answers the handshake, then fails the SaslAuthenticate that follows.
                self._bad_reauth = (
                    f"SASL mechanism '{mechanism}' requested by client is not supported for "
                    f"re-authentication of mechanism '{self.mechanism}'"
                )
                self._reauth = True
                self._state = _State.AUTHENTICATE
                self._server = None
                return HandshakeResult(ErrorCode.none, enabled, False)
            self._reauth = True
        self._handshake_version = version
        self.raw_tokens = version == 0
        self.mechanism = mechanism
        self._bad_reauth = None
        self._server = self.config.new_server(mechanism, self._credentials, self._secret)
        self._state = _State.AUTHENTICATE
        return HandshakeResult(ErrorCode.none, enabled, False)

    _bad_reauth: str | None = None

    def authenticate(self, token: bytes, now_ms: int) -> AuthenticateResult:
        """One SaslAuthenticate (or a raw v0 token)."""
        if self._state != _State.AUTHENTICATE:
            self._state = _State.FAILED
            return AuthenticateResult(
                ErrorCode.illegal_sasl_state,
                "SaslAuthenticate out of order",
                b"",
                0,
                True,
                0,
                False,
            )
        if len(token) > self.config.max_receive_size:
            return self._fail(
                SaslAuthenticationError("Failing SASL authentication due to invalid receive size"),
                now_ms,
            )
        if self._bad_reauth is not None or self._server is None:
            return self._fail(SaslAuthenticationError(self._bad_reauth or "no mechanism"), now_ms)
        try:
            out = self._server.evaluate(token)
        except SaslAuthenticationError as e:
            return self._fail(e, now_ms)
        if not self._server.complete:
            return AuthenticateResult(ErrorCode.none, None, out, 0, False, 0, False)
        principal = KafkaPrincipal(USER_TYPE, self._server.authorization_id or "")
        if self._reauth and self.principal is not None and principal != self.principal:
            return self._fail(
                SaslAuthenticationError(
                    f"Cannot change principals during re-authentication from "
                    f"{self.principal.principal_type}.{self.principal.name}: "
                    f"{principal.principal_type}.{principal.name}"
                ),
                now_ms,
            )
        self.principal = principal
        self._state = _State.COMPLETE
        self._reauth = False
        self._failed_delay.succeeded(self.client_ip)
        lifetime = max(0, self.config.connections_max_reauth_ms)
        expiry = self._server.credential_expiry_ms
        if lifetime > 0 and expiry is not None:
            # KIP-368: a session ends with its credential (an OAUTHBEARER token's exp)
            lifetime = max(1, min(lifetime, expiry - now_ms))
        self.session_expiry_ms = now_ms + lifetime if lifetime > 0 else None
        return AuthenticateResult(ErrorCode.none, None, out, lifetime, False, 0, True)

    def _fail(self, e: SaslAuthenticationError, now_ms: int) -> AuthenticateResult:
        self._state = _State.FAILED
        delay = self._failed_delay.failed(self.client_ip, now_ms)
        return AuthenticateResult(
            ErrorCode.sasl_authentication_failed, e.message, b"", 0, True, delay, False
        )


def new_broker_secret() -> bytes:
    """Per-process secret for made-up SCRAM salts (unknown users)."""
    return os.urandom(32)


__all__ += ["new_broker_secret"]
