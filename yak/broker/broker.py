"""The broker object handlers reach everything through.

It owns no protocol logic: it wires the layers together (config, partition logs,
topic metadata, coordinators) and owns the few broker-wide services that handlers
share: the Fetch purgatory, the thread pool used for `write.caching=false` fsyncs,
and the periodic log maintenance task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from yak.broker.purgatory import Purgatory

if TYPE_CHECKING:
    from yak.broker.connection import KafkaConnection
    from yak.broker.topics import TopicManager
    from yak.cluster.metadata import MetadataStore
    from yak.config import BrokerConfig
    from yak.storage import LogManager

log = logging.getLogger(__name__)

MAINTENANCE_INTERVAL_S = 1.0


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        logs: LogManager,
        metadata: MetadataStore,
        topics: TopicManager,
    ) -> None:
        self.config = config
        self.logs = logs
        self.metadata = metadata
        self.topics = topics
        self.node_id: int = config.node_id
        self.host: str = config.advertised_host
        self.port: int = config.advertised_port
        self.group_coordinator: Any = None
        self.txn_coordinator: Any = None
        self.purgatory = Purgatory()
        # Current epoch per idempotent producer id handed out since start (KIP-360 bumps).
        self.producer_epochs: dict[int, int] = {}
        self.connections: set[KafkaConnection] = set()
        # fsync for write.caching=false runs here so the event loop never blocks on disk.
        self.io_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="yak-io")
        # Maintenance (retention deletes, checkpoints) gets its own thread so a long pass
        # never queues acks=all fsyncs behind it.
        self._maintenance_pool = ThreadPoolExecutor(max_workers=1,
                                                    thread_name_prefix="yak-maintenance")
        # Coordinators and other services register (start, stop) coroutines here, so
        # `start_broker` never needs to know about them.
        self._services: list[tuple[str, Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]] = []
        self._maintenance: asyncio.Task[None] | None = None

    @property
    def cluster_id(self) -> str:
        return self.metadata.cluster_id

    def add_service(
        self,
        name: str,
        start: Callable[[], Awaitable[None]],
        stop: Callable[[], Awaitable[None]],
    ) -> None:
        self._services.append((name, start, stop))

    async def start_services(self) -> None:
        for name, start, _ in self._services:
            log.info("starting %s", name)
            await start()
        self._maintenance = asyncio.get_running_loop().create_task(self._maintenance_loop())

    async def stop_services(self) -> None:
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
            # A pass already running in its thread must finish before the logs shut down.
            await asyncio.get_running_loop().run_in_executor(
                None, self._maintenance_pool.shutdown, True
            )
        for name, _, stop in reversed(self._services):
            try:
                await stop()
            except Exception:
                log.exception("stopping %s failed", name)
        self.purgatory.notify_all()

    async def _maintenance_loop(self) -> None:
        """Retention, time-based rolls, flush.ms and checkpoints, once a second.

        Runs in a thread: a retention pass that deletes segments must not stall requests
        on the event loop.
        """
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(MAINTENANCE_INTERVAL_S)
            try:
                await loop.run_in_executor(
                    self._maintenance_pool, self.logs.maintenance, int(time.time() * 1000)
                )
            except Exception:
                log.exception("log maintenance failed")

    async def sync(self, plog: Any, offset: int) -> None:
        """fsync `plog` up to `offset` off the event loop (storage group-commits)."""
        await asyncio.get_running_loop().run_in_executor(self.io_pool, plog.sync, offset)

    def shutdown_io(self) -> None:
        self._maintenance_pool.shutdown(wait=True)
        self.io_pool.shutdown(wait=True)
