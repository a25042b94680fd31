"""Metadata, offsets and log dirs: what the cluster holds and where (Metadata, ListOffsets,
DescribeLogDirs)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, TopicPartition
from confluent_kafka.admin import OffsetSpec

from yak.gateway.cluster.base import ClientBase
from yak.gateway.cluster.model import (
    ClusterError,
    ClusterMeta,
    PartitionMeta,
    TopicMeta,
    Watermarks,
)

TOPIC_CACHE_S = 2.0


class MetadataCalls(ClientBase):
    """Metadata (cached briefly per topic), watermarks, offsets by time, log dirs, ping."""

    async def metadata(self, topic: str | None = None) -> ClusterMeta:
        md = await self._blocking(self.admin.list_topics, topic, self.timeout_s)
        topics: dict[str, TopicMeta] = {}
        for name, t in md.topics.items():
            if t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            tm = TopicMeta(name, internal=name.startswith("__"),
                           error=t.error.name() if t.error is not None else None)
            for pid, p in t.partitions.items():
                tm.partitions[pid] = PartitionMeta(
                    pid, p.leader, list(p.replicas), list(p.isrs),
                    p.error.name() if p.error is not None else None,
                )
            topics[name] = tm
        brokers = {b.id: (b.host, b.port) for b in md.brokers.values()}
        return ClusterMeta(md.cluster_id, md.controller_id, brokers, topics)

    async def topic(self, name: str) -> TopicMeta | None:
        """One topic's metadata; a topic seen in the last `TOPIC_CACHE_S` is not re-asked.

        Metadata for all topics, never for `name` alone: a Metadata request naming a topic
        lets a broker with auto.create.topics.enable create it, and a typo in a REST URL
        must answer 404, not create a topic. Only hits are cached, so a topic created a
        moment ago is found at once.
        """
        cached = self._topic_cache.get(name)
        if cached is not None and time.monotonic() - cached[0] < TOPIC_CACHE_S:
            return cached[1]
        md = await self.metadata()
        now = time.monotonic()
        self._topic_cache = {t: (now, tm) for t, tm in md.topics.items()}
        return md.topics.get(name)

    async def watermarks(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], Watermarks]:
        """Log start offset, high watermark and last stable offset per partition (ListOffsets)."""
        tps = list(tps)
        if not tps:
            return {}
        specs: list[tuple[OffsetSpec, IsolationLevel]] = [
            (OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED),
            (OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED),
            (OffsetSpec.latest(), IsolationLevel.READ_COMMITTED),
        ]
        results: list[dict[tuple[str, int], int]] = []
        for spec, iso in specs:
            req = {TopicPartition(t, p): spec for t, p in tps}
            futs = self.admin.list_offsets(req, isolation_level=iso,
                                           request_timeout=self.timeout_s)
            got: dict[tuple[str, int], int] = {}
            for tp, fut in futs.items():
                try:
                    got[(tp.topic, tp.partition)] = (await self._future(fut)).offset
                except ClusterError as e:
                    if e.unreachable:
                        raise
                    got[(tp.topic, tp.partition)] = -1
            results.append(got)
        return {
            tp: Watermarks(results[0].get(tp, -1), results[1].get(tp, -1), results[2].get(tp, -1))
            for tp in tps
        }

    async def offset_for_time(self, topic: str, partition: int, ts_ms: int) -> int:
        futs = self.admin.list_offsets(
            {TopicPartition(topic, partition): OffsetSpec.for_timestamp(ts_ms)},
            request_timeout=self.timeout_s,
        )
        (fut,) = futs.values()
        return (await self._future(fut)).offset

    async def log_dirs(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(size in bytes, offset lag = log end - high watermark) per partition, all brokers.

        confluent-kafka has no DescribeLogDirs, so this one request goes through Yak's
        own small blocking client in a thread.
        """
        md = await self.metadata()
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for host, port in md.brokers.values():
            with contextlib.suppress(Exception):
                out.update(await self._blocking(_describe_log_dirs, host, port, self.timeout_s,
                                                self.security))
        return out

    async def ping(self) -> float:
        """Round-trip time of a metadata request, in seconds (raises if unreachable)."""
        t0 = time.perf_counter()
        await self._blocking(self.admin.list_topics, None, min(self.timeout_s, 3.0))
        return time.perf_counter() - t0


def _describe_log_dirs(host: str, port: int, timeout_s: float, security: Any = None,
                       ) -> dict[tuple[str, int], tuple[int, int]]:
    from kio.schema.describe_log_dirs.v1.request import DescribeLogDirsRequest
    from kio.schema.describe_log_dirs.v1.response import DescribeLogDirsResponse

    from yak.client.connection import Connection

    conn = Connection(host, port, client_id="yak-gateway", timeout_s=timeout_s,
                      security=security)
    try:
        resp = conn.send(DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse)
    finally:
        conn.close()
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for d in resp.results:
        for t in d.topics:
            for p in t.partitions:
                key = (str(t.name), int(p.partition_index))
                size, lag = out.get(key, (0, 0))
                out[key] = (size + int(p.partition_size), max(lag, int(p.offset_lag)))
    return out
