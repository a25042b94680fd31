"""Share-group metrics (KIP-932), named after Kafka's (KIP-1103 and Kafka 4.2's ops docs),
exported through the broker's Prometheus registry.

Counting is per batch, never per record: a share partition holds one `PartitionStats`
(plain ints on slots) and adds a whole acquired run's or acknowledged range's size to it
in the call that changes it; nothing is looked up or labelled on that path. Everything
else (groups by state, records in flight, acquired, by delivery count, the start offset)
is read from the `ShareManager` when Prometheus scrapes, as the broker's other
collectors do. The stats of a share partition outlive its window (a leader change, a
reset, a delete drops the window, not the counts), so counters never go down.

Kafka's MBean -> the series here (Yak's `yak_` prefix, snake case, labels as Kafka's tags):
- ShareGroupMetrics RecordAcknowledgementsPerSec{ackType} ->
  `yak_share_record_acknowledgements_total{ack_type="accept|release|reject|renew"}`
  (with group, topic, partition: Kafka counts per broker, the sum over them is its value);
- ShareGroupMetrics PartitionLoadTimeMs -> `yak_share_partition_load_time_ms` (histogram:
  reading a share partition's state from the share coordinator, then initializing it);
- SharePartitionMetrics InFlightMessageCount -> `yak_share_partition_in_flight_messages`,
  AcquisitionLockTimeoutPerSec -> `yak_share_acquisition_lock_timeouts_total`;
- group-coordinator-metrics share-group-count{state} -> `yak_share_groups{state}`.
Yak's own, for what Kafka's tools show per share partition: records acquired
(`yak_share_records_acquired_total`), archived at the delivery limit
(`yak_share_records_archived_total{reason}`), acquired now
(`yak_share_partition_acquired_messages`), the start offset
(`yak_share_partition_start_offset`), in-flight records by delivery count per group
(`yak_share_group_in_flight_by_delivery_count`) and the group's dead-letter topic
(`yak_share_group_dead_letter_topic_info`, KIP-1191's config). Kafka's per-topic
share request rates are `yak_broker_requests_total{api="share_fetch|share_acknowledge"}`
(yak/broker/metrics.py), not per topic.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

if TYPE_CHECKING:
    from yak.share.manager import ShareManager

__all__ = ["PartitionStats", "ShareMetrics", "ShareMetricsCollector"]

# Kafka's ack types (AckType 1..4) as its ackType tag spells them, lower case.
ACK_TYPES = ("accept", "release", "reject", "renew")
_LOAD_BUCKETS_MS = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
_PARTITION_LABELS = ["group", "topic", "partition"]


class PartitionStats:
    """One share partition's counters, bumped by `SharePartition` once per call."""

    __slots__ = ("accept", "acquired", "archived_limit", "lock_timeouts", "reject",
                 "release", "renew")

    def __init__(self) -> None:
        self.acquired = 0
        self.accept = 0
        self.release = 0
        self.reject = 0
        self.renew = 0
        self.lock_timeouts = 0
        self.archived_limit = 0  # archived because the delivery count reached the limit

    def acked(self, kind: int, n: int) -> None:
        """`n` records acknowledged with AckType `kind` (a gap, 0, is not counted)."""
        if kind == 1:
            self.accept += n
        elif kind == 2:
            self.release += n
        elif kind == 3:
            self.reject += n
        elif kind == 4:
            self.renew += n


class ShareMetrics:
    """The counters of every share partition this broker has led, and the load times."""

    def __init__(self) -> None:
        self.partitions: dict[tuple[str, str, int], PartitionStats] = {}
        self.load_time_ms = Histogram(
            "yak_share_partition_load_time_ms",
            "Time to load a share partition on its leader: its state read from the share "
            "coordinator and the window initialized (Kafka's ShareGroupMetrics "
            "PartitionLoadTimeMs).", buckets=_LOAD_BUCKETS_MS, registry=None)

    def stats(self, group_id: str, topic: str, partition: int) -> PartitionStats:
        """The counters of a share partition (kept when its window is dropped)."""
        key = (group_id, topic, partition)
        s = self.partitions.get(key)
        if s is None:
            s = self.partitions[key] = PartitionStats()
        return s

    def forget_group(self, group_id: str) -> None:
        """A deleted group's series go away with it."""
        for key in [k for k in self.partitions if k[0] == group_id]:
            del self.partitions[key]

    @staticmethod
    def now() -> float:
        return time.perf_counter()

    def loaded(self, started: float) -> None:
        """A share partition finished loading; `started` came from `now()`."""
        self.load_time_ms.observe((time.perf_counter() - started) * 1000)


