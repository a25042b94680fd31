"""REST consumer instances (Confluent REST Proxy v2 semantics) on aiokafka consumers.

aiokafka rather than confluent-kafka here because every instance is a live consumer
that may sit in a long poll: aiokafka's `getmany(timeout_ms=...)` is a coroutine that
returns as soon as a fetch brings data, so hundreds of idle long polls cost nothing but
a few sockets, whereas librdkafka's `poll()` would hold one executor thread each.

An instance nobody has touched for `instance_timeout_s` is closed (its group membership
is given up), as the Confluent proxy does with `consumer.instance.timeout.ms`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata

from yak.gateway.settings import DEFAULT_INSTANCE_TIMEOUT_S

log = logging.getLogger(__name__)

FORMATS = ("binary", "json", "jsonschema")
DEFAULT_POLL_TIMEOUT_MS = 1000  # the REST Proxy's consumer.request.timeout.ms default


class ConsumerStateError(Exception):
    """An operation that the instance's state forbids (Confluent's 409 family)."""

    def __init__(self, message: str, error_code: int = 40903) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass
class ConsumerInstance:
    group: str
    name: str
    format: str
    consumer: AIOKafkaConsumer
    auto_commit: bool
    poll_timeout_ms: int = 1000
    last_used: float = field(default_factory=time.monotonic)
    # Records fetched but held back by a response's max_bytes: the next GET starts here.
    backlog: deque[ConsumerRecord] = field(default_factory=deque)
    # Next offset per partition of what the client has been given (commit with no body).
    delivered: dict[TopicPartition, int] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def touch(self) -> None:
        self.last_used = time.monotonic()

    async def records(self, timeout_ms: int, max_bytes: int) -> list[ConsumerRecord]:
        """Long poll: return as soon as some records arrive, or [] after `timeout_ms`."""
        async with self.lock:
            self.touch()
            if not self.backlog and (
                self.consumer.subscription() or self.consumer.assignment()
            ):
                batch = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=500)
                for tp in sorted(batch, key=lambda tp: (tp.topic, tp.partition)):
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
        """Undo delivery of `records` (in order): the next GET starts with them again."""
        for r in reversed(records):
            self.backlog.appendleft(r)
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            if self.delivered.get(tp, -1) > r.offset:
                self.delivered[tp] = r.offset

    async def commit(self, offsets: dict[TopicPartition, int] | None) -> None:
        async with self.lock:
            self.touch()
            todo = offsets if offsets is not None else dict(self.delivered)
            if todo:
                await self.consumer.commit(
                    {tp: OffsetAndMetadata(off, "") for tp, off in todo.items()}
                )

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._drop_backlog(tp)
        self.consumer.seek(tp, offset)

    async def seek_to(self, tps: list[TopicPartition], beginning: bool) -> None:
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

    def drop_unassigned(self) -> None:
        assigned = self.consumer.assignment()
        self.backlog = deque(
            r for r in self.backlog if TopicPartition(r.topic, r.partition) in assigned
        )


class ConsumerRegistry:
    """All REST consumer instances of this gateway, keyed by (group, instance name)."""

    def __init__(self, bootstrap: str, instance_timeout_s: float = DEFAULT_INSTANCE_TIMEOUT_S,
                 request_timeout_ms: int = 10_000) -> None:
        self.bootstrap = bootstrap
        self.instance_timeout_s = instance_timeout_s
        self.request_timeout_ms = request_timeout_ms
        self.instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._reaper: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_loop())

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        for key in list(self.instances):
            await self.delete(*key)

    async def create(self, group: str, name: str | None, fmt: str, auto_offset_reset: str,
                     auto_commit: bool, fetch_min_bytes: int | None = None,
                     poll_timeout_ms: int | None = None) -> ConsumerInstance:
        """`poll_timeout_ms` is the REST Proxy's consumer.request.timeout.ms: how long a
        GET records waits for data when the request gives no `timeout`."""
        name = name or f"rest-consumer-{uuid.uuid4().hex[:12]}"
        if (group, name) in self.instances:
            raise ConsumerStateError(
                f"Consumer with specified consumer ID already exists in the specified "
                f"consumer group: {name}", 40902,
            )
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=group,
            client_id=f"yak-rest-{name}",
            enable_auto_commit=auto_commit,
            auto_offset_reset=auto_offset_reset,
            fetch_min_bytes=fetch_min_bytes or 1,
            fetch_max_wait_ms=500,
            request_timeout_ms=self.request_timeout_ms,
            metadata_max_age_ms=5_000,
        )
        await asyncio.wait_for(consumer.start(), self.request_timeout_ms / 1000 + 2)
        inst = ConsumerInstance(group, name, fmt, consumer, auto_commit,
                                poll_timeout_ms=poll_timeout_ms or DEFAULT_POLL_TIMEOUT_MS)
        self.instances[(group, name)] = inst
        self.start()
        return inst

    def get(self, group: str, name: str) -> ConsumerInstance | None:
        inst = self.instances.get((group, name))
        if inst is not None:
            inst.touch()
        return inst

    async def delete(self, group: str, name: str) -> bool:
        inst = self.instances.pop((group, name), None)
        if inst is None:
            return False
        try:
            await asyncio.wait_for(inst.consumer.stop(), 10)
        except Exception:
            log.warning("stopping REST consumer %s/%s failed", group, name, exc_info=True)
        return True

    async def reap(self, now: float | None = None) -> list[tuple[str, str]]:
        """Close instances idle longer than the timeout; returns the keys closed."""
        now = time.monotonic() if now is None else now
        idle = [
            key for key, inst in self.instances.items()
            if now - inst.last_used > self.instance_timeout_s and not inst.lock.locked()
        ]
        for key in idle:
            log.info("REST consumer %s/%s expired after %.0f s idle", *key,
                     self.instance_timeout_s)
            await self.delete(*key)
        return idle

    async def _reap_loop(self) -> None:
        period = max(min(self.instance_timeout_s / 4, 5.0), 0.1)
        while True:
            await asyncio.sleep(period)
            try:
                await self.reap()
            except Exception:
                log.exception("reaping REST consumers failed")


def subscription_of(inst: ConsumerInstance) -> list[str]:
    return sorted(inst.consumer.subscription() or ())


def assignment_of(inst: ConsumerInstance) -> list[dict[str, Any]]:
    return [
        {"topic": tp.topic, "partition": tp.partition}
        for tp in sorted(inst.consumer.assignment(), key=lambda tp: (tp.topic, tp.partition))
    ]
