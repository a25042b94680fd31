"""Broker-side Prometheus metrics: requests per API, bytes and messages in/out per topic.

`BrokerMetrics` is an object the broker owns (built by the composition, with its own
`CollectorRegistry`), handed to whoever exports it: the gateway's `/metrics` when
`yak serve` embeds it. Nothing here is a module global, so two brokers in one process
(tests) never mix their counts, and the broker never imports an exporter.

What is counted is what happened, not what was asked: messages in come from the
partition layer's append results (a refused batch is not counted; acks=0 produces are),
messages out from the batches a Fetch actually returns. Topic labels therefore only ever
name topics that exist: a client-chosen unknown name never becomes a label, so label
cardinality is bounded by the topics themselves.

Label children are cached in dicts because `Counter.labels(...)` costs a lock and a
tuple build per call, which on the Produce path would be as much as the counter itself.

The per-request count and latency histogram (every request: a follower's Fetch is one per
append at RF=3, issue 28) are plain per-API accumulators (`_RequestStats`), turned into
Prometheus families only when scraped: a `Counter.inc` plus a `Histogram.observe` took
a lock per value and walked the buckets in Python on every request. The exported names,
labels and buckets are those of the Counter and Histogram they replace.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from yak.broker.reassignment_metrics import ReassignmentCollector, ReassignmentTraffic
from yak.protocol import kio_compat
from yak.protocol.records import HEADER_SIZE, LOG_OVERHEAD, read_header

if TYPE_CHECKING:
    from yak.partition import PartitionAppendResult, ReplicaManager
    from yak.txn.coordinator import TransactionCoordinator

__all__ = ["BrokerMetrics", "count_records"]

# Kafka's request latency spans 100 us (ApiVersions) to max.wait of a long-poll Fetch.
_LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
)


def count_records(buffers: Iterable[Any]) -> int:
    """Records in concatenated whole batches, read from the batch headers only."""
    total = 0
    for buf in buffers:
        counted = getattr(buf, "record_count", None)  # a FileRegion counted its headers
        if counted is not None:
            total += counted
            continue
        pos = 0
        end = len(buf)
        while pos + HEADER_SIZE <= end:
            h = read_header(buf, pos)
            if h.record_count > 0:
                total += h.record_count
            pos += LOG_OVERHEAD + h.batch_length
    return total


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # yak_broker_requests_total and yak_broker_request_latency_seconds, by API name.
        self._request_stats: dict[int, _RequestStats] = {}
        r.register(_RequestCollector(self._request_stats))
        self.bytes_in = Counter(
            "yak_broker_topic_bytes_in", "Record batch bytes appended by Produce, by topic.",
            ["topic"], registry=r,
        )
        self.messages_in = Counter(
            "yak_broker_topic_messages_in", "Records appended by Produce, by topic.",
            ["topic"], registry=r,
        )
        self.bytes_out = Counter(
            "yak_broker_topic_bytes_out", "Record batch bytes sent by Fetch, by topic.",
            ["topic"], registry=r,
        )
        self.messages_out = Counter(
            "yak_broker_topic_messages_out", "Records sent by Fetch, by topic.",
            ["topic"], registry=r,
        )
        self.connections = Gauge(
            "yak_broker_connections", "Open Kafka client connections.", registry=r
        )
        # Reassignment bytes (issue 23): counted by the Fetch handler and the replica
        # fetchers when the composition binds it (`bind_reassignment`).
        self.reassignment: ReassignmentTraffic | None = None
        self._in_children: dict[str, tuple[Any, Any]] = {}
        self._out_children: dict[str, tuple[Any, Any]] = {}

    # ------------------------------------------------------------------ recording

    def record_request(self, api_key: int, started: float) -> None:
        """Called by the connection once per request (responses or not, e.g. acks=0);
        `started` is a perf_counter(). A bucket index and three additions: Prometheus's
        Histogram here cost a lock per value and a Python walk of the buckets."""
        elapsed = time.perf_counter() - started
        stats = self._request_stats.get(api_key)
        if stats is None:
            stats = self._request_stats[api_key] = _RequestStats(kio_compat.api_name(api_key))
        stats.buckets[bisect.bisect_left(_LATENCY_BUCKETS, elapsed)] += 1
        stats.total += elapsed

    def record_appended(self, results: Sequence[PartitionAppendResult]) -> None:
        """Count what a Produce appended (per topic), from the partition layer's results."""
        last_topic = None
        msgs = size = 0
        for r in results:
            info = r.info
            if info is None or not info.record_count:
                continue
            if r.topic != last_topic:
                if last_topic is not None:
                    self._count_in(last_topic, msgs, size)
                last_topic, msgs, size = r.topic, 0, 0
            msgs += info.record_count
            size += info.size
        if last_topic is not None:
            self._count_in(last_topic, msgs, size)

    def _count_in(self, topic: str, msgs: int, size: int) -> None:
        c = self._in_children.get(topic)
        if c is None:
            c = (self.messages_in.labels(topic), self.bytes_in.labels(topic))
            self._in_children[topic] = c
        c[0].inc(msgs)
        c[1].inc(size)

    def record_fetched(self, topic: str, buffers: Sequence[Any], size: int) -> None:
        """Count one topic's batches a Fetch returns (`size` bytes in `buffers`)."""
        if not size:
            return
        c = self._out_children.get(topic)
        if c is None:
            c = (self.messages_out.labels(topic), self.bytes_out.labels(topic))
            self._out_children[topic] = c
        c[0].inc(count_records(buffers))
        c[1].inc(size)

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's series go away with it."""
        for children, metrics in (
            (self._in_children, (self.messages_in, self.bytes_in)),
            (self._out_children, (self.messages_out, self.bytes_out)),
        ):
            if children.pop(topic, None) is not None:
                for m in metrics:
                    m.remove(topic)

    def bind_transactions(self, coordinator: TransactionCoordinator) -> None:
        """Export the transaction coordinator's counters and open transactions, read at
        scrape time from the coordinator (nothing is counted on the request path)."""
        self.registry.register(_TxnCollector(coordinator))

    def bind_replication(self, replica_manager: ReplicaManager) -> None:
        """Export replication state (issue 11), read at scrape time from the partition
        layer (and, in a cluster, the replica fetchers' lags it is given)."""
        self.registry.register(_ReplicationCollector(replica_manager))

    def bind_cluster(self, source: ClusterStats) -> None:
        """Export the cluster's state as this broker sees it (issue 11): controller,
        leader elections, registered brokers, leaders and partitions here, offline
        partitions; read at scrape time from `source.cluster_stats()`."""
        self.registry.register(_ClusterCollector(source))

    def bind_reassignment(self, traffic: ReassignmentTraffic, leader: Any, follower: Any
                          ) -> None:
        """Export reassignment state and bytes and both replication throttles (issue 23;
        `reassignment_metrics.py`): `leader`/`follower` are the throttles (None: none)."""
        self.reassignment = traffic
        self.registry.register(ReassignmentCollector(traffic, leader, follower))

    def bind_connections(self, count: Callable[[], int]) -> None:
        """Let the gauge read the live connection count at scrape time (no per-connect hook)."""
        self.connections.set_function(count)

    # ------------------------------------------------------------------ reading

    def totals(self) -> dict[str, float]:
        """Bytes/messages in and out summed over topics (the console's broker tile)."""
        out: dict[str, float] = {}
        for key, metric in (("bytes_in", self.bytes_in), ("bytes_out", self.bytes_out),
                            ("messages_in", self.messages_in),
                            ("messages_out", self.messages_out)):
            total = 0.0
            for fam in metric.collect():
                for s in fam.samples:
                    if s.name.endswith("_total"):
                        total += s.value
            out[key] = total
        return out


