"""The Kafka clients of one `ClusterClient` and the bridge from their threads to the loop.

This is the only place the gateway builds admin clients and aiokafka consumers (the
producer is built in `produce.py` from the same `_common()` settings), so connection
settings (and, with security, credentials) are set once for all of them. Calls that
block or complete on librdkafka's threads are awaited through `_blocking` / `_future`,
each with a bounded timeout, and failures become `ClusterError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from aiokafka import AIOKafkaConsumer
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

from yak.gateway.cluster.model import DEFAULT_TIMEOUT_S, ClusterError, TopicMeta, cluster_error

if TYPE_CHECKING:
    from yak.gateway.cluster.produce import Delivery

T = TypeVar("T")


class ClientBase:
    """Connection settings, the lazily built admin client, consumers, and the state every
    part of `ClusterClient` shares (declared once here)."""

    def __init__(self, bootstrap: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                 client_id: str = "yak-gateway", security: Any = None) -> None:
        self.bootstrap = bootstrap
        self.security = security  # ClientSecurity (TLS, SASL) or None: PLAINTEXT
        self.timeout_s = timeout_s
        self.client_id = client_id
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        self._poller: threading.Thread | None = None
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._topic_cache: dict[str, tuple[float, TopicMeta]] = {}
        self._reports: list[tuple[Delivery, int, KafkaError | None, Any]] = []

    def _common(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "client.id": self.client_id,
            "socket.timeout.ms": int(self.timeout_s * 1000),
            "reconnect.backoff.max.ms": 1000,
            # A dead broker is reported by our own bounded timeouts, not by log spam.
            "log_level": 3,
            **(self.security.librdkafka() if self.security is not None else {}),
        }

    @property
    def admin(self) -> AdminClient:
        with self._lock:
            if self._admin is None:
                self._admin = AdminClient(self._common())
            return self._admin


    def new_consumer(self, group_id: str | None, client_id: str,
                     **overrides: Any) -> AIOKafkaConsumer:
        """An aiokafka consumer on this cluster, not started (see `start_consumer`)."""
        conf: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "group_id": group_id,
            "client_id": client_id,
            "enable_auto_commit": False,
            "request_timeout_ms": int(self.timeout_s * 1000),
            "fetch_max_wait_ms": 500,
            "metadata_max_age_ms": 5_000,
        } | (self.security.aiokafka() if self.security is not None else {}) | overrides
        return AIOKafkaConsumer(**conf)

    async def start_consumer(self, group_id: str | None, client_id: str,
                             **overrides: Any) -> AIOKafkaConsumer:
        """A started consumer; a cluster that cannot be reached is a ClusterError."""
        consumer = self.new_consumer(group_id, client_id, **overrides)
        try:
            await asyncio.wait_for(consumer.start(), self.timeout_s + 2)
        except Exception as e:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.stop(), 2)
            raise ClusterError(f"cannot start a consumer: {e!r}", -195, "_TRANSPORT") from e
        return consumer

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(
                loop.run_in_executor(None, fn, *args), self.timeout_s + 1
            )
        except Exception as e:
            raise cluster_error(e) from e

    async def _future(self, fut: Future[T]) -> T:
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), self.timeout_s + 1)
        except Exception as e:
            raise cluster_error(e) from e

    async def close(self) -> None:
        self._closing.set()
        producer = self._producer
        if producer is not None:
            await asyncio.get_running_loop().run_in_executor(None, producer.flush, 5)
        if self._poller is not None:
            self._poller.join(2)