class ShareMetricsCollector:
    """The Prometheus collector over a `ShareManager` (registered by the composition in
    the broker's registry)."""

    def __init__(self, manager: ShareManager) -> None:
        self.manager = manager

    def describe(self) -> list[Any]:
        return list(self._families(empty=True))

    def collect(self) -> Iterable[Any]:
        return self._families()

    def _families(self, empty: bool = False) -> Iterable[Any]:
        m = self.manager
        metrics: ShareMetrics = m.metrics
        acks = CounterMetricFamily(
            "yak_share_record_acknowledgements",
            "Records acknowledged, by acknowledgement type (Kafka's ShareGroupMetrics "
            "RecordAcknowledgementsPerSec, ackType).", labels=[*_PARTITION_LABELS, "ack_type"])
        acquired = CounterMetricFamily(
            "yak_share_records_acquired",
            "Records acquired (handed to a share consumer under a lock), deliveries "
            "counted.", labels=_PARTITION_LABELS)
        timeouts = CounterMetricFamily(
            "yak_share_acquisition_lock_timeouts",
            "Records whose acquisition lock expired before they were acknowledged "
            "(Kafka's SharePartitionMetrics AcquisitionLockTimeoutPerSec).",
            labels=_PARTITION_LABELS)
        archived = CounterMetricFamily(
            "yak_share_records_archived",
            "Records archived without being accepted: rejected, or their delivery count "
            "reached the limit.", labels=[*_PARTITION_LABELS, "reason"])
        for (g, t, p), s in ([] if empty else list(metrics.partitions.items())):
            labels = [g, t, str(p)]
            for kind in ACK_TYPES:
                acks.add_metric([*labels, kind], getattr(s, kind))
            acquired.add_metric(labels, s.acquired)
            timeouts.add_metric(labels, s.lock_timeouts)
            archived.add_metric([*labels, "rejected"], s.reject)
            archived.add_metric([*labels, "delivery_count_limit"], s.archived_limit)
        yield from (acks, acquired, timeouts, archived)
        yield from metrics.load_time_ms.collect()
        failed = CounterMetricFamily(
            "yak_share_partition_load_failures", "Share-partition loads that failed (each "
            "logged, see load_failures.py), by error code.", labels=["error"])
        for code, n in ([] if empty else sorted(m.load_failures.by_error.items())):
            failed.add_metric([code], n)
        yield failed
        yield from self._state(m, empty)

    def _state(self, m: ShareManager, empty: bool) -> Iterable[Any]:
        groups = GaugeMetricFamily(
            "yak_share_groups", "Share groups coordinated here, by state (Kafka's "
            "group-coordinator-metrics share-group-count).", labels=["state"])
        in_flight = GaugeMetricFamily(
            "yak_share_partition_in_flight_messages",
            "Records in a share partition's window not yet acknowledged or archived "
            "(Kafka's SharePartitionMetrics InFlightMessageCount).", labels=_PARTITION_LABELS)
        held = GaugeMetricFamily(
            "yak_share_partition_acquired_messages",
            "Records acquired by a consumer right now (their lock running).",
            labels=_PARTITION_LABELS)
        start = GaugeMetricFamily(
            "yak_share_partition_start_offset",
            "The share partition's start offset (below it every record is done).",
            labels=_PARTITION_LABELS)
        by_count = GaugeMetricFamily(
            "yak_share_group_in_flight_by_delivery_count",
            "In-flight records of a group's share partitions led here, by delivery count "
            "(0: never delivered yet).", labels=["group", "delivery_count"])
        dlq = GaugeMetricFamily(
            "yak_share_group_dead_letter_topic_info",
            "1 per share group with a dead-letter topic (group config "
            "errors.deadletterqueue.topic.name).", labels=["group", "topic"])
        if not empty:
            states: dict[str, int] = {}
            for _, state in m.list_groups():
                states[state] = states.get(state, 0) + 1
            for state in ("Empty", "Stable"):
                groups.add_metric([state], states.pop(state, 0))
            for state, n in states.items():
                groups.add_metric([state], n)
            counts: dict[str, dict[int, int]] = {}
            for (g, t, p), sp in list(m.partitions.items()):
                labels = [g, t, str(p)]
                acquired, by = sp.delivery_counts()
                in_flight.add_metric(labels, sp.in_flight())
                held.add_metric(labels, acquired)
                start.add_metric(labels, sp.start_offset)
                mine = counts.setdefault(g, {})
                for c, n in by.items():
                    mine[c] = mine.get(c, 0) + n
            for g, by in sorted(counts.items()):
                for c, n in sorted(by.items()):
                    by_count.add_metric([g, str(c)], n)
            for g in sorted({k[0] for k in m.partitions} | {g for g, _ in m.list_groups()}):
                topic = m.group_config(g).get("errors.deadletterqueue.topic.name")
                if topic:
                    dlq.add_metric([g, topic], 1)
        yield from (groups, in_flight, held, start, by_count, dlq)
