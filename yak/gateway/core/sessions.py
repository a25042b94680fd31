"""Consumer sessions: one aiokafka consumer each, shared by every transport.

A session is what the REST Proxy calls a consumer instance, what a WebSocket
subscription and a gRPC `Consume` stream hold for their lifetime: subscribe / assign,
poll (long poll with a backlog, for REST) or stream (for pushing transports), commit
(given offsets, or everything delivered), seek and close.

aiokafka rather than confluent-kafka because a session may sit in a long poll:
`getmany(timeout_ms=...)` is a coroutine that returns as soon as a fetch brings data, so
hundreds of idle sessions cost a few sockets, not an executor thread each.

Named sessions (REST) nobody has touched for `instance_timeout_s` are closed, as the
Confluent proxy does with `consumer.instance.timeout.ms`. Stream sessions live exactly
as long as their stream and are closed by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata

from yak.gateway.cluster import ClusterClient
from yak.gateway.core.errors import GatewayError, Reason
from yak.gateway.settings import DEFAULT_INSTANCE_TIMEOUT_S

log = logging.getLogger(__name__)

DEFAULT_POLL_TIMEOUT_MS = 1000  # the REST Proxy's consumer.request.timeout.ms default
POLL_MAX_RECORDS = 500
# What a pushing transport lets aiokafka prefetch: a client that stops reading stops the
# stream, and then at most this much per partition (and 4x per fetch) waits in memory.
STREAM_PREFETCH_BYTES_PER_PARTITION = 256 * 1024
OFFSET_RESETS = ("earliest", "latest", "none")

_KAFKA_FAILURES = (KafkaError, IllegalStateError)


def _kafka_failure(what: str, e: BaseException) -> GatewayError:
    name = getattr(e, "message", "")
    if isinstance(name, str) and name.endswith("_AUTHORIZATION_FAILED"):
        # The cluster refused this session's principal (a caller's own login): say so.
        return GatewayError(Reason.PERMISSION_DENIED, f"{name}: {what} refused: {e}",
                            int(getattr(e, "errno", -1)), name)
    return GatewayError(Reason.KAFKA_ERROR, f"{what} failed: {e!r}")


def _tp_key(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition


class ConsumerSession:
    """One consumer and what it has handed out."""

    def __init__(self, session_id: str, group: str | None, consumer: AIOKafkaConsumer,
                 auto_commit: bool, fmt: str = "binary",
                 poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS) -> None:
        self.id = session_id
        self.group = group
        self.consumer = consumer
        self.auto_commit = auto_commit
        self.format = fmt
        self.poll_timeout_ms = poll_timeout_ms
        self.last_used = time.monotonic()
        # Records fetched but held back by a response's byte limit: the next poll starts here.
        self.backlog: deque[ConsumerRecord] = deque()
        # Next offset per partition of what the client has been given (commit with no offsets).
        self.delivered: dict[TopicPartition, int] = {}
        self.lock = asyncio.Lock()
        self.closed = False

    def touch(self) -> None:
        self.last_used = time.monotonic()

    # ---------------------------------------------------------------- membership

    def subscription(self) -> list[str]:
        return sorted(self.consumer.subscription() or ())

    def assignment(self) -> list[TopicPartition]:
        return sorted(self.consumer.assignment(), key=_tp_key)

    def subscribe(self, topics: list[str] | None = None, pattern: str | None = None) -> None:
        """Exactly one of `topics` (non-empty) or `pattern`."""
        if bool(topics) == bool(pattern):
            raise GatewayError(Reason.INVALID_ARGUMENT,
                               "give exactly one of topics (non-empty) or topic_pattern")
        if self.consumer.assignment() and not self.consumer.subscription():
            raise GatewayError(Reason.ILLEGAL_STATE, "Subscription to topics, partitions and "
                                                     "pattern are mutually exclusive.")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise GatewayError(Reason.INVALID_ARGUMENT, f"bad topic_pattern: {e}") from None
        try:
            if topics:
                self.consumer.subscribe(topics=topics)
            else:
                self.consumer.subscribe(pattern=pattern)
        except (IllegalStateError, ValueError, TypeError) as e:
            raise GatewayError(Reason.ILLEGAL_STATE, str(e)) from None
        self._drop_unassigned()

    def assign(self, tps: list[TopicPartition]) -> None:
        if self.consumer.subscription():
            raise GatewayError(Reason.ILLEGAL_STATE, "Subscription to topics, partitions and "
                                                     "pattern are mutually exclusive.")
        try:
            self.consumer.assign(tps)
        except (IllegalStateError, ValueError, TypeError) as e:
            raise GatewayError(Reason.ILLEGAL_STATE, str(e)) from None
        self._drop_unassigned()

    def unsubscribe(self) -> None:
        self.consumer.unsubscribe()
        self.backlog.clear()

    # ---------------------------------------------------------------- reading

    async def poll(self, timeout_ms: int, max_bytes: int,
                   max_records: int = POLL_MAX_RECORDS) -> list[ConsumerRecord]:
        """Long poll: return as soon as some records arrive, or [] after `timeout_ms`.

        At most `max_bytes` of keys and values (at least one record); what is cut off
        stays in the backlog for the next poll, never dropped.
        """
        async with self.lock:
            self.touch()
            if not self.backlog and (
                self.consumer.subscription() or self.consumer.assignment()
            ):
                try:
                    batch = await self.consumer.getmany(timeout_ms=timeout_ms,
                                                        max_records=max_records)
                except _KAFKA_FAILURES as e:
                    raise _kafka_failure("fetch", e) from None
                for tp in sorted(batch, key=_tp_key):
                    self.backlog.extend(batch[tp])
            elif not self.backlog:
                await asyncio.sleep(min(timeout_ms, 1000) / 1000)
            out: list[ConsumerRecord] = []
            used = 0
            while self.backlog:
                r = self.backlog[0]
                size = (r.serialized_key_size or 0) + (r.serialized_value_size or 0)
                if out and used + size > max_bytes:
                    break
                out.append(self.backlog.popleft())
                used += max(size, 0)
                self.delivered[TopicPartition(r.topic, r.partition)] = r.offset + 1
            self.touch()
            return out

    def push_back(self, records: list[ConsumerRecord]) -> None:
        """Undo delivery of `records` (in order): the next poll starts with them again."""
        for r in reversed(records):
            self.backlog.appendleft(r)
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            if self.delivered.get(tp, -1) > r.offset:
                self.delivered[tp] = r.offset

    async def stream(self, max_records: int,
                     poll_ms: int = 1000) -> AsyncIterator[list[ConsumerRecord]]:
        """Batches of at most `max_records`, forever, for transports that push.

        A batch counts as delivered when it is handed out. The caller sends it before
        asking for the next one, so a client that stops reading stops the fetching.
        """
        while True:
            try:
                batch = await self.consumer.getmany(timeout_ms=poll_ms, max_records=max_records)
            except _KAFKA_FAILURES as e:
                raise _kafka_failure("fetch", e) from None
            if not batch:
                continue
            records: list[ConsumerRecord] = []
            for tp in sorted(batch, key=_tp_key):
                rs = batch[tp]
                records.extend(rs)
                self.delivered[tp] = rs[-1].offset + 1
            self.touch()
            yield records

    # ---------------------------------------------------------------- offsets

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> dict[
            TopicPartition, int]:
        """Commit `offsets` (next offset to read), or everything delivered; returns them."""
        async with self.lock:
            self.touch()
            todo = offsets if offsets is not None else dict(self.delivered)
            if todo:
                try:
                    await self.consumer.commit(
                        {tp: OffsetAndMetadata(off, "") for tp, off in todo.items()}
                    )
                except _KAFKA_FAILURES as e:
                    raise _kafka_failure("commit", e) from None
            return todo

    async def committed(self, tp: TopicPartition) -> int | None:
        try:
            return await self.consumer.committed(tp)
        except _KAFKA_FAILURES as e:
            raise _kafka_failure("offset fetch", e) from None

    def _check_assigned(self, tps: Iterable[TopicPartition]) -> None:
        assigned = self.consumer.assignment()
        for tp in tps:
            if tp not in assigned:
                raise GatewayError(Reason.ILLEGAL_STATE,
                                   f"{tp.topic}-{tp.partition} is not assigned to this consumer")

    def seek(self, offsets: dict[TopicPartition, int]) -> None:
        self._check_assigned(offsets)
        for tp, offset in offsets.items():
            self._drop_backlog(tp)
            self.consumer.seek(tp, offset)

    async def seek_to(self, tps: list[TopicPartition], beginning: bool) -> None:
        self._check_assigned(tps)
        for tp in tps:
            self._drop_backlog(tp)
        if beginning:
            await self.consumer.seek_to_beginning(*tps)
        else:
            await self.consumer.seek_to_end(*tps)

    def _drop_backlog(self, tp: TopicPartition) -> None:
        self.backlog = deque(
            r for r in self.backlog if (r.topic, r.partition) != (tp.topic, tp.partition)
        )

    def _drop_unassigned(self) -> None:
        assigned = self.consumer.assignment()
        self.backlog = deque(
            r for r in self.backlog if TopicPartition(r.topic, r.partition) in assigned
        )

    async def close(self) -> None:
        """Leave the group (auto-commit sessions commit first, as aiokafka does)."""
        if self.closed:
            return
        self.closed = True
        try:
            await asyncio.wait_for(self.consumer.stop(), 10)
        except Exception:
            log.warning("stopping consumer session %s/%s failed", self.group, self.id,
                        exc_info=True)


class SessionRegistry:
    """Every consumer session of this gateway.

    Named sessions (REST consumer instances) are keyed by (group, name) and expire when
    idle; stream sessions (WebSocket, gRPC) are keyed by id and closed by their stream.
    """

    def __init__(self, cluster: ClusterClient,
                 instance_timeout_s: float = DEFAULT_INSTANCE_TIMEOUT_S) -> None:
        self.cluster = cluster
        self.instance_timeout_s = instance_timeout_s
        self.instances: dict[tuple[str, str], ConsumerSession] = {}
        self.streams: dict[str, ConsumerSession] = {}
        self._reaper: asyncio.Task[None] | None = None

    async def _consumer(self, group: str | None, client_id: str, auto_offset_reset: str,
                        auto_commit: bool, **overrides: Any) -> AIOKafkaConsumer:
        if auto_offset_reset not in OFFSET_RESETS:
            raise GatewayError(Reason.INVALID_ARGUMENT,
                               f"auto_offset_reset must be one of {', '.join(OFFSET_RESETS)}")
        return await self.cluster.start_consumer(
            group, client_id, auto_offset_reset=auto_offset_reset,
            enable_auto_commit=auto_commit and group is not None, **overrides,
        )

    # ---------------------------------------------------------------- named (REST)

    async def create(self, group: str, name: str | None, fmt: str, auto_offset_reset: str,
                     auto_commit: bool, fetch_min_bytes: int | None = None,
                     poll_timeout_ms: int | None = None) -> ConsumerSession:
        """`poll_timeout_ms`: how long a poll waits for data when the caller gives no
        timeout (the REST Proxy's consumer.request.timeout.ms)."""
        name = name or f"rest-consumer-{uuid.uuid4().hex[:12]}"
        if (group, name) in self.instances:
            raise GatewayError(Reason.SESSION_EXISTS,
                               "Consumer with specified consumer ID already exists in the "
                               f"specified consumer group: {name}")
        consumer = await self._consumer(group, f"yak-rest-{name}", auto_offset_reset,
                                        auto_commit, fetch_min_bytes=fetch_min_bytes or 1)
        if (group, name) in self.instances:  # created meanwhile by a concurrent request
            await consumer.stop()
            raise GatewayError(Reason.SESSION_EXISTS,
                               "Consumer with specified consumer ID already exists in the "
                               f"specified consumer group: {name}")
        session = ConsumerSession(name, group, consumer, auto_commit, fmt,
                                  poll_timeout_ms or DEFAULT_POLL_TIMEOUT_MS)
        self.instances[(group, name)] = session
        self._start_reaper()
        return session

    def get(self, group: str, name: str) -> ConsumerSession:
        session = self.instances.get((group, name))
        if session is None:
            raise GatewayError(Reason.SESSION_NOT_FOUND, "Consumer instance not found.")
        session.touch()
        return session

    async def delete(self, group: str, name: str) -> None:
        session = self.instances.pop((group, name), None)
        if session is None:
            raise GatewayError(Reason.SESSION_NOT_FOUND, "Consumer instance not found.")
        await session.close()

    async def reap(self, now: float | None = None) -> list[tuple[str, str]]:
        """Close named sessions idle longer than the timeout; returns the keys closed."""
        now = time.monotonic() if now is None else now
        idle = [
            key for key, s in self.instances.items()
            if now - s.last_used > self.instance_timeout_s and not s.lock.locked()
        ]
        for key in idle:
            log.info("REST consumer %s/%s expired after %.0f s idle", *key,
                     self.instance_timeout_s)
            with contextlib.suppress(GatewayError):
                await self.delete(*key)
        return idle

    def _start_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_loop())

    async def _reap_loop(self) -> None:
        period = max(min(self.instance_timeout_s / 4, 5.0), 0.1)
        while True:
            await asyncio.sleep(period)
            try:
                await self.reap()
            except Exception:
                log.exception("reaping REST consumers failed")

    # ---------------------------------------------------------------- streams

    async def open_stream(self, group: str | None, topics: list[str], auto_offset_reset: str,
                          auto_commit: bool, client_id: str) -> ConsumerSession:
        """A subscribed session for one stream; close it with `close_stream`."""
        consumer = await self._consumer(
            group, client_id, auto_offset_reset, auto_commit,
            max_partition_fetch_bytes=STREAM_PREFETCH_BYTES_PER_PARTITION,
            fetch_max_bytes=4 * STREAM_PREFETCH_BYTES_PER_PARTITION,
        )
        session = ConsumerSession(uuid.uuid4().hex, group, consumer, auto_commit)
        try:
            session.subscribe(topics=topics)
        except BaseException:
            await session.close()
            raise
        self.streams[session.id] = session
        return session

    def stream(self, session_id: str) -> ConsumerSession:
        session = self.streams.get(session_id)
        if session is None:
            raise GatewayError(Reason.SESSION_NOT_FOUND,
                               f"no open stream session {session_id!r}")
        return session

    async def close_stream(self, session: ConsumerSession) -> None:
        self.streams.pop(session.id, None)
        await session.close()

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        for key in list(self.instances):
            with contextlib.suppress(GatewayError):
                await self.delete(*key)
        for session in list(self.streams.values()):
            await self.close_stream(session)
