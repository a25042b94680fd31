"""One blocking TCP connection to one broker, speaking Kafka's framing with kio's codecs.

Blocking on purpose: the Spark connector runs inside Python workers that Spark starts and
stops per task, where an event loop is only overhead. Requests are strictly sequential on a
connection (one in flight), which is all a fetcher or a producer per task needs.

Secured listeners: with a `ClientSecurity` the socket is wrapped in TLS (SSL, SASL_SSL)
and, on SASL listeners, the connection logs in (SaslHandshake v1, then SaslAuthenticate
until the mechanism is done) before it is handed out, as Kafka's clients do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import socket
import struct
from typing import Any, TypeVar

from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from yak.errors import KafkaError, SaslAuthenticationError, error_for_code
from yak.protocol import guard
from yak.security.client import ClientSecurity

T = TypeVar("T")

_LEN = struct.Struct(">i")

MAX_RESPONSE_BYTES = 1 << 30
"""The largest response frame a connection reads (librdkafka's `receive.message.max.bytes`
idea): far above any fetch this client asks for (64 MiB by default), yet a corrupt or hostile
size prefix cannot make it allocate 2 GiB."""


class BrokerConnectionError(KafkaError):
    """The broker could not be reached or dropped the connection (retriable)."""

    retriable = True


def build(cls: type[T], **kwargs: Any) -> T:
    """Instantiate a kio dataclass, keeping only the fields this schema version has.

    kio generates one class per API version and fields come and go between versions; this
    lets one call site serve every version it negotiates.
    """
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in kwargs.items() if k in names})


class Connection:
    """A socket plus correlation ids; `send()` writes a request and reads its response."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "yak-spark",
        timeout_s: float = 30.0,
        security: ClientSecurity | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise BrokerConnectionError(f"cannot connect to broker {host}:{port}: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ctx = security.ssl_context() if security is not None else None
        if ctx is not None:
            try:
                sock = ctx.wrap_socket(sock, server_hostname=host)
            except (OSError, ValueError) as exc:
                with contextlib.suppress(OSError):
                    sock.close()
                raise BrokerConnectionError(
                    f"TLS handshake with broker {host}:{port} failed: {exc}") from exc
        self._sock = sock
        self._correlation = 0
        self.api_versions: dict[int, tuple[int, int]] = {}
        if security is not None and security.uses_sasl:
            self._login(security)

    def _login(self, security: ClientSecurity) -> None:
        """SaslHandshake v1 then SaslAuthenticate v1 until the mechanism is complete; a
        refused login is a SaslAuthenticationError with the broker's message."""
        from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
        from kio.schema.sasl_authenticate.v1.response import SaslAuthenticateResponse
        from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
        from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

        mech = security.sasl_mechanism or "PLAIN"
        hs = self.send(SaslHandshakeRequest(mechanism=mech), SaslHandshakeResponse)
        if hs.error_code:
            self.close()
            raise error_for_code(int(hs.error_code),
                                 f"broker {self.host}:{self.port} refused SASL mechanism {mech} "
                                 f"(enabled: {', '.join(hs.mechanisms) or 'none'})")
        step = security.sasl_exchange()
        token = step(None)
        while token is not None:
            resp = self.send(SaslAuthenticateRequest(auth_bytes=token), SaslAuthenticateResponse)
            if resp.error_code:
                self.close()
                raise error_for_code(int(resp.error_code), resp.error_message
                                     or f"SASL {mech} login to {self.host}:{self.port} failed")
            try:
                token = step(bytes(resp.auth_bytes))
            except Exception as exc:  # noqa: BLE001 - scramp: a server we cannot verify
                self.close()
                raise SaslAuthenticationError(
                    f"SASL {mech} login to {self.host}:{self.port}: {exc}") from None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()

    def send(self, request: Any, response_cls: type[T]) -> T:
        self._correlation += 1
        header_cls = request.__header_schema__
        header = build(
            header_cls,
            request_api_key=i16(request.__api_key__),
            request_api_version=i16(request.__version__),
            correlation_id=i32(self._correlation),
            client_id=self.client_id,
        )
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        entity_writer(header_cls)(buf, header)
        entity_writer(type(request))(buf, request)
        frame = buf.getbuffer()
        _LEN.pack_into(frame, 0, len(frame) - 4)
        try:
            self._sock.sendall(frame)
            del frame
            size = _LEN.unpack(self._recv_exact(4))[0]
            if not 4 <= size <= self.max_response_bytes:  # it holds a correlation id at least
                self.close()
                raise BrokerConnectionError(
                    f"broker {self.host}:{self.port} sent a response frame of {size} bytes "
                    f"(the limit is 4..{self.max_response_bytes}): connection closed")
            payload = self._recv_exact(size)
        except OSError as exc:
            self.close()
            raise BrokerConnectionError(
                f"connection to broker {self.host}:{self.port} failed: {exc}"
            ) from exc
        view = memoryview(payload).toreadonly()
        header_reader = entity_reader(response_cls.__header_schema__)  # type: ignore[attr-defined]
        resp_header, used = header_reader(view, 0)
        if resp_header.correlation_id != self._correlation:
            self.close()
            raise BrokerConnectionError("correlation id mismatch: connection out of sync")
        try:
            # Walked by the guard before kio decodes it, as the broker does for requests
            # and yak.wire for responses: an inflated count in a broken or hostile
            # broker's answer must not make this worker allocate gigabytes.
            guard.check(response_cls, view, used)
            body, _ = entity_reader(response_cls)(view, used)
        except Exception as exc:  # noqa: BLE001 - guard's or kio's: the peer is broken
            self.close()
            raise BrokerConnectionError(
                f"broker {self.host}:{self.port} sent a malformed {response_cls.__name__}: "
                f"{exc}") from None
        return body

    def _recv_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionResetError("broker closed the connection")
            got += k
        return buf  # type: ignore[return-value]
