"""Reassignment and replication-throttle metrics (issue 23), under Kafka's names.

Kafka's, as a JMX exporter names them (`kafka.server:type=X,name=Y` ->
`kafka_server_x_y`):

- `kafka_server_replicamanager_reassigningpartitions` (ReplicaManager's
  ReassigningPartitions): partitions led by this broker whose record has adding or
  removing replicas. Kafka counts them on each leader, so the sum over brokers is the
  number of partitions moving.
- `kafka_server_brokertopicmetrics_reassignmentbytesin_total` / `..._reassignmentbytesout_total`
  (BrokerTopicMetrics' ReassignmentBytesInPerSec / ReassignmentBytesOutPerSec, a Prometheus
  counter whose rate() is Kafka's rate): record bytes an adding replica copied (counted by
  its replica fetcher) and that a leader sent to an adding replica (counted by the Fetch
  handler), as Kafka counts them apart from the ordinary replication bytes.
- `kafka_server_leaderreplication_byte_rate` / `kafka_server_followerreplication_byte_rate`
  (the LeaderReplication / FollowerReplication quota's byte-rate): bytes/s counted against
  each side's replication throttle (KIP-73) over the last few seconds; with
  `yak_replication_throttled_bytes_total{side}` (the same bytes as a counter) and
  `yak_replication_throttled_rate{side}`, the rate in force (no sample while unthrottled).

Which partitions are moving comes from the metadata image (`store.all_partitions()`), read
again only when its revision changed: a fetch asks `moving()`, a dict that is empty when
nothing moves, so a fetch with no reassignment pays one attribute read and one compare.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["ReassignmentTraffic", "ReassignmentCollector"]

Moving = dict[tuple[str, int], tuple[int, frozenset[int]]]  # (topic, p) -> (leader, adding)


class _Image(Protocol):
    """The part of `yak.cluster.etcd_store.EtcdMetadataStore` read here."""

    @property
    def revision(self) -> int: ...

    def all_partitions(self) -> Iterable[tuple[str, int, Any]]: ...

    def topic_name(self, topic_id: str) -> str | None: ...


class ReassignmentTraffic:
    """The moving partitions as the image shows them, and the reassignment bytes counted."""

    def __init__(self, node_id: int, image: _Image) -> None:
        self.node_id = node_id
        self.image = image
        self.bytes_in = 0  # copied here as an adding replica
        self.bytes_out = 0  # sent from here (leader) to adding replicas
        self._revision = -1
        self._moving: Moving = {}

    def moving(self) -> Moving:
        """(topic, partition) -> (leader, adding replicas) of every partition being
        reassigned (adding or removing replicas), rebuilt when the image changed."""
        revision = self.image.revision
        if revision != self._revision:
            out: Moving = {}
            for topic_id, p, entry in self.image.all_partitions():
                rec = entry.record
                if rec.adding_replicas or rec.removing_replicas:
                    name = self.image.topic_name(topic_id)
                    if name is not None:
                        out[(name, p)] = (rec.leader, frozenset(rec.adding_replicas))
            self._moving, self._revision = out, revision
        return self._moving

    def copied(self, topic: str, partition: int, nbytes: int) -> None:
        """The replica fetcher appended `nbytes` of `topic-partition` here."""
        moving = self.moving()
        if moving:
            m = moving.get((topic, partition))
            if m is not None and self.node_id in m[1]:
                self.bytes_in += nbytes

    def sent(self, replica_id: int, topic: str, partition: int, nbytes: int) -> None:
        """This leader answered follower `replica_id` with `nbytes` of `topic-partition`
        (the caller checked `moving()` was not empty)."""
        m = self._moving.get((topic, partition))
        if m is not None and replica_id in m[1]:
            self.bytes_out += nbytes

    def leading(self) -> int:
        """Moving partitions this broker leads (Kafka's ReassigningPartitions)."""
        return sum(1 for leader, _ in self.moving().values() if leader == self.node_id)


class _Throttle(Protocol):
    """The part of `yak.cluster.replication_throttle.ReplicationThrottle` read here."""

    quota: Any


class ReassignmentCollector:
    """Exports `ReassignmentTraffic` and both sides' throttles at scrape time."""

    def __init__(self, traffic: ReassignmentTraffic, leader: _Throttle | None,
                 follower: _Throttle | None) -> None:
        self.traffic = traffic
        self.sides = (("leader", leader), ("follower", follower))

    def describe(self) -> list[Any]:
        return list(self._families(zero=True))

    def collect(self) -> Iterable[Any]:
        return self._families()

    def _families(self, zero: bool = False) -> Iterable[Any]:
        t = self.traffic
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_reassigningpartitions",
            "Partitions led by this broker that are being reassigned (Kafka's "
            "ReplicaManager ReassigningPartitions).", value=0 if zero else t.leading())
        yield CounterMetricFamily(
            "kafka_server_brokertopicmetrics_reassignmentbytesin",
            "Record bytes this broker copied as an adding replica of a reassignment "
            "(Kafka's ReassignmentBytesInPerSec).", value=0 if zero else t.bytes_in)
        yield CounterMetricFamily(
            "kafka_server_brokertopicmetrics_reassignmentbytesout",
            "Record bytes this broker sent as leader to adding replicas of a "
            "reassignment (Kafka's ReassignmentBytesOutPerSec).",
            value=0 if zero else t.bytes_out)
        total = CounterMetricFamily(
            "yak_replication_throttled_bytes", "Bytes counted against the replication "
            "throttle (KIP-73), by side.", labels=["side"])
        limit = GaugeMetricFamily(
            "yak_replication_throttled_rate", "The replication throttle in force, bytes/s, "
            "by side (no sample while unthrottled).", labels=["side"])
        for side, throttle in self.sides:
            quota = None if throttle is None else throttle.quota
            yield GaugeMetricFamily(
                f"kafka_server_{side}replication_byte_rate",
                f"Bytes/s counted against the {side} replication throttle over the last "
                f"few seconds (Kafka's {side.capitalize()}Replication byte-rate).",
                value=0 if zero or quota is None else quota.observed_rate())
            total.add_metric([side], 0 if zero or quota is None else quota.recorded)
            if not zero and quota is not None and not quota.unlimited():
                limit.add_metric([side], quota.rate())
        yield total
        yield limit
