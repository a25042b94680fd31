"""One asyncio client connection to a Kafka broker: the one Kafka client stack inside Yak.

Whatever in Yak speaks Kafka requests itself rather than through a client library (a
broker's replica fetchers, its transaction markers and KIP-890 checks to other brokers,
the schema registry's group membership, the gateway's one SASL login) does it through a
`KafkaConnection`, as Kafka's brokers all go through `NetworkClient`:

- framing: requests are complete frames (kio's encoder or a hand-written codec); the
  answers are cut by `yak.protocol.framing.FrameReceiver` from the buffers the transport
  reads into (an `asyncio.BufferedProtocol`, no `StreamReader` in between): a response is
  a zero-copy view of the buffer the socket (or TLS) wrote it into, a large one (a
  follower's ~4 MiB Fetch response) too, never joined from pieces, and reads restart at
  the buffer's front once the caller dropped the previous response; a hand-written
  decoder (`fetch_client_codec`) keeps its records as slices of that frame,
  which the follower appends as they are. A frame size outside [4, `max_frame`] is a
  broken peer;
- correlation: each request takes the connection's next correlation id; a broker answers
  a connection's requests in the order they arrived (docs/architecture.md, "The order of
  effects"), so responses are matched to the oldest request in flight and the ids are
  checked, never searched;
- pipelining: any number of requests may be in flight at once (a `request` writes its
  frame at once and waits for its own answer);
- timeouts: every request has one. A request that timed out or whose caller was
  cancelled leaves its response on the way, which the next request would take for its
  own; so it poisons the connection: closed at once, every other request in flight fails
  with `BrokerConnectionError`, and the next request opens a new one (Kafka's
  NetworkClient disconnects on a request timeout too);
- security: a `Dialer` says how to reach the broker, TLS context and login (SASL, run on
  the new connection before any other request). The security layer builds it
  (`yak.security.connect.dialer`); this package sits just above `protocol/` and knows
  nothing of SASL;
- untrusted answers: every response decoded with kio is first walked by
  `yak.protocol.guard.check`, as the broker does for requests (an inflated count would
  otherwise abort the process inside kio's native reader).

Failures are `BrokerConnectionError` (Kafka's NETWORK_EXCEPTION, retriable) or its
`RequestTimeoutError`; both leave the connection closed, ready to be reopened.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from yak.errors import ErrorCode, KafkaError
from yak.protocol import guard, kio_compat
from yak.protocol.framing import FrameReceiver
from yak.protocol.primitives import skip_tagged_fields

__all__ = ["DEFAULT_MAX_FRAME", "PLAIN", "BrokerConnectionError", "Call", "Dialer",
           "KafkaConnection", "Login", "RequestTimeoutError"]

DEFAULT_MAX_FRAME = 256 << 20
"""A response announcing more is a broken peer (a Fetch answer is bounded by the
replica's `replica.fetch.response.max.bytes`, 10 MiB by default)."""

_RESPONSE_MIN = 4  # the correlation id
_I32 = struct.Struct(">i")

Call = Callable[[Any], Awaitable[Any]]
"""Sends one kio request on a connection and returns its decoded response."""
Login = Callable[[Call], Awaitable[None]]
"""Logs a new connection in (SASL), speaking through the `Call` it is given."""


@dataclass(frozen=True)
class Dialer:
    """How to reach a broker: TLS (`ssl`, None: plain TCP) and a login run on each new
    connection before it carries anything else (None: no login)."""

    ssl: ssl.SSLContext | None = None
    login: Login | None = None


PLAIN = Dialer()


class BrokerConnectionError(KafkaError, ConnectionError):
    """The broker could not be reached, went away, or answered something that does not
    parse; the connection is closed and the next request opens a new one. An OSError too
    (ConnectionError), as a socket's failures are to callers that catch those."""

    code = ErrorCode.network_exception
    retriable = True


class RequestTimeoutError(BrokerConnectionError):
    """No answer within the request's timeout; the connection was closed."""

    code = ErrorCode.request_timed_out


class _Protocol(asyncio.BufferedProtocol):
    """The transport's side: frames to the connection, loss and back-pressure noted."""

    def __init__(self, owner: KafkaConnection, receiver: FrameReceiver) -> None:
        self.owner = owner
        self.receiver = receiver
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.paused: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.receiver.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        receiver = self.receiver
        frames = receiver.buffer_updated(nbytes)
        if frames:
            self.owner._frames(self, frames)
        if receiver.error is not None and not self.closed:
            self.owner._fail(self, BrokerConnectionError(
                f"{self.owner.name}: malformed response, {receiver.error}"))

    def eof_received(self) -> bool | None:
        return False  # close: a broker never half-closes a connection it still serves

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        why = f": {exc!r}" if exc is not None else ""
        self.owner._fail(self, BrokerConnectionError(
            f"{self.owner.name}: connection closed by the broker{why}"))
        self._wake_writer()

    def pause_writing(self) -> None:
        if self.paused is None:
            self.paused = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._wake_writer()

    def _wake_writer(self) -> None:
        paused, self.paused = self.paused, None
        if paused is not None and not paused.done():
            paused.set_result(None)


class KafkaConnection:
    """One connection to `host:port`, opened on first use and after every failure.

    `request(kio_request)` for anything kio encodes; `request_frame(frame)` for a
    hand-written codec's frame (the raw response frame comes back, header included)."""

    def __init__(self, host: str, port: int, *, client_id: str | None = "yak",
                 dialer: Dialer = PLAIN, timeout_s: float = 30.0,
                 max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.dialer = dialer
        self.timeout_s = timeout_s
        """Default per-request timeout, and the bound on opening (TCP, TLS, login)."""
        self.max_frame = max_frame
        self.name = f"broker at {host}:{port}"
        self._proto: _Protocol | None = None  # the open connection
        self._live: _Protocol | None = None  # the same, once logged in: requests may go
        self._opening: asyncio.Lock | None = None
        self._correlation = 0
        # (correlation id, future) of every request in flight, oldest first.
        self._pending: collections.deque[tuple[int, asyncio.Future[memoryview]]] = (
            collections.deque())
        self._closed_by_owner = False

    # ------------------------------------------------------------------ state

    @property
    def is_open(self) -> bool:
        return self._live is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def next_correlation_id(self) -> int:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        return self._correlation

    # ------------------------------------------------------------------ requests

    async def request(self, request: Any, timeout_s: float | None = None) -> Any:
        """Send a kio request object; its decoded response (checked by `guard.check`
        before kio reads it)."""
        if self._live is None:
            await self._open()
        return await self._call(request, timeout_s)

    async def request_frame(self, frame: bytes | bytearray, correlation_id: int,
                            timeout_s: float | None = None) -> memoryview:
        """Send a complete request frame built with `correlation_id` (take it from
        `next_correlation_id()`); the response frame without its size prefix: the
        correlation id, the response header's tagged fields if any, the body."""
        if self._live is None:
            await self._open()
        return await self._round_trip(frame, correlation_id, timeout_s)

    async def _call(self, request: Any, timeout_s: float | None) -> Any:
        api_key = int(request.__api_key__)
        version = int(request.__version__)
        cid = self.next_correlation_id()
        proto = self._proto
        frame = await self._round_trip(
            kio_compat.encode_request(request, cid, self.client_id), cid, timeout_s)
        return self._decode(api_key, version, frame, proto)

    def _decode(self, api_key: int, version: int, frame: memoryview,
                proto: _Protocol | None) -> Any:
        cls = kio_compat.response_class(api_key, version)
        try:
            pos = _RESPONSE_MIN
            if kio_compat.response_header_version(api_key, version) >= 1:
                pos = skip_tagged_fields(frame, pos, len(frame), guard.GuardError)
            guard.check(cls, frame, pos)
            obj, _ = kio_compat.decode(cls, frame, pos)
        except Exception as e:  # noqa: BLE001 - guard's or kio's: the peer is broken
            if proto is not None:  # (not a newer connection opened meanwhile)
                self._fail(proto, BrokerConnectionError(
                    f"{self.name}: closed after a malformed {cls.__name__}"))
            raise BrokerConnectionError(
                f"{self.name}: malformed {cls.__name__}: {e}") from None
        return obj

    async def _round_trip(self, frame: bytes | bytearray, cid: int,
                          timeout_s: float | None) -> memoryview:
        proto = self._proto
        if proto is None or proto.closed or proto.transport is None \
                or proto.transport.is_closing():
            raise BrokerConnectionError(f"{self.name}: the connection was closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[memoryview] = loop.create_future()
        self._pending.append((cid, fut))
        try:
            proto.transport.write(frame)
        except (OSError, RuntimeError) as e:  # (uvloop: a transport closed under it)
            self._fail(proto, BrokerConnectionError(f"{self.name}: cannot write: {e!r}"))
            raise BrokerConnectionError(f"{self.name}: cannot write: {e!r}") from e
        timer = loop.call_later(self.timeout_s if timeout_s is None else timeout_s,
                                self._timed_out, proto, fut)
        try:
            if proto.paused is not None:
                await asyncio.shield(proto.paused)
            return await fut
        except BaseException:
            # Timed out (the timer poisoned it already), cancelled, or the connection
            # failed: if this request's answer can still arrive, nothing later on this
            # connection can be trusted to be in step.
            if not fut.done() or fut.cancelled():
                self._fail(proto, BrokerConnectionError(
                    f"{self.name}: closed, a request in flight was abandoned"))
            raise
        finally:
            timer.cancel()

    def _timed_out(self, proto: _Protocol, fut: asyncio.Future[memoryview]) -> None:
        if fut.done():
            return
        fut.set_exception(RequestTimeoutError(f"{self.name}: no response in time"))
        self._fail(proto, BrokerConnectionError(
            f"{self.name}: closed, an earlier request timed out"))

    # ------------------------------------------------------------------ the transport

    def _frames(self, proto: _Protocol, frames: list[memoryview]) -> None:
        if proto is not self._proto:
            return
        pending = self._pending
        for frame in frames:
            if not pending:
                self._fail(proto, BrokerConnectionError(
                    f"{self.name}: a response to no request"))
                return
            cid, fut = pending.popleft()
            (got,) = _I32.unpack_from(frame, 0)
            if got != cid:
                error = BrokerConnectionError(
                    f"{self.name}: responses out of step (correlation id {got},"
                    f" expected {cid})")
                if not fut.done():
                    fut.set_exception(error)
                self._fail(proto, error)
                return
            if not fut.done():
                fut.set_result(frame)

    def _fail(self, proto: _Protocol, error: BrokerConnectionError) -> None:
        """Close `proto` (if it is still this connection's) and fail what is in flight."""
        if proto is not self._proto:
            return
        self._proto = self._live = None
        proto.closed = True
        if proto.transport is not None:
            proto.transport.abort()
        pending, self._pending = self._pending, collections.deque()
        for _, fut in pending:
            if not fut.done():
                fut.set_exception(error)
        proto._wake_writer()

    def _poison(self, error: BrokerConnectionError) -> None:
        if self._proto is not None:
            self._fail(self._proto, error)

    async def open(self) -> None:
        """Open (and log in) now if not open; `request` does it when needed."""
        if self._live is None:
            await self._open()

    async def _open(self) -> None:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._live is not None:
                return
            self._closed_by_owner = False
            try:
                await asyncio.wait_for(self._dial(), self.timeout_s)
            except BrokerConnectionError:
                raise
            except (OSError, TimeoutError, ssl.SSLError, EOFError) as e:
                raise BrokerConnectionError(f"{self.name}: cannot connect: {e!r}") from e

    async def _dial(self) -> None:
        loop = asyncio.get_running_loop()
        receiver = FrameReceiver(self.max_frame, min_size=_RESPONSE_MIN)
        tls = self.dialer.ssl
        _, proto = await loop.create_connection(
            lambda: _Protocol(self, receiver), self.host, self.port, ssl=tls,
            server_hostname=self.host if tls is not None else None)
        self._poison(BrokerConnectionError(f"{self.name}: replaced"))
        self._proto = proto
        if self.dialer.login is not None:
            try:
                await self.dialer.login(lambda req: self._call(req, None))
            except BaseException:
                self._poison(BrokerConnectionError(f"{self.name}: login failed"))
                raise
        if self._proto is not proto or self._closed_by_owner:
            self._poison(BrokerConnectionError(f"{self.name}: closed while opening"))
            raise BrokerConnectionError(f"{self.name}: closed while opening")
        self._live = proto

    def close(self) -> None:
        """Close now; requests in flight fail. The next request opens it again."""
        self._closed_by_owner = True
        self._poison(BrokerConnectionError(f"{self.name}: the connection was closed"))

    def detach(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Hand the open, idle connection over as asyncio streams (for callers that then
        speak their own protocol over a logged-in socket: `yak.security.connect`'s
        `open_connection`). This object is closed afterwards."""
        proto = self._live
        if proto is None or proto.transport is None or self._pending:
            raise BrokerConnectionError(f"{self.name}: nothing idle to detach")
        self._proto = self._live = None
        transport = proto.transport
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 16, loop=loop)
        stream_proto = asyncio.StreamReaderProtocol(reader, loop=loop)
        transport.set_protocol(stream_proto)
        stream_proto.connection_made(transport)
        return reader, asyncio.StreamWriter(transport, stream_proto, reader, loop)

