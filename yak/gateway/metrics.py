"""Prometheus `/metrics`: the gateway's own metrics, the cluster's state, the broker's.

Cluster state (partition sizes and offsets, consumer lag per group) is learned over the
Kafka protocol when a scrape finds the cached snapshot older than `interval_s`: ten
scrapers cost the cluster no more than one, and nobody scraping costs nothing.
When the gateway runs inside `yak serve`, the broker's own metrics object (requests and
latency per API, bytes and messages in/out per topic, connections) is handed to it and its
registry is rendered too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from yak.gateway.cluster import ClusterClient

log = logging.getLogger(__name__)

GATEWAY_REGISTRY = CollectorRegistry(auto_describe=True)

HTTP_REQUESTS = Counter(
    "yak_gateway_http_requests", "HTTP requests served by the gateway, by route and status.",
    ["method", "route", "status"], registry=GATEWAY_REGISTRY,
)
HTTP_SECONDS = Histogram(
    "yak_gateway_http_request_duration_seconds", "HTTP request latency by route.",
    ["method", "route"], registry=GATEWAY_REGISTRY,
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)


@dataclass
class ClusterSnapshot:
    """What the refresher last learned; `error` is set when the cluster was unreachable."""

    taken_at: float = 0.0
    up: bool = False
    error: str | None = None
    brokers: int = 0
    # (topic, partition) -> (log start, high watermark, size bytes)
    partitions: dict[tuple[str, int], tuple[int, int, int]] = field(default_factory=dict)
    # group -> [(topic, partition, lag)]
    lag: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)


class ClusterCollector(Collector):
    def __init__(self) -> None:
        self.snapshot = ClusterSnapshot()

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        up = GaugeMetricFamily("yak_cluster_up", "1 if the last cluster refresh succeeded.")
        up.add_metric([], 1.0 if s.up else 0.0)
        yield up
        brokers = GaugeMetricFamily("yak_cluster_brokers", "Brokers in the cluster metadata.")
        brokers.add_metric([], s.brokers)
        yield brokers
        size = GaugeMetricFamily("yak_partition_size_bytes", "Partition size on disk.",
                                 labels=["topic", "partition"])
        hw = GaugeMetricFamily("yak_partition_high_watermark", "Partition high watermark.",
                               labels=["topic", "partition"])
        start = GaugeMetricFamily("yak_partition_log_start_offset",
                                  "Partition log start offset.", labels=["topic", "partition"])
        for (t, p), (ls, h, sz) in sorted(s.partitions.items()):
            labels = [t, str(p)]
            size.add_metric(labels, sz)
            hw.add_metric(labels, h)
            start.add_metric(labels, ls)
        yield size
        yield hw
        yield start
        lag = GaugeMetricFamily("yak_consumer_group_lag",
                                "High watermark minus committed offset.",
                                labels=["group", "topic", "partition"])
        total = GaugeMetricFamily("yak_consumer_group_lag_sum", "Total lag of a group.",
                                  labels=["group"])
        for g, rows in sorted(s.lag.items()):
            for t, p, n in rows:
                lag.add_metric([g, t, str(p)], n)
            total.add_metric([g], sum(n for _, _, n in rows))
        yield lag
        yield total


async def take_snapshot(cluster: ClusterClient) -> ClusterSnapshot:
    md = await cluster.metadata()
    tps = [(t, p) for t, tm in md.topics.items() for p in tm.partitions]
    marks = await cluster.watermarks(tps)
    sizes = await cluster.log_dirs()
    snap = ClusterSnapshot(taken_at=time.time(), up=True, brokers=len(md.brokers))
    for tp in tps:
        m = marks[tp]
        snap.partitions[tp] = (m.log_start_offset, m.high_watermark, sizes.get(tp, (0, 0))[0])
    with contextlib.suppress(Exception):  # a cluster without groups still has metrics
        for g in await cluster.groups():
            rows = await cluster.group_lag(g["group_id"])
            snap.lag[g["group_id"]] = [(r["topic"], r["partition"], r["lag"]) for r in rows]
    return snap


class MetricsService:
    """Owns the cluster collector; refreshes it on demand, at most every `interval_s`.

    No background task: an idle gateway (every `yak serve` has one) costs the cluster
    nothing until someone scrapes.
    """

    def __init__(self, cluster: ClusterClient, interval_s: float = 5.0,
                 broker_metrics: Any = None) -> None:
        self.cluster = cluster
        self.interval_s = interval_s
        self.broker_metrics = broker_metrics
        self.collector = ClusterCollector()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self._refreshing: asyncio.Task[ClusterSnapshot] | None = None

    async def refresh(self) -> ClusterSnapshot:
        try:
            snap = await take_snapshot(self.cluster)
        except Exception as e:
            snap = ClusterSnapshot(taken_at=time.time(), up=False, error=str(e),
                                   partitions=self.collector.snapshot.partitions)
        self.collector.snapshot = snap
        return snap

    async def fresh(self) -> ClusterSnapshot:
        """The snapshot, refreshed first if stale; concurrent scrapes share one refresh."""
        if time.time() - self.collector.snapshot.taken_at < self.interval_s:
            return self.collector.snapshot
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self.refresh())
        return await asyncio.shield(self._refreshing)

    async def stop(self) -> None:
        if self._refreshing is not None and not self._refreshing.done():
            self._refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refreshing

    async def render(self) -> bytes:
        await self.fresh()
        parts = [generate_latest(GATEWAY_REGISTRY), generate_latest(self.registry)]
        if self.broker_metrics is not None:
            parts.append(generate_latest(self.broker_metrics.registry))
        return b"".join(parts)

