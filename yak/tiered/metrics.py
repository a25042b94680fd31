"""Tiered-storage metrics on /metrics, read from the remote log manager at scrape time
(nothing is counted for them on the request path beyond the manager's own totals).

Kafka's names, as a JMX exporter writes `kafka.server:type=BrokerTopicMetrics,name=X`
(`kafka_server_brokertopicmetrics_x`); Kafka's *PerSec meters are Prometheus counters here,
whose rate() is Kafka's rate:

- `..._remotecopybytes_total`, `..._remotecopyrequests_total`, `..._remotecopyerrors_total`
  (RemoteCopyBytesPerSec, RemoteCopyRequestsPerSec, RemoteCopyErrorsPerSec): bytes uploaded
  (segments with their indexes, snapshot and epochs), segment uploads tried, failed rounds;
- `..._remotefetchbytes_total`, `..._remotefetchrequests_total`, `..._remotefetcherrors_total`
  (RemoteFetchBytesPerSec, ...RequestsPerSec, ...ErrorsPerSec): bytes read from the store
  for Fetch (cache misses; a read served from the chunk cache costs none), remote reads,
  failed remote reads;
- KIP-963's per-topic gauges `..._remotecopylagbytes{topic}`, `..._remotecopylagsegments`
  (RemoteCopyLagBytes/Segments: rolled segments not uploaded yet) and
  `..._remotelogsizebytes` (RemoteLogSizeBytes), over the partitions this broker leads,
  as Kafka reports them on the leader;
- KIP-956's throttle: `kafka_log_remote_remotelogmanager_remotefetchthrottletime_seconds`
  (time remote reads waited for `remote.log.manager.fetch.max.bytes.per.second`) and
  `yak_tiered_fetch_throttled_total` (how many waited);
- Yak's: `yak_tiered_orphans_deleted_total`, `yak_tiered_segments_copied_total`,
  `yak_tiered_segments_deleted_total`, and the disk guard (`yak.tiered.guard`):
  `yak_tiered_disk_guard_active` (0/1) and `yak_tiered_copy_lag_bytes` as it last saw it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["TieredCollector"]

_BTM = "kafka_server_brokertopicmetrics_"


class TieredCollector:
    """Exports a `RemoteLogManager`'s counters and per-topic lag at scrape time."""

    def __init__(self, rlm: Any) -> None:
        self.rlm = rlm

    def describe(self) -> list[Any]:
        return list(self._families(zero=True))

    def collect(self) -> Iterable[Any]:
        return self._families()

    def _families(self, zero: bool = False) -> Iterable[Any]:
        m = self.rlm

        def v(x: float) -> float:
            return 0 if zero else x

        for name, doc, value in (
            ("remotecopybytes", "Bytes uploaded to remote storage (Kafka's "
             "RemoteCopyBytesPerSec).", m.copy_bytes),
            ("remotecopyrequests", "Segment uploads tried (Kafka's RemoteCopyRequestsPerSec).",
             m.copy_requests),
            ("remotecopyerrors", "Failed remote log rounds: uploads, manifest commits, "
             "remote deletes (Kafka's RemoteCopyErrorsPerSec).", m.copy_errors),
            ("remotefetchbytes", "Bytes read from remote storage for Fetch (Kafka's "
             "RemoteFetchBytesPerSec).", m.fetch_bytes),
            ("remotefetchrequests", "Fetch reads served from the remote log (Kafka's "
             "RemoteFetchRequestsPerSec).", m.fetch_requests),
            ("remotefetcherrors", "Remote reads that failed (Kafka's "
             "RemoteFetchErrorsPerSec).", m.fetch_errors),
        ):
            yield CounterMetricFamily(_BTM + name, doc, value=v(value))
        lag_b = GaugeMetricFamily(_BTM + "remotecopylagbytes", "Bytes of rolled segments "
                                  "not uploaded yet, by topic, on its leader (KIP-963's "
                                  "RemoteCopyLagBytes).", labels=["topic"])
        lag_s = GaugeMetricFamily(_BTM + "remotecopylagsegments", "Rolled segments not "
                                  "uploaded yet, by topic, on its leader (KIP-963's "
                                  "RemoteCopyLagSegments).", labels=["topic"])
        size = GaugeMetricFamily(_BTM + "remotelogsizebytes", "Bytes of the remote log, by "
                                 "topic, on its leader (KIP-963's RemoteLogSizeBytes).",
                                 labels=["topic"])
        if not zero:
            per: dict[str, list[int]] = {}
            for s in m.status():
                if s["leader"]:
                    t = per.setdefault(s["topic"], [0, 0, 0])
                    t[0] += s["lag_bytes"]
                    t[1] += s["lag_segments"]
                    t[2] += s["remote_bytes"]
            for topic, (b, n, r) in sorted(per.items()):
                lag_b.add_metric([topic], b)
                lag_s.add_metric([topic], n)
                size.add_metric([topic], r)
        yield lag_b
        yield lag_s
        yield size
        q = m.fetch_quota
        yield CounterMetricFamily(
            "kafka_log_remote_remotelogmanager_remotefetchthrottletime_seconds",
            "Time remote reads waited for remote.log.manager.fetch.max.bytes.per.second "
            "(KIP-956's RemoteFetchThrottleTime, as a total).", value=v(q.throttle_s))
        yield CounterMetricFamily("yak_tiered_fetch_throttled", "Remote reads that waited "
                                  "for the remote fetch quota.", value=v(q.throttled))
        for name, doc, value in (
            ("orphans_deleted", "Remote objects no manifest names, deleted by the orphan "
             "sweep.", m.orphans_deleted),
            ("segments_copied", "Segments uploaded and committed.", m.segments_copied),
            ("segments_deleted", "Remote segments deleted by remote retention.",
             m.segments_deleted),
        ):
            yield CounterMetricFamily(f"yak_tiered_{name}", doc, value=v(value))
        g = m.guard
        yield GaugeMetricFamily(
            "yak_tiered_disk_guard_active", "1 while the copy lag is over "
            "remote.log.manager.copy.lag.max.bytes (yak.tiered.guard).",
            value=v(1 if g.active else 0))
        yield GaugeMetricFamily(
            "yak_tiered_copy_lag_bytes", "The copy lag over the partitions led here, as the "
            "disk guard last measured it.", value=v(g.lag_bytes))
