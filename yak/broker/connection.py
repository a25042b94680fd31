"""One client connection: framing, header parsing, dispatch, ordered responses.

Kafka's contract per connection is strict ordering: responses leave in request order.
Kafka mutes a channel while one request is in flight, so a producer's pipelined acks=all
requests each wait for their own fsync or replication round in turn. Yak pipelines the two
APIs whose handlers wait on delayed operations, Produce and Fetch (Kafka's purgatory APIs):
consecutive ones on a connection are started in order and wait together, but each takes
effect only after the ones before it: every pipelined request gets an `EffectTurn`
(yak/partition/ordering.py) that the partition layer awaits just before the appends or
the read, after whatever the request awaited first (KIP-890 verification with a remote
transaction coordinator), and that this connection releases when the request ends. Each
response is written only after the one before it, so responses leave in request order. Any other API is a barrier: it starts once everything before it has
answered, and nothing after it starts until it has (Kafka's muting). The generic cost per
request is kept low (issue 28: an RF=3 leader serves two follower Fetches per Produce):
while the serve loop waits for a frame, a Produce or Fetch starts from the read that
completed it, without waking that loop; its first step runs inline, and only a request
that then waits gets a task. At most
`MAX_INFLIGHT` requests (`MAX_INFLIGHT_BYTES` of frames, `MAX_INFLIGHT_FETCHES` Fetches)
are in flight per connection.
Different connections run concurrently on the event loop. Memory per connection is
bounded on both sides:

- reading: a `BufferedProtocol`: the socket (or TLS) writes into a sans-IO
  `yak.protocol.framing.FrameReceiver`'s buffer, so a 1 MiB Produce spanning reads is
  never copied or joined (issue 28). A frame's 4-byte length is checked against
  `socket.request.max.bytes` before anything is kept (else: close); a frame is only as big
  in memory as the bytes that arrived; reading pauses once `MAX_QUEUED_REQUESTS` frames or
  `MAX_QUEUED_BYTES` wait. A frame is a read-only view that is never written over while
  anything holds it (a queued request, a pipelined request's turn, a disk write). A
  Produce lets its views go once its records are in the log, before acks=all waits, so
  the buffers are reused while requests wait for their replicas; buffers are released
  after `RECEIVE_BUFFER_IDLE_S` without a read;
- writing: when the transport's write buffer is above its high-water mark (a slow
  consumer), this connection stops handling requests until it drains. Other
  connections, producers included, keep running.

About 650 lines: reading, ordering and writing share the connection's state (the
queue, the turn chain, mute and back-pressure), so they stay one class. How requests wait
for each other and start without a task is `yak.broker.request_steps`; the error-only
responses for a handler that raised are `yak.broker.error_responses`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import logging
import struct
import time
from typing import TYPE_CHECKING, Any

from yak.broker import handlers
from yak.broker.context import RawResponse, RequestContext
from yak.broker.error_responses import error_response
from yak.broker.request_steps import finished, resumed
from yak.broker.sendfile import HAVE_SENDFILE, ResponseWriter
from yak.errors import KafkaError
from yak.partition.ordering import EffectTurn
from yak.protocol import guard, kio_compat
from yak.protocol.framing import (
    MIN_FRAME_SIZE,
    FrameReceiver,
    HeaderError,
    parse_request_header,
    response_frame_head,
    skip_header_tagged_fields,
)
from yak.protocol.kio_compat import ErrorCode
from yak.security.channel import NoMatchingRule, Session
from yak.security.sasl import SASL_HANDSHAKE, GateAction

if TYPE_CHECKING:
    from yak.broker.broker import Broker
    from yak.security.channel import ChannelBuilder

log = logging.getLogger(__name__)

MAX_QUEUED_REQUESTS = 16
# Pipelined Produce/Fetch requests per connection awaiting their turn, in number and in
# frame bytes (a waiting request keeps its frame). A producer that does not wait for acks
# (librdkafka with idempotence off allows 1M in flight) sends many small requests; each
# waits a replication round trip, so the count bounds throughput at count / round trip.
MAX_INFLIGHT = 128
MAX_INFLIGHT_BYTES = 32 * 1024 * 1024
# A Fetch holds its response's buffers until its turn to write: few at a time, so a client
# that asks for many and reads none (a slow or hostile consumer) cannot pin that many
# responses in memory. Consumers and followers send one Fetch at a time anyway.
MAX_INFLIGHT_FETCHES = 2
FETCH_KEY = 1
# Produce (0) and Fetch (FETCH_KEY): handlers that park on delayed operations; `_serve`
# tests the frame's two API key bytes for these two.
PIPELINED_APIS = frozenset({0, FETCH_KEY})
MAX_QUEUED_BYTES = 32 * 1024 * 1024
WRITE_HIGH_WATER = 4 * 1024 * 1024
WRITE_LOW_WATER = 1024 * 1024

API_VERSIONS_KEY = 18
RECEIVE_BUFFER_IDLE_S = 10.0  # no read for this long: release the receive buffers



class ProtocolViolation(Exception):
    """The peer broke framing or sent something we refuse to parse: close, never answer."""


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker: Broker, channel: ChannelBuilder | None = None) -> None:
        self.broker = broker
        # How this listener authenticates its connections (None: the broker's first).
        self.channel = channel or next(iter(broker.channel_builders.values()))
        self.session: Session | None = None
        self.max_request = int(broker.config.socket_request_max_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] | None = None
        # Spare buffers for every request that may wait unhandled (the queue, the one the
        # serve loop holds while the in-flight window is full, reads past the pause), within
        # the queue's bytes: frames leave in arrival order, so the oldest buffers are the
        # ones freed first (issue 28; buffers allocated for an RF=3 leader's 1 KiB Produce
        # requests, one profile each: 314 for 321 with 3 spares, 131/349 with 16, 55/314
        # with 20).
        self._frames = FrameReceiver(self.max_request, spares=MAX_QUEUED_REQUESTS + 4,
                                     spare_bytes=MAX_QUEUED_BYTES)
        self._reads = 0  # reads so far; the idle timer compares it with its last look
        self._reads_seen = -1
        self._idle_timer: asyncio.TimerHandle | None = None
        # handled-in-order queue
        self._queue: collections.deque[memoryview] = collections.deque()
        self._queued_bytes = 0
        self._reading_paused = False
        self._wakeup: asyncio.Future[None] | None = None
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        # Pipelined requests in request order; each writes after the one before it.
        self._inflight: collections.deque[asyncio.Task[int]] = collections.deque()
        self._inflight_bytes = 0
        self._inflight_fetches = 0
        # The order of effects of pipelined requests (yak/partition/ordering.py): each
        # gets a turn chained to the one before it.
        self._last_turn: EffectTurn | None = None
        self._muted_until = 0.0  # KIP-219: no new request starts before (loop time)
        self._writer: ResponseWriter | None = None  # set when the transport is
        self._transport_paused = False  # above its high water mark (pause_writing)
        self.extras: dict[str, Any] = {}
        # Per (api_key, api_version) seen on this connection: its handler and whether its
        # request header is v2 (tagged fields follow client_id), so a request costs one
        # dict lookup instead of the registry, the version range and kio's class lookup.
        self._dispatch: dict[int, tuple[handlers.HandlerSpec, bool]] = {}
        self._loop: asyncio.AbstractEventLoop  # (set by connection_made)
        self._metrics = broker.metrics
        self._request_quota = broker.quotas.request

    # ------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.peer = (peer[0], peer[1]) if peer else None
        ssl_object = transport.get_extra_info("ssl_object")
        cert = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        try:
            self.session = self.channel.session(self.peer[0] if self.peer else "", cert)
        except (NoMatchingRule, ValueError) as e:
            # Kafka fails the SSL authentication: the connection closes, nothing is served.
            log.info("closing %s connection from %s: %s", self.channel.listener_name,
                     self.peer, e)
            self._closed = True
            transport.abort()
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
        # Zero-copy fetch (issue 28): on a plaintext socket, Fetch records stay in the
        # segment files and go out with sendfile; TLS encrypts in user space, so it copies.
        sock = transport.get_extra_info("socket")
        sendfile_fd = -1
        if (ssl_object is None and sock is not None and HAVE_SENDFILE
                and self.broker.config.socket_sendfile_enable):
            sendfile_fd = sock.fileno()
            self.extras["sendfile"] = True
        self._writer = ResponseWriter(transport, sendfile_fd,  # type: ignore[arg-type]
                                      self._writer_blocked, self._writer_failed)
        loop = self._loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._serve())
        self._idle_timer = loop.call_later(RECEIVE_BUFFER_IDLE_S, self._release_if_idle)
        self.broker.connections.add(self)

    def _release_if_idle(self) -> None:
        """Every `RECEIVE_BUFFER_IDLE_S`: nothing read since the last look, release the
        receive buffers (frames still held keep theirs alive)."""
        if self._closed:
            return
        if self._reads == self._reads_seen:
            self._frames.release()
        self._reads_seen = self._reads
        self._idle_timer = asyncio.get_running_loop().call_later(
            RECEIVE_BUFFER_IDLE_S, self._release_if_idle)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.discard()
        self._queue.clear()
        self._can_write.set()
        self._wake()
        self._cancel_inflight()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self.broker.connections.discard(self)

    def _cancel_inflight(self) -> None:
        """Nobody will read the answers: stop waiting for them (a Produce already appended
        stays appended, as with any request whose connection dropped)."""
        for task in self._inflight:
            task.cancel()
        self._inflight.clear()

    def pause_writing(self) -> None:
        self._transport_paused = True
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._transport_paused = False
        if self._writer is None or not self._writer.backlogged:
            self._can_write.set()

    def _writer_blocked(self, blocked: bool) -> None:
        """The response writer holds a backlog (the socket is full): read no new request
        until it is sent, as while the transport is above its high water mark."""
        if blocked:
            self._can_write.clear()
        elif not self._transport_paused:
            self._can_write.set()

    def _writer_failed(self, e: Exception) -> None:
        """A region cut under us (truncated) cannot be sent whole once its frame length
        went out, so the connection closes, as Kafka's does."""
        log.info("closing connection from %s: fetch response not sent: %s", self.peer, e)
        self.close()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._closed:
            return
        self._reads += 1
        receiver = self._frames
        frames = receiver.buffer_updated(nbytes)
        if frames:
            self._enqueue(frames)
        if receiver.error is not None:
            log.info("closing connection from %s: %s", self.peer, receiver.error)
            self.close()

    def _enqueue(self, frames: list[memoryview]) -> None:
        """Hand over the frames one read completed, in arrival order. While the serve loop
        waits for a frame (nothing queued, nothing it is waiting on: no barrier, no full
        window, no muting, no write back-pressure), the pipelined ones among the first
        frames start here, as that loop would start them, without waking it for each
        (issue 28: a follower's or consumer's Fetch is one read, and this saved the loop's
        wake-up and step per request); the rest are queued and wake it once."""
        w = self._wakeup
        if w is not None and not w.done():
            started = 0
            for frame in frames:
                size = len(frame)
                # (closed or muted: a request started here may have done either)
                if size < 2 or frame[0] != 0 or frame[1] > FETCH_KEY or self._closed \
                        or self._muted_until or not self._can_write.is_set() \
                        or self._window_full(frame[1]) or not self._pipelinable():
                    break
                self._start_pipelined(frame, size, frame[1], inline=True)
                started += 1
            if self._closed:
                return
            if started:
                if started == len(frames):
                    return
                frames = frames[started:]
        queue = self._queue
        queue.extend(frames)
        self._queued_bytes += sum(map(len, frames))
        if (
            len(queue) >= MAX_QUEUED_REQUESTS or self._queued_bytes >= MAX_QUEUED_BYTES
        ) and not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def _wake(self) -> None:
        w = self._wakeup
        if w is not None and not w.done():
            w.set_result(None)

    def close(self, flush: bool = False) -> None:
        """Close now; `flush` first sends what was written (a last response, e.g. a failed
        login's SASL_AUTHENTICATION_FAILED)."""
        if not self._closed:
            self._closed = True
            self._queue.clear()
            self._wake()
            if not flush:
                self._cancel_inflight()
            if self._writer is not None:
                if flush:
                    self._writer.flush_to_transport()
                else:
                    self._writer.discard()
            if self.transport is not None:
                if flush:
                    self.transport.close()
                else:
                    self.transport.abort()

    # ------------------------------------------------------------ request loop

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        # (bound once: this loop runs once per request, issue 28)
        queue = self._queue
        inflight = self._inflight
        try:
            while not self._closed:
                if not queue:
                    self._wakeup = loop.create_future()
                    await self._wakeup
                    self._wakeup = None
                    continue
                frame = queue.popleft()
                size = len(frame)
                self._queued_bytes -= size
                if self._reading_paused and len(queue) < MAX_QUEUED_REQUESTS // 2 \
                        and self._queued_bytes < MAX_QUEUED_BYTES // 2:
                    self._reading_paused = False
                    if self.transport is not None and not self._closed:
                        self.transport.resume_reading()
                if self._muted_until:
                    muted = self._muted_until - loop.time()
                    if muted > 0:
                        # KIP-219: the response went out at once, carrying throttle_time_ms;
                        # the channel stays muted (nothing more is handled) until it is over.
                        await asyncio.sleep(muted)
                    else:
                        self._muted_until = 0.0  # over: no clock read per request
                # Produce (0) or Fetch (1): the API key's high byte 0, its low byte 0 or 1.
                api = frame[1] if size >= 2 and frame[0] == 0 and frame[1] <= FETCH_KEY \
                    and self._pipelinable() else -1
                if api >= 0:
                    while self._window_full(api):
                        await self._wait_oldest()
                    self._start_pipelined(frame, size, api, inline=False)
                else:
                    while inflight:
                        await self._wait_oldest()
                    if self._closed:
                        return
                    try:
                        self._mute(await self._handle_frame(frame))
                    except ProtocolViolation as e:
                        log.info("closing connection from %s: %s", self.peer, e)
                        self.close()
                        return
                del frame  # (held by its request alone: see _pipelined)
                if not self._can_write.is_set():
                    await self._can_write.wait()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection loop for %s failed", self.peer)
            self.close()

    def _window_full(self, api: int) -> bool:
        """The in-flight limits leave no room for one more pipelined request of `api`."""
        inflight = self._inflight
        return bool(inflight) and (
            len(inflight) >= MAX_INFLIGHT
            or self._inflight_bytes >= MAX_INFLIGHT_BYTES
            or (api == FETCH_KEY and self._inflight_fetches >= MAX_INFLIGHT_FETCHES))

    def _start_pipelined(self, frame: memoryview, size: int, api: int, inline: bool) -> None:
        """Start the next pipelined request in arrival order (the window has room): it
        answers after the request before it, its turn is chained to that one's.

        `inline` (from a read, outside any task): its first step runs here. The handler's
        code up to its first suspension then runs with no current task, so it must not
        use `asyncio.timeout` or `asyncio.TaskGroup` there (they raise at once, so the
        request fails: every Produce and Fetch test would), nor rely on
        `asyncio.current_task()` (None); after its first suspension it runs in its own
        task as before (produce.py's `current_task()` is after one). From the
        serve loop (inside that loop's task, whose timeouts or task groups a handler must
        never see) it gets its task at once."""
        inflight = self._inflight
        while inflight and inflight[0].done():
            inflight.popleft()
        prev = inflight[-1] if inflight else None
        # Counted here, not when the task first runs: frames that arrived together are
        # taken in one go, before any of their tasks has run.
        self._inflight_bytes += size
        self._inflight_fetches += api == FETCH_KEY
        turn = self._last_turn = EffectTurn(self._last_turn)
        coro = self._pipelined([frame], size, prev, api, turn)
        del frame
        if not inline:
            inflight.append(self._loop.create_task(coro))
            return
        # Its first step runs here, as the first step of its task would have run next:
        # a request that completes without waiting (answered at once, its response
        # written: so the one before it had answered) needs no task at all; one that waits
        # goes on in a task from where it stopped (issue 28: a task per request, with its
        # registration in asyncio's set of tasks and its first scheduled step, was a third
        # of the connection's own cost per request).
        try:
            awaited = coro.send(None)
        except StopIteration:
            return
        except asyncio.CancelledError:
            return  # (as its task would have ended; `_pipelined` released its turn)
        except Exception:
            log.exception("connection loop for %s failed", self.peer)
            self.close()
            return
        inflight.append(self._loop.create_task(resumed(coro, awaited)))

    def _pipelinable(self) -> bool:
        """A Produce or Fetch may be pipelined: the connection is past any SASL exchange
        (before, everything is handled alone, bare SASL v0 tokens included)."""
        session = self.session
        authenticator = session.authenticator if session is not None else None
        return authenticator is None or (authenticator.authenticated
                                         and not authenticator.awaiting_raw_token)

    async def _wait_oldest(self) -> None:
        task = self._inflight[0]
        await finished(task)
        if self._inflight and self._inflight[0] is task:
            self._inflight.popleft()

    def _mute(self, throttle_ms: int) -> None:
        if throttle_ms:
            until = asyncio.get_running_loop().time() + throttle_ms / 1000
            self._muted_until = max(self._muted_until, until)

    async def _pipelined(self, held: list[memoryview], size: int,
                         prev: asyncio.Task[int] | None, api: int, turn: EffectTurn) -> int:
        """One pipelined request: handled at once, its effects after those of the requests
        before it (`turn`), answered after `prev` answered. The caller counted it in
        flight (bytes, Fetches); this takes it back when it is done, and releases its turn
        however it ends, so a failed request never holds the ones behind it.

        `held` is the frame in a list this empties: the frame is a view of the receive
        buffer, and only the handler may hold it while the request waits (a Produce lets
        its records go once they are in the log, so an acks=all request parked for its
        replicas does not keep the buffer from being reused; issue 28). `size`: the frame's
        bytes, counted in flight."""
        fetch = api == FETCH_KEY
        try:
            throttle_ms = await self._handle_frame(held.pop(), prev, turn)
        except ProtocolViolation as e:
            log.info("closing connection from %s: %s", self.peer, e)
            self.close()
            return 0
        except Exception:
            log.exception("connection loop for %s failed", self.peer)
            self.close()
            return 0
        finally:
            turn.release()
            self._inflight_bytes -= size
            self._inflight_fetches -= fetch
        self._mute(throttle_ms)
        return throttle_ms

    @staticmethod
    async def _turn(prev: asyncio.Task[int]) -> None:
        """Wait until the request before this one has written its response."""
        await finished(prev)

    async def _handle_frame(self, frame: memoryview,
                            prev: asyncio.Task[int] | None = None,
                            turn: EffectTurn | None = None) -> int:
        """Handle one request; returns how long to hold the connection back (quotas).
        `prev`: the pipelined request before this one, whose response goes out first;
        `turn`: its place in the connection's order of effects (None: handled alone)."""
        session = self.session
        authenticator = session.authenticator if session is not None else None
        if authenticator is not None and authenticator.awaiting_raw_token:
            await self._raw_sasl_token(authenticator, frame)
            return 0
        try:
            api_key, api_version, correlation_id, client_id, pos = parse_request_header(frame)
        except HeaderError as e:
            raise ProtocolViolation(str(e)) from None
        if authenticator is not None:
            action = authenticator.gate(api_key, _now_ms())
            if action is GateAction.CLOSE:
                raise ProtocolViolation(
                    f"{kio_compat.api_name(api_key) or api_key} request "
                    + ("after the SASL session expired" if authenticator.authenticated
                       else "before SASL authentication")
                )
            if action is GateAction.ILLEGAL_STATE:
                response = error_response(api_key, api_version, ErrorCode.illegal_sasl_state)
                if response is not None:
                    self._write_response(correlation_id, response)
                self.close(flush=True)
                return 0
        # The API key and version in one int (two int16s, so distinct pairs never meet).
        dispatch_key = (api_key << 16) | (api_version & 0xFFFF)
        dispatch = self._dispatch.get(dispatch_key)
        if dispatch is None:
            spec = handlers.get(api_key)
            if spec is None or not spec.supports(api_version):
                if api_key == API_VERSIONS_KEY:
                    # KIP-511: answer in v0 so any client can learn our range.
                    self._write_response(correlation_id, self._unsupported_api_versions())
                    return 0
                raise ProtocolViolation(f"unsupported API key {api_key} version {api_version}")
            dispatch = self._dispatch[dispatch_key] = (
                spec, kio_compat.request_header_version(api_key, api_version) >= 2)
        spec, flexible = dispatch
        if flexible:
            if pos < len(frame) and frame[pos] == 0:
                pos += 1  # no tagged fields (what every client sends): no call to skip them
            else:
                try:
                    pos = skip_header_tagged_fields(frame, pos)
                except HeaderError as e:
                    raise ProtocolViolation(f"bad request header: {e}") from None
        # Positional, in the field order (broker, api_key, api_version, correlation_id,
        # client_id, connection, header_size, request_size, extras, session,
        # close_connection, throttle_time_ms, turn): keywords cost twice the construction.
        ctx = RequestContext(self.broker, api_key, api_version, correlation_id, client_id,
                             self.peer, pos, len(frame), self.extras, session, False, 0, turn)
        started = _perf_counter()
        try:
            if spec.decode_request is not None:
                request = spec.decode_request(ctx, frame[pos:])
            else:
                cls = kio_compat.request_class(api_key, api_version)
                # kio's native reader aborts the process on inflated counts: bound them first.
                guard.check(cls, frame, pos)
                request, _ = kio_compat.decode(cls, frame, pos)
        except Exception as e:
            raise ProtocolViolation(
                f"undecodable {kio_compat.api_name(api_key)} v{api_version}: {e!r}"
            ) from None
        # From here the decoded request holds what the handler needs of the frame: this
        # frame must not pin the receive buffer while the handler waits (see _pipelined).
        del frame
        try:
            response = await spec.handle(ctx, request)
        except KafkaError as e:
            response = error_response(api_key, api_version, e.code)
            if response is None:
                raise ProtocolViolation(f"{e!r} in a response without an error field") from None
        except Exception:
            log.exception(
                "handler %s v%d failed", kio_compat.api_name(api_key), api_version
            )
            response = error_response(api_key, api_version, ErrorCode.unknown_server_error)
            if response is None:
                raise ProtocolViolation("handler failed") from None
        if (api_key == SASL_HANDSHAKE and authenticator is not None
                and authenticator.awaiting_raw_token):
            # After a v0 handshake the client sends bare SASL tokens, which have no request
            # header and may be shorter than one (a PLAIN token of 4 bytes): lower the
            # receiver's minimum until the exchange is over (before the answer goes out).
            self._frames.min_size = 0
        throttle_ms = ctx.throttle_time_ms
        if self._request_quota.enabled:
            throttle_ms = self._throttle(ctx, started)
        if prev is not None and not prev.done():  # (no coroutine when it has answered)
            await self._turn(prev)
        if throttle_ms and response is not None:
            if hasattr(response, "throttle_time"):
                response = dataclasses.replace(
                    response, throttle_time=datetime.timedelta(milliseconds=throttle_ms)
                )
            elif isinstance(response, RawResponse) and response.throttle_offset is not None:
                head = response.buffers[0]
                at = response.throttle_offset
                struct.pack_into(">i", head, at if at >= 0 else len(head) + at, throttle_ms)
        if response is None or self._closed:
            # acks=0 produces have no response but were handled: they count too.
            self._metrics.record_request(api_key, started)
            return throttle_ms
        try:
            self._write_response(correlation_id, response)
        except Exception:
            # A handler built a response kio cannot encode (e.g. None in a required field).
            log.exception(
                "encoding the %s v%d response failed", kio_compat.api_name(api_key), api_version
            )
            fallback = error_response(api_key, api_version, ErrorCode.unknown_server_error)
            if fallback is None:
                raise ProtocolViolation("unencodable response") from None
            self._write_response(correlation_id, fallback)
        self._metrics.record_request(api_key, started)
        if ctx.close_connection:
            self.close(flush=True)
        return throttle_ms

    def _throttle(self, ctx: RequestContext, started: float) -> int:
        """The request quota (`request_percentage`: handler time as a share of one thread;
        the caller checked it is enabled) on top of what the handler applied itself (byte
        rates): the longer throttle wins."""
        pct = (_perf_counter() - started) * 100.0
        t = self._request_quota.record_and_get_throttle_time_ms(
            ctx.principal, ctx.client_id or "", pct
        )
        return max(ctx.throttle_time_ms, t)

    async def _raw_sasl_token(self, authenticator: Any, frame: memoryview) -> None:
        """SaslHandshake v0: the client's tokens follow as bare size-prefixed frames (no
        request header), answered the same way; a failure closes without an answer."""
        result = authenticator.authenticate(bytes(frame), _now_ms())
        if not authenticator.awaiting_raw_token:
            self._frames.min_size = MIN_FRAME_SIZE
        if result.error_code:
            log.info("SASL authentication failed for %s: %s", self.peer, result.error_message)
            if result.delay_ms:
                await asyncio.sleep(result.delay_ms / 1000)
            self.close()
            return
        if self._writer is not None and not self._closed:
            self._writer.write([struct.pack(">i", len(result.auth_bytes)) + result.auth_bytes])

    def _write_response(self, correlation_id: int, response: Any) -> None:
        writer = self._writer
        if writer is None or self._closed:
            return
        if isinstance(response, RawResponse):
            head = response_frame_head(response.size, correlation_id, response.flexible_header)
            writer.write([head, *response.buffers])
        else:
            writer.write([kio_compat.encode_response(correlation_id, response)])

    def _unsupported_api_versions(self) -> Any:
        cls = kio_compat.response_class(API_VERSIONS_KEY, 0)
        mod = kio_compat.schema_module("api_versions", 0, "response")
        keys = tuple(
            mod.ApiVersion(api_key=s.api_key, min_version=s.min_version, max_version=s.max_version)
            for s in sorted(handlers.registry().values(), key=lambda s: s.api_key)
        )
        return cls(error_code=ErrorCode.unsupported_version, api_keys=keys)


_perf_counter = time.perf_counter


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000
