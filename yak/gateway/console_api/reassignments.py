"""The Reassignments page's API (issue 23): every partition being moved, how far its
copy has come, and the throttles in force.

- What moves: ListPartitionReassignments (replicas, adding, removing) from one live broker,
  with the leader and ISR from Metadata.
- How far: DescribeLogDirs on every live broker holding a moving partition. An adding
  replica has `leader size - its size` bytes left to copy (the leader keeps appending, so
  this is where the copy stands now, not a promise); its rate is the growth of its size
  between two samples. The last sample of each replica is kept on the app, so a page that
  polls gets the rate over its poll interval; with no recent sample, a second one is taken
  a second after the first.
- Throttles: every live broker's `leader.replication.throttled.rate` and
  `follower.replication.throttled.rate` (DescribeConfigs, one request for all brokers) and
  each moving topic's `*.replication.throttled.replicas`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from typing import Any

from fastapi import Request

from yak.gateway.cluster import ClusterClient, ClusterError
from yak.gateway.console_api.brokers import _broker_log_dirs
from yak.gateway.console_api.common import ERRORS, cluster_of, page_router
from yak.gateway.errors import RestError

router = page_router()

RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
REPLICA_KEYS = ("leader.replication.throttled.replicas",
                "follower.replication.throttled.replicas")
UNTHROTTLED = (1 << 63) - 1  # Kafka's default rate (Long.MAX_VALUE): no throttle
SAMPLE_GAP_S = 1.0  # a second sample this long after a first, when none is recent
SAMPLE_MAX_AGE_S = 30.0  # an older kept sample gives no rate


def list_reassignments(host: str, port: int, timeout_s: float, security: Any
                        ) -> list[dict[str, Any]]:
    """ListPartitionReassignments v0 on one broker: every partition being moved."""
    from yak.client.connection import Connection, build
    from yak.protocol.kio_compat import schema_module

    req = schema_module("list_partition_reassignments", 0, "request")
    resp_mod = schema_module("list_partition_reassignments", 0, "response")
    conn = Connection(host, port, client_id="yak-console", timeout_s=timeout_s,
                      security=security)
    try:
        resp = conn.send(build(req.ListPartitionReassignmentsRequest, topics=None,
                               timeout=datetime.timedelta(seconds=timeout_s)),
                         resp_mod.ListPartitionReassignmentsResponse)
    finally:
        conn.close()
    if resp.error_code:
        raise ClusterError(resp.error_message or f"ListPartitionReassignments failed "
                           f"(error {resp.error_code})", int(resp.error_code))
    return sorted(({"topic": str(t.name), "partition": int(p.partition_index),
                    "replicas": [int(r) for r in p.replicas],
                    "adding": [int(r) for r in p.adding_replicas],
                    "removing": [int(r) for r in p.removing_replicas]}
                   for t in resp.topics for p in t.partitions),
                  key=lambda m: (m["topic"], m["partition"]))


def _sizes(host: str, port: int, timeout_s: float, security: Any,
           wanted: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Size of each wanted partition on one broker (DescribeLogDirs)."""
    out: dict[tuple[str, int], int] = {}
    for d in _broker_log_dirs(host, port, timeout_s, security):
        for p in d["partitions"]:
            key = (p["topic"], p["partition"])
            if key in wanted:
                out[key] = out.get(key, 0) + p["size"]
    return out


def _broker_rates(cluster: ClusterClient, broker_id: int) -> dict[str, int | None]:
    """One broker's replication throttle rates (None: unthrottled). One DescribeConfigs
    per broker: librdkafka takes one BROKER resource per request."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    res = ConfigResource(ResourceType.BROKER, str(broker_id))
    entries = cluster.admin.describe_configs([res], request_timeout=cluster.timeout_s)[
        res].result(cluster.timeout_s + 5)
    rates: dict[str, int | None] = {}
    for key in RATE_KEYS:
        e = entries.get(key)
        value = int(e.value) if e is not None and e.value not in (None, "") else UNTHROTTLED
        rates[key] = None if value >= UNTHROTTLED else value
    return rates


class _Samples:
    """Each replica's last size (and when), kept on the app between requests."""

    def __init__(self) -> None:
        self.last: dict[tuple[Any, str, int, int], tuple[float, int]] = {}


def _samples_of(request: Request) -> _Samples:
    state = request.app.state
    samples = getattr(state, "console_reassignment_samples", None)
    if samples is None:
        samples = state.console_reassignment_samples = _Samples()
    return samples


