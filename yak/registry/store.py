"""The `_schemas` log of one gateway's schema registry: Confluent's KafkaStore.

Every gateway keeps the whole registry state in memory (`state.RegistryState`), rebuilt
by reading the compacted topic `_schemas` from the beginning (aiokafka consumer,
partition 0) and then tailing it, so any gateway answers reads. `append` writes records
with acks=all and returns once this gateway's own reader has applied them, so a client
that registers and then reads (through this gateway) sees its schema; `sync` waits until
everything written so far is applied (a leader deciding a write calls it first: another
leader may have written just before).

Nothing starts until used: `ensure_started` creates the topic if needed, starts the
clients and the reader, reads to the end, then calls `on_started` (the registry joins its
leader election there). Everything reaches the cluster over the Kafka protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from yak.registry.errors import OPERATION_TIMEOUT, STORE_ERROR, RegistryError
from yak.registry.state import RegistryState

log = logging.getLogger(__name__)

TOPIC = "_schemas"
START_TIMEOUT_S = 30.0


class KafkaStore:
    """The `_schemas` topic read into `state` and appended to, for one registry."""

    def __init__(self, bootstrap: str, topic: str = TOPIC, timeout_s: float = 10.0,
                 security: Any = None, on_started: Callable[[], None] | None = None) -> None:
        self.bootstrap = bootstrap
        # The gateway's client security (yak.security.client.ClientSecurity; None:
        # PLAINTEXT): the registry's clients log in as the gateway does.
        self.security = security
        self.topic = topic
        self.timeout_s = timeout_s
        self.state = RegistryState()
        self.on_started = on_started
        self._consumer: Any = None
        self._producer: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._started: asyncio.Future[None] | None = None
        self._applied = asyncio.Condition()
        self.reader_error: BaseException | None = None

    @property
    def starting_or_started(self) -> bool:
        """A start has begun (and not failed): the clients exist or are being built."""
        return self._started is not None

    async def ensure_started(self) -> None:
        """Start on first use (the gateway starts nothing until used); later calls just wait."""
        started = self._started
        if started is not None and started.done() and not started.cancelled() \
                and started.exception() is None:
            return  # the common case, on every request: no task, no timer
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            try:
                await self._start()
            except BaseException as e:
                fut, self._started = self._started, None
                fut.set_exception(e)
                fut.exception()  # retrieved: the next request tries again
                await self._close_clients()
                raise self._unavailable(e) from None
            self._started.set_result(None)
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._started), START_TIMEOUT_S)
        except TimeoutError:
            raise RegistryError(500, OPERATION_TIMEOUT,
                                "the schema registry is still loading _schemas") from None
        except RegistryError:
            raise
        except Exception as e:  # the start this request waited for failed
            raise self._unavailable(e) from None

    @staticmethod
    def _unavailable(e: BaseException) -> RegistryError:
        if isinstance(e, RegistryError):
            return e
        return RegistryError(500, STORE_ERROR, f"the _schemas topic is not available: {e!r}")

    async def _start(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

        await self._create_topic()
        tp = TopicPartition(self.topic, 0)
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
            client_id="yak-registry", request_timeout_ms=int(self.timeout_s * 1000),
            fetch_max_wait_ms=500, isolation_level="read_committed",
            auto_offset_reset="earliest", **self._aiokafka_security(),
        )
        await asyncio.wait_for(self._consumer.start(), self.timeout_s)
        self._consumer.assign([tp])
        await self._consumer.seek_to_beginning(tp)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", linger_ms=0,
            client_id="yak-registry", request_timeout_ms=int(self.timeout_s * 1000),
            **self._aiokafka_security(),
        )
        await asyncio.wait_for(self._producer.start(), self.timeout_s)
        self._reader = asyncio.get_running_loop().create_task(self._read(tp),
                                                              name="registry-reader")
        await self.sync(START_TIMEOUT_S)
        if self.on_started is not None:
            self.on_started()

    def _aiokafka_security(self) -> dict[str, Any]:
        return self.security.aiokafka() if self.security is not None else {}

    async def _create_topic(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        def create() -> None:
            admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3,
                                 "socket.timeout.ms": int(self.timeout_s * 1000),
                                 **(self.security.librdkafka() if self.security else {})})
            md = admin.list_topics(timeout=self.timeout_s)
            if self.topic in md.topics and not md.topics[self.topic].error:
                return
            rf = min(3, max(1, len(md.brokers)))
            fut = admin.create_topics([NewTopic(self.topic, 1, rf,
                                                config={"cleanup.policy": "compact"})],
                                      request_timeout=self.timeout_s)[self.topic]
            try:
                fut.result(self.timeout_s + 1)
            except KafkaException as e:
                if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
                    raise

        await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, create),
                               self.timeout_s + 5)

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        await self._close_clients()

    async def _close_clients(self) -> None:
        for client in (self._consumer, self._producer):
            if client is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.stop(), 5)
        self._consumer = self._producer = None

    async def _read(self, tp: Any) -> None:
        while True:
            try:
                batch = await self._consumer.getmany(tp, timeout_ms=1000, max_records=5000)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # broker restart: aiokafka reconnects; keep tailing
                self.reader_error = e
                log.warning("_schemas reader: %r", e)
                await asyncio.sleep(0.5)
                continue
            self.reader_error = None
            records = batch.get(tp, [])
            for r in records:
                self.state.apply(r.offset, r.key, r.value)
            position = await self._position(tp)
            if records or position is not None:
                if position is not None and position - 1 > self.state.applied:
                    self.state.applied = position - 1  # compacted or control records
                async with self._applied:
                    self._applied.notify_all()

    async def _position(self, tp: Any) -> int | None:
        try:
            return int(await self._consumer.position(tp))
        except Exception:
            return None

    async def end_offset(self) -> int:
        """The log end offset of `_schemas` (one past its last record)."""
        from aiokafka import TopicPartition

        tp = TopicPartition(self.topic, 0)
        try:
            ends = await asyncio.wait_for(self._consumer.end_offsets([tp]), self.timeout_s)
        except Exception as e:
            raise RegistryError(500, STORE_ERROR, f"cannot read the end of _schemas: {e!r}")\
                from None
        return int(ends[tp])

    async def wait_applied(self, offset: int, timeout_s: float) -> None:
        """Wait (bounded) until this gateway's reader has applied `offset`."""

        async def reached() -> None:
            async with self._applied:
                await self._applied.wait_for(lambda: self.state.applied >= offset)

        try:
            await asyncio.wait_for(reached(), timeout_s)
        except TimeoutError:
            raise RegistryError(500, OPERATION_TIMEOUT,
                                f"_schemas not read up to offset {offset} within {timeout_s:g} s")\
                from None

    async def sync(self, timeout_s: float | None = None) -> None:
        """Wait until everything written to `_schemas` so far has been applied here."""
        end = await self.end_offset()
        await self.wait_applied(end - 1, timeout_s or self.timeout_s)

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """Write (key, value) records in order with acks=all; return the last one's offset
        once the reader has applied it."""
        last = -1
        try:
            for key, value in records:
                md = await asyncio.wait_for(
                    self._producer.send_and_wait(self.topic, value=value, key=key, partition=0),
                    self.timeout_s)
                last = int(md.offset)
        except RegistryError:
            raise
        except Exception as e:
            raise RegistryError(500, STORE_ERROR, f"write to _schemas failed: {e!r}") from None
        await self.wait_applied(last, self.timeout_s)
        return last