class _RequestStats:
    """One API's requests: how many fell in each latency bucket (the last: above every
    bound, +Inf) and their summed seconds. Written by the event loop only; a scrape from
    another thread reads ints that each are whole (at worst one request behind)."""

    __slots__ = ("api", "buckets", "total")

    def __init__(self, api: str) -> None:
        self.api = api
        self.buckets = [0] * (len(_LATENCY_BUCKETS) + 1)
        self.total = 0.0


class _RequestCollector:
    """Exports `_RequestStats` as the Counter `yak_broker_requests` and the Histogram
    `yak_broker_request_latency_seconds` (label `api`, Kafka's API names) would be."""

    def __init__(self, stats: dict[int, _RequestStats]) -> None:
        self._stats = stats

    def describe(self) -> list[Any]:
        return list(self._families({}))

    def collect(self) -> Iterable[Any]:
        return self._families(self._stats)

    @staticmethod
    def _families(stats: dict[int, _RequestStats]) -> Iterable[Any]:
        count = CounterMetricFamily("yak_broker_requests", "Kafka requests handled, by API name.",
                                    labels=["api"])
        latency = HistogramMetricFamily(
            "yak_broker_request_latency_seconds",
            "Time from a request's frame being taken to its response being written, by API.",
            labels=["api"])
        bounds = [*(_bound(b) for b in _LATENCY_BUCKETS), "+Inf"]
        for s in list(stats.values()):
            per_bucket = list(s.buckets)  # one snapshot: the count is their sum
            cumulative = []
            running = 0
            for bound, n in zip(bounds, per_bucket, strict=True):
                running += n
                cumulative.append((bound, running))
            count.add_metric([s.api], running)
            latency.add_metric([s.api], cumulative, s.total)
        yield count
        yield latency