@router.get("/reassignments", responses=ERRORS)
async def reassignments(request: Request) -> Any:
    """Every partition being moved: its replicas, adding and removing sets, leader and
    ISR; per adding replica its size, the bytes left and the rate of its copy; the
    throttles in force (brokers' rates, topics' throttled replicas)."""
    cluster = cluster_of(request)
    md = await cluster.metadata()
    if not md.brokers:
        raise RestError(503, 50301, "No broker is reachable.")
    host, port = next(iter(md.brokers.values()))
    moves = await asyncio.to_thread(list_reassignments, host, port, cluster.timeout_s,
                                    cluster.security)
    wanted = {(m["topic"], m["partition"]) for m in moves}
    holders = sorted({r for m in moves for r in m["replicas"] if r in md.brokers})
    samples = _samples_of(request)

    async def sample() -> tuple[float, dict[int, dict[tuple[str, int], int]]]:
        async def one(b: int) -> tuple[int, dict[tuple[str, int], int] | None]:
            h, p = md.brokers[b]
            try:
                return b, await asyncio.to_thread(_sizes, h, p, cluster.timeout_s,
                                                  cluster.security, wanted)
            except Exception:  # a broker that stopped answering: its sizes are unknown
                return b, None
        got = await asyncio.gather(*(one(b) for b in holders))
        return time.monotonic(), {b: s for b, s in got if s is not None}

    now, sizes = await sample() if moves else (time.monotonic(), {})
    cid = md.cluster_id
    fresh = any(now - samples.last.get((cid, m["topic"], m["partition"], r), (-1e9, 0))[0]
                <= SAMPLE_MAX_AGE_S for m in moves for r in m["adding"])
    if moves and not fresh:
        for b, per in sizes.items():
            for (t, p), size in per.items():
                samples.last[(cid, t, p, b)] = (now, size)
        await asyncio.sleep(SAMPLE_GAP_S)
        now, sizes = await sample()

    errors: dict[str, str] = {}
    got = await asyncio.gather(*(asyncio.to_thread(_broker_rates, cluster, i)
                                 for i in sorted(md.brokers)), return_exceptions=True)
    rates: dict[int, dict[str, int | None]] = {}
    for i, r in zip(sorted(md.brokers), got, strict=True):
        if isinstance(r, BaseException):  # the moves are still worth showing
            errors[f"throttles of broker {i}"] = str(r) or type(r).__name__
        else:
            rates[i] = r
    topic_throttles: dict[str, dict[str, str | None]] = {}
    for topic in sorted({m["topic"] for m in moves}):
        cfg: dict[str, Any] = {}
        with contextlib.suppress(ClusterError):
            cfg = {c["name"]: c["value"] for c in await cluster.topic_configs(topic)}
        topic_throttles[topic] = {k: cfg.get(k) or None for k in REPLICA_KEYS}

    kept: dict[tuple[Any, str, int, int], tuple[float, int]] = {}
    out = []
    for m in moves:
        t, p = m["topic"], m["partition"]
        tm = md.topics.get(t)
        pm = tm.partitions.get(p) if tm is not None else None
        leader = pm.leader if pm is not None else -1
        leader_size = sizes.get(leader, {}).get((t, p)) if leader >= 0 else None
        replicas = []
        for r in m["adding"]:
            size = sizes.get(r, {}).get((t, p))
            prev = samples.last.get((cid, t, p, r))
            rate = None
            if size is not None:
                kept[(cid, t, p, r)] = (now, size)
                if prev is not None and 0 < now - prev[0] <= SAMPLE_MAX_AGE_S + SAMPLE_GAP_S:
                    rate = max(0.0, (size - prev[1]) / (now - prev[0]))
            left = None if size is None or leader_size is None else max(0, leader_size - size)
            replicas.append({"broker": r, "online": r in md.brokers, "size": size,
                             "bytes_left": left, "rate": rate,
                             "in_sync": pm is not None and r in pm.isr})
        out.append({**m, "leader": leader, "isr": pm.isr if pm is not None else [],
                    "target": [r for r in m["replicas"] if r not in m["removing"]],
                    "leader_size": leader_size, "adding_replicas": replicas,
                    "bytes_left": _total(x["bytes_left"] for x in replicas),
                    "rate": _total(x["rate"] for x in replicas),
                    "throttled_replicas": topic_throttles.get(t, {})})
    samples.last = kept  # only moving replicas are kept: a finished move leaves nothing
    return {"reassignments": out, "time": time.time(),
            "brokers": [{"id": i, "known": i in rates,
                         "leader_rate": rates.get(i, {}).get(RATE_KEYS[0]),
                         "follower_rate": rates.get(i, {}).get(RATE_KEYS[1])}
                        for i in sorted(md.brokers)],
            "errors": errors}


def _total(values: Any) -> Any:
    """The sum, or None when any value is unknown (None)."""
    values = list(values)
    return None if any(v is None for v in values) else sum(values)
