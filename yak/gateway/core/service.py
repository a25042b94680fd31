"""The gateway core: transport-neutral operations on one cluster.

REST, WebSocket and gRPC are thin adapters over `GatewayCore`: they parse their wire
format, call these operations, and translate `GatewayError`s with their own table.
The core reaches the cluster only through `ClusterClient` (the one place Kafka clients
are built) and never imports a transport.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from yak.client.load_aware import LOAD_AWARE, LoadAwarePartitioner
from yak.gateway.cluster import ClusterClient, ClusterError, Delivery, TopicMeta
from yak.gateway.core.errors import GatewayError, Reason, from_cluster_error
from yak.gateway.core.formats import Formats
from yak.gateway.core.sessions import SessionRegistry
from yak.gateway.core.share_sessions import ShareSessionRegistry
from yak.gateway.settings import GatewaySettings

# Kafka's rule for topic names (Topic.java: legal characters, at most 249).
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
MAX_PARTITION = 2**31 - 1
_DENIED = frozenset({"TOPIC_AUTHORIZATION_FAILED"})
_CREATE_WAITS = 6


class OutRecord(NamedTuple):
    """A record to produce. `partition` None: the partitioner picks (murmur2 of the key,
    like Java's); `timestamp_ms` None: now. Both set are honoured (CreateTime)."""

    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: Sequence[tuple[str, bytes]] | None = None
    timestamp_ms: int | None = None


@dataclass
class ProduceResult:
    """The outcome of one record: where it was written, or the Kafka error that refused it."""

    partition: int = -1
    offset: int = -1
    timestamp_ms: int = -1
    error: GatewayError | None = None


class GatewayCore:
    """Everything the transports share: cluster access, formats, consumer sessions."""

    def __init__(self, settings: GatewaySettings, formats: Formats | None = None) -> None:
        """`formats`: share another core's (the per-caller cores of `core.callers` use
        the gateway's, with whatever the schema registry registered in it)."""
        self.settings = settings
        self.cluster = ClusterClient(settings.bootstrap, timeout_s=settings.request_timeout_s,
                                     security=settings.security)
        if settings.partitioner == LOAD_AWARE:  # keyless records (issue 23)
            loads = settings.broker_loads
            self.cluster.load_aware = LoadAwarePartitioner(
                None if loads is None else lambda: {n: r["score"] for n, r in loads().items()})
        self.formats = formats if formats is not None else Formats()
        self.sessions = SessionRegistry(self.cluster, settings.consumer_instance_timeout_s)
        # Queue (share-group) sessions, expiring like consumer instances.
        self.share_sessions = ShareSessionRegistry(self.cluster,
                                                   settings.consumer_instance_timeout_s)
        # Who calls and the cores acting for them (`core.callers.callers_of`): made on
        # first use, shared by the transports that share this core.
        self.callers: Any = None

    async def close(self) -> None:
        if self.callers is not None:
            await self.callers.close()
        await self.sessions.close()
        await self.share_sessions.close()
        await self.cluster.close()

    # ---------------------------------------------------------------- metadata

    async def list_topics(self, internal: bool = False) -> dict[str, TopicMeta]:
        md = await self._cluster_call(self.cluster.metadata())
        return {n: t for n, t in md.topics.items() if internal or not t.internal}

    async def topic(self, name: str, create: bool = False) -> TopicMeta:
        """The topic's metadata, or TOPIC_NOT_FOUND.

        `create=True` does what a Kafka producer does with an unknown topic: a Metadata
        request naming it, which creates it when the cluster has
        auto.create.topics.enable. Without it only existing topics are found (a typo in
        a REST URL must be a 404, not a new topic).
        """
        if not name:
            raise GatewayError(Reason.INVALID_ARGUMENT, "topic name must not be empty")
        meta = await self._cluster_call(self.cluster.topic(name))
        if meta is None and create:
            if not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
                raise GatewayError(Reason.INVALID_ARGUMENT, f"illegal topic name {name!r}")
            for attempt in range(_CREATE_WAITS):
                # Kafka answers the creating request with LEADER_NOT_AVAILABLE and no
                # partitions; the next Metadata has them.
                md = await self._cluster_call(self.cluster.metadata(name))
                meta = md.topics.get(name)
                if meta is not None and meta.error in _DENIED:
                    raise GatewayError(Reason.PERMISSION_DENIED,
                                       f"{meta.error}: not authorized to access topic {name!r}",
                                       29, meta.error)
                if meta is None or meta.partitions:
                    break
                await asyncio.sleep(0.1 * (attempt + 1))
            if meta is not None and not meta.partitions:
                meta = None
        elif meta is None:
            # Not in this principal's view of all topics: missing, or hidden because it
            # may not DESCRIBE it, which Kafka answers a named request with
            # TOPIC_AUTHORIZATION_FAILED (PERMISSION_DENIED here). DescribeTopics asks
            # by name without ever auto-creating.
            exists, _ = await self._cluster_call(self.cluster.topic_access(name))
            if exists:
                meta = (await self._cluster_call(self.cluster.metadata())).topics.get(name)
        if meta is None:
            raise GatewayError(Reason.TOPIC_NOT_FOUND, "Topic not found.")
        return meta

    async def _cluster_call(self, coro: Any) -> Any:
        try:
            return await coro
        except ClusterError as e:
            raise from_cluster_error(e) from None

    # ---------------------------------------------------------------- produce

    async def produce(self, topic: str, records: Sequence[OutRecord],
                      create: bool = False) -> list[ProduceResult]:
        """Produce `records` to `topic`; `results[i]` is the outcome of `records[i]`.

        Input the gateway can judge (empty or unknown topic, unknown partition) fails the
        whole request before anything is sent. What Kafka refuses is reported per record.
        A cluster that cannot be reached fails the request (UNAVAILABLE).
        """
        meta = await self.topic(topic, create=create)
        return await self.send(meta, records).results()

    def send(self, meta: TopicMeta, records: Sequence[OutRecord]) -> PendingProduce:
        """Hand `records` to the producer now, in order; await `.results()` for the acks.

        Synchronous on purpose: a transport that must keep its requests in arrival order
        (one WebSocket, one gRPC stream) resolves the topic, then calls this before it
        looks at the next request, and records are appended in that order per partition.
        """
        for i, r in enumerate(records):
            p = r.partition
            if p is not None and p not in meta.partitions:
                if p < 0 or p > MAX_PARTITION:
                    raise GatewayError(Reason.INVALID_ARGUMENT,
                                       f"partition {p} of record {i} is out of range")
                raise GatewayError(Reason.PARTITION_NOT_FOUND,
                                   f"Partition not found (record {i}).")
        return PendingProduce(self.cluster.produce_many(meta.name, records),
                              self.cluster.timeout_s + 2)


class PendingProduce:
    """Records handed to the producer, awaiting their delivery reports."""

    def __init__(self, delivery: Delivery, timeout_s: float) -> None:
        self.delivery = delivery
        self.timeout_s = timeout_s

    async def results(self) -> list[ProduceResult]:
        """All reports under one timeout (not one timer per record)."""
        try:
            # A cancelled wait leaves the reports to land on a done future (ignored).
            settled = await asyncio.wait_for(self.delivery.future, self.timeout_s)
        except TimeoutError:
            raise GatewayError(Reason.UNAVAILABLE,
                               "Kafka cluster unreachable: timed out waiting for produce acks",
                               -185, "_TIMED_OUT") from None
        results: list[ProduceResult] = []
        for res in settled:
            if isinstance(res, ClusterError):
                err = from_cluster_error(res)
                if err.reason is Reason.UNAVAILABLE:
                    raise err
                results.append(ProduceResult(error=err))
            else:
                results.append(ProduceResult(res.partition, res.offset, res.timestamp))
        return results
