"""The replication throttles (KIP-73), so that moving a partition does not take the
bandwidth produce and consume need.

Kafka's rules, followed here, one `ReplicationThrottle` for each side:

- The follower (`follower.replication.throttled.rate`, `replica_fetcher.py`) copies a
  partition under the throttle only when the topic's `follower.replication.throttled.replicas`
  (`partition:broker,...`, or `*` for every replica) names it on this broker and the replica
  is not in sync (it lags the leader's high watermark, as an adding replica does while it
  catches up). While the quota is spent, such partitions are left out of its fetches.
- The leader (`leader.replication.throttled.rate`, `yak/partition/fetch.py`) throttles its
  answers to a follower that is not in the ISR, for partitions the topic's
  `leader.replication.throttled.replicas` names on this (the leader's) broker: while the
  quota is spent they are answered with no records.

The bytes sent or fetched for such partitions count against the rate (bytes/s, a dynamic
broker config read on every use); in-sync replicas are never throttled, and the default
rate (Long.MAX_VALUE) never throttles.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["ReplicationThrottle", "RateQuota", "names_replica"]

UNTHROTTLED = (1 << 63) - 1  # Kafka's default rate: Long.MAX_VALUE
BURST_S = 0.1  # the bucket holds a tenth of a second of the rate: no burst after idling
RATE_WINDOW_S = 5.0  # the observed rate (a metric) spans the last one to two such windows


def names_replica(value: str | None, partition: int, broker: int) -> bool:
    """Whether a `*.replication.throttled.replicas` value names this replica: `*`, or a
    `partition:broker` entry (Kafka's list form)."""
    if not value:
        return False
    for entry in value.split(","):
        entry = entry.strip()
        if entry == "*":
            return True
        p, sep, b = entry.partition(":")
        if sep and p.strip() == str(partition) and b.strip() == str(broker):
            return True
    return False


class RateQuota:
    """A token bucket of `rate()` bytes/s (read on every use: a dynamic config)."""

    def __init__(self, rate: Callable[[], int], clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self._rate = rate
        self._clock = clock
        self._tokens = 0.0
        self._last = clock()
        # What was counted, for the broker's metrics (yak/broker/reassignment_metrics.py):
        # every byte, and two windows of them for the rate (Kafka's byte-rate).
        self.recorded = 0
        self._windows = [self._last, 0, self._last, 0]  # previous start, bytes; current

    def _refill(self) -> float:
        rate = max(1, self._rate())
        now = self._clock()
        self._tokens = min(rate * BURST_S, self._tokens + (now - self._last) * rate)
        self._last = now
        return rate

    def rate(self) -> int:
        return max(1, self._rate())

    def unlimited(self) -> bool:
        return self._rate() >= UNTHROTTLED

    def wait_s(self) -> float:
        """Seconds until the quota allows another fetch (0: now)."""
        rate = self._refill()
        return 0.0 if self._tokens >= 0 else -self._tokens / rate

    def record(self, nbytes: int) -> None:
        self._refill()
        self._tokens -= nbytes
        self.recorded += nbytes
        w = self._windows
        idle = self._last - w[2]
        if idle >= RATE_WINDOW_S:  # a new window; the current one is the previous, if recent
            w[0], w[1] = (w[2], w[3]) if idle < 2 * RATE_WINDOW_S else (
                self._last - RATE_WINDOW_S, 0)
            w[2], w[3] = self._last, 0
        w[3] += nbytes

    def observed_rate(self) -> float:
        """Bytes/s recorded over the previous and current windows (0 once both are more
        than two windows old: nothing recorded lately). Over at least one window, so the
        first seconds after an idle spell read low, as Kafka's Rate does, never a spike."""
        prev_start, prev_bytes, start, nbytes = self._windows
        now = self._clock()
        if now - start >= 2 * RATE_WINDOW_S:
            return 0.0
        return (prev_bytes + nbytes) / max(now - prev_start, RATE_WINDOW_S)


class ReplicationThrottle:
    """Which replicas one side's quota applies to (`topic_value`: the topic's
    `*.replication.throttled.replicas`), and the quota."""

    def __init__(self, node_id: int, rate: Callable[[], int],
                 topic_value: Callable[[str], str | None]) -> None:
        self.node_id = node_id
        self.quota = RateQuota(rate)
        self._topic_value = topic_value

    @classmethod
    def side(cls, side: str, config: Any, topic: Callable[[str], Any]) -> ReplicationThrottle:
        """`side` ("leader" or "follower")'s throttle: the rate `<side>.replication.throttled
        .rate` of the `yak.config.BrokerConfig` (duck-typed: the cluster layer does not
        import the loader; dynamic configs change it in place, so it is read on every use),
        the replicas the `<side>.replication.throttled.replicas` of the topic's
        `TopicInfo` (`topic(name)`, None when unknown)."""
        field = f"{side}_replication_throttled_rate"
        key = f"{side}.replication.throttled.replicas"

        def replicas(name: str) -> str | None:
            info = topic(name)
            return None if info is None else info.configs.get(key)

        return cls(config.node_id, lambda: int(getattr(config, field)), replicas)

    def max_bytes(self, fetch_max_bytes: int) -> int:
        """A throttled partition's fetch size: a tenth of a second of the rate, so the
        quota is spent in small steps rather than one burst of `replica.fetch.max.bytes`
        (the leader still returns at least one whole batch)."""
        return max(1, min(fetch_max_bytes, self.quota.rate() // 10))

    def applies(self, topic: str, partition: int, in_sync: bool) -> bool:
        return (not in_sync and not self.quota.unlimited()
                and names_replica(self._topic_value(topic), partition, self.node_id))