def _bound(b: float) -> str:
    """A bucket's `le` label as prometheus_client writes it (`floatToGoString`)."""
    return repr(float(b))


class ClusterStats(Protocol):
    def cluster_stats(self) -> dict[str, float]: ...


# name -> (kind, help) of what `ClusterStats.cluster_stats()` returns
_CLUSTER_FAMILIES = {
    "controller_active": ("gauge", "yak_controller_active",
                          "1 while this broker is the controller (Kafka's "
                          "ActiveControllerCount)."),
    "leader_elections": ("counter", "yak_controller_leader_elections",
                         "Leaders elected by this broker while it was the controller."),
    "unclean_leader_elections": ("counter", "yak_controller_unclean_leader_elections",
                                 "Leaders elected from outside the ISR (acknowledged "
                                 "records may be lost)."),
    "offline_partitions": ("gauge", "yak_offline_partitions",
                           "Partitions without a leader, in this broker's metadata image."),
    "registered_brokers": ("gauge", "yak_registered_brokers",
                           "Brokers registered in the cluster (their sessions alive)."),
    "leader_partitions": ("gauge", "yak_leader_partitions",
                          "Partitions this broker leads (Kafka's LeaderCount)."),
    "partitions": ("gauge", "yak_partitions",
                   "Partitions this broker hosts a replica of (Kafka's PartitionCount)."),
    "liveness_fenced": ("counter", "yak_controller_liveness_fenced",
                        "Brokers this broker fenced because their process was gone "
                        "(connection closed, then refused), before their session expired: "
                        "as controller, any broker; as any broker, the active controller."),
    "liveness_frozen": ("counter", "yak_controller_liveness_frozen",
                        "Brokers this broker fenced as frozen: no answer to its liveness "
                        "pings for broker.liveness.unresponsive.ms (yak/cluster/liveness.py)."),
    "liveness_tls_refused": ("counter", "yak_liveness_tls_refused",
                             "Liveness probes of a TLS inter-broker listener that gave TLS up "
                             "(handshake failed or closed before any answer: a trust store or "
                             "client certificate problem) and fell back to an idle "
                             "connection: no frozen verdict for that broker until it "
                             "registers again."),
    "liveness_withheld": ("counter", "yak_liveness_frozen_withheld",
                          "Frozen verdicts this broker withheld (once per suspicion) because "
                          "the silent broker's fetch had arrived at a partition led here "
                          "within broker.liveness.unresponsive.ms: it was replicating, so "
                          "alive (yak/cluster/liveness_witness.py)."),
}


class _ClusterCollector:
    def __init__(self, source: ClusterStats) -> None:
        self.source = source

    def describe(self) -> list[Any]:
        return list(self._families({}))

    def collect(self) -> Iterable[Any]:
        return self._families(self.source.cluster_stats())

    @staticmethod
    def _families(stats: dict[str, float]) -> Iterable[Any]:
        for key, (kind, name, doc) in _CLUSTER_FAMILIES.items():
            family = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            yield family(name, doc, value=stats.get(key, 0))


