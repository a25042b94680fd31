"""Who is on a connection: the per-listener channel builder and the per-connection session.

Kafka builds each accepted connection with its listener's ChannelBuilder (PLAINTEXT, SSL,
SASL_*): the builder decides how the peer is authenticated and what principal the
connection carries. Here `ChannelBuilder.session(client_ip, peer_cert)` does the same,
sans-IO: the broker's connection hands it the client address and, on TLS listeners, the
peer certificate, and gets a `Session` back. On SASL listeners the session holds the
connection's `SaslAuthenticator` (the gate every request passes through before and during
login); its principal becomes the SASL user once the login completes.

- PLAINTEXT: `User:ANONYMOUS`.
- SSL: `User:<certificate subject, RFC 2253>` through `ssl.principal.mapping.rules`, or
  `User:ANONYMOUS` without a client certificate. A subject that no rule maps fails the
  connection (`NoMatchingRule`), as Kafka fails the SSL authentication.
- SASL_PLAINTEXT / SASL_SSL: `User:<SASL user>` after SaslAuthenticate; before that the
  gate only lets ApiVersions, SaslHandshake and SaslAuthenticate through.
"""

from __future__ import annotations

from dataclasses import dataclass

from yak.security.listeners import SecurityProtocol
from yak.security.principal import ANONYMOUS, KafkaPrincipal
from yak.security.sasl import FailedAuthenticationDelay, SaslAuthenticator
from yak.security.scram import CredentialStore
from yak.security.security_config import ListenerSecurity
from yak.security.ssl_principal import NoMatchingRule, ssl_principal

__all__ = ["ChannelBuilder", "NoMatchingRule", "Session"]


class Session:
    """The security state of one connection: listener, client address, principal and, on
    SASL listeners, the authenticator (None elsewhere)."""

    __slots__ = ("_principal", "authenticator", "client_ip", "listener_name", "security_protocol")

    def __init__(
        self,
        listener_name: str,
        security_protocol: SecurityProtocol,
        client_ip: str,
        principal: KafkaPrincipal,
        authenticator: SaslAuthenticator | None,
    ) -> None:
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.client_ip = client_ip
        self._principal = principal
        self.authenticator = authenticator

    @property
    def principal(self) -> KafkaPrincipal:
        """The SASL user once logged in (ANONYMOUS before: nothing but the SASL requests is
        served then), else the TLS or PLAINTEXT principal."""
        a = self.authenticator
        if a is not None and a.principal is not None:
            return a.principal
        return self._principal

    def __repr__(self) -> str:
        return f"Session({self.listener_name}, {self.client_ip}, {self.principal})"


@dataclass(frozen=True)
class ChannelBuilder:
    """Builds the `Session` of each connection accepted on one listener."""

    listener: ListenerSecurity
    credentials: CredentialStore | None
    failed_delay: FailedAuthenticationDelay
    secret: bytes

    @property
    def listener_name(self) -> str:
        return self.listener.endpoint.listener_name

    @property
    def security_protocol(self) -> SecurityProtocol:
        return self.listener.endpoint.security_protocol

    def session(self, client_ip: str, peer_cert: bytes | None = None) -> Session:
        """The new connection's session; raises `NoMatchingRule` for a client certificate
        whose subject no `ssl.principal.mapping.rules` rule maps (close the connection)."""
        ls = self.listener
        principal = ANONYMOUS
        if ls.principal_mapper is not None and peer_cert:
            principal = ssl_principal(peer_cert, ls.principal_mapper)
        authenticator = None
        if ls.sasl is not None:
            authenticator = SaslAuthenticator(
                ls.sasl,
                credentials=self.credentials,
                client_ip=client_ip,
                failed_delay=self.failed_delay,
                secret=self.secret,
            )
        return Session(
            ls.endpoint.listener_name, ls.endpoint.security_protocol, client_ip, principal,
            authenticator,
        )