class _ReplicationCollector:
    """Kafka's ReplicaManager / ReplicaFetcherManager metrics under Yak names."""

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm

    def describe(self) -> list[Any]:
        return list(self._families(zero=True))

    def collect(self) -> Iterable[Any]:
        return self._families()

    def _families(self, zero: bool = False) -> Iterable[Any]:
        rm = self.rm
        led = [] if zero else [p for p in rm.partitions() if p.is_leader]
        yield CounterMetricFamily(
            "yak_isr_shrinks", "ISR shrinks this broker made as a leader (followers that "
            "fell behind for replica.lag.time.max.ms or stopped fetching).", value=0 if zero else rm.isr_shrinks)
        yield CounterMetricFamily(
            "yak_isr_expands", "ISR expansions this broker made as a leader (followers that "
            "caught up).", value=0 if zero else rm.isr_expands)
        yield CounterMetricFamily(
            "yak_isr_dead_follower_shrinks", "ISR shrinks of followers that had stopped "
            "fetching for replica.fetch.dead.ms (killed or frozen).",
            value=0 if zero else rm.dead_follower_shrinks)
        yield CounterMetricFamily(
            "yak_isr_expansions_held", "ISR expansions the flapping guard held back (a "
            "follower shrunk 3 times in 60 s waits before rejoining).",
            value=0 if zero else rm.isr_expansions_held)
        yield GaugeMetricFamily(
            "yak_under_replicated_partitions", "Partitions led here whose ISR is smaller "
            "than their replica set.", value=sum(1 for p in led if p.is_under_replicated))
        yield GaugeMetricFamily(
            "yak_under_min_isr_partitions", "Partitions led here whose ISR is below "
            "min.insync.replicas (acks=all produces are refused).",
            value=sum(1 for p in led if p.under_min_isr))
        yield GaugeMetricFamily(
            "yak_delayed_produce_requests", "acks=all appends waiting in the produce "
            "purgatory for the high watermark.",
            value=0 if zero else rm.produce_purgatory.waiting())
        yield GaugeMetricFamily(
            "yak_delayed_fetch_requests", "Fetch long-polls parked in the fetch purgatory "
            "(one per partition they wait on).",
            value=0 if zero else rm.fetch_purgatory.waiting())
        source = rm.follower_lags
        lags = {} if zero or source is None else source()
        yield GaugeMetricFamily(
            "yak_replica_max_lag", "Largest lag, in messages, of a partition this broker "
            "follows behind its leader's high watermark.", value=max(lags.values(), default=0))
        per = GaugeMetricFamily(
            "yak_replica_lag", "Messages a followed partition is behind its leader's high "
            "watermark, as of its last fetch.", labels=["topic", "partition"])
        for (topic, partition), lag in sorted(lags.items()):
            per.add_metric([topic, str(partition)], lag)
        yield per


class _TxnCollector:
    """`yak_transactions_*`: the coordinator's `TxnStats` and its open transactions."""

    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self.coordinator = coordinator

    def describe(self) -> list[Any]:
        return list(self._families(zero=True))

    def collect(self) -> Iterable[Any]:
        return self._families()

    def _families(self, zero: bool = False) -> Iterable[Any]:
        c = self.coordinator
        stats = c.stats
        counters = (
            ("yak_transactions_committed", "Transactions whose commit was decided.",
             stats.commits),
            ("yak_transactions_aborted", "Transactions whose abort was decided (by the "
             "producer, a timeout, a new producer instance or a crash).", stats.aborts),
            ("yak_transactions_timed_out", "Transactions aborted for running longer than "
             "their transaction.timeout.ms.", stats.timed_out),
            ("yak_transactions_fenced", "Open transactions aborted because a new instance "
             "of their transactional id initialised.", stats.fenced),
            ("yak_transactional_ids_expired", "Idle transactional ids expired after "
             "transactional.id.expiration.ms.", stats.expired_ids),
            ("yak_transaction_marker_retries", "Rounds of COMMIT/ABORT markers re-sent after "
             "a retriable error.", stats.marker_retries),
        )
        for name, doc, value in counters:
            yield CounterMetricFamily(name, doc, value=0 if zero else value)
        yield GaugeMetricFamily("yak_transactions_open",
                                "Transactions in progress (Ongoing or being completed).",
                                value=0 if zero else c.open_transactions())
