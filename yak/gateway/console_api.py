"""The JSON API behind the web console (`/api/...`): overview, topics, messages, groups,
transactions.

It is shaped for the page rather than for REST Proxy compatibility: one call per view,
with every number the view shows (log start, log end, high watermark and size per
partition; lag per group partition), so the browser never fans out requests.
Errors use the same `{"error_code", "message"}` body as the REST Proxy API.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any, Literal

from aiokafka import TopicPartition
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from yak.gateway import errors as E
from yak.gateway.cluster import ClusterClient, ClusterError
from yak.gateway.core import GatewayCore, OutRecord
from yak.gateway.core.formats import b64 as _b64
from yak.gateway.core.formats import from_b64
from yak.gateway.errors import MAX_SAFE_INT, ErrorBody, RestError, V2Response
from yak.gateway.http_auth import caller_core

router = APIRouter(prefix="/api", tags=["console"], default_response_class=V2Response)

_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorBody} for s in (400, 404, 409, 413, 422, 500, 503)
}
MAX_BROWSE = 500
BROWSE_WAIT_S = 3.0
TOPIC_NAME = r"^[A-Za-z0-9._-]{1,249}$"


def _cluster(request: Request) -> ClusterClient:
    return caller_core(request).cluster


def _core(request: Request) -> GatewayCore:
    """The core acting for this request's caller (yak.gateway.http_auth)."""
    return caller_core(request)


class NewTopicBody(BaseModel):
    name: str = Field(pattern=TOPIC_NAME)
    partitions: int = Field(default=1, ge=1, le=256)
    replication_factor: int = Field(default=1, ge=1, le=16)
    configs: dict[str, str] = Field(default_factory=dict)


class ConfigChanges(BaseModel):
    configs: dict[str, str | None]


class ProduceBody(BaseModel):
    key: str | None = None
    value: str | None = None
    partition: int | None = Field(default=None, ge=0, le=2**31 - 1)
    headers: dict[str, str] = Field(default_factory=dict)
    encoding: str = Field(default="text", pattern="^(text|base64)$")


@router.get("/health")
async def health(request: Request) -> Any:
    try:
        rtt = await _cluster(request).ping()
    except ClusterError as e:
        return V2Response({"up": False, "error": e.message}, status_code=503)
    return {"up": True, "rtt_ms": round(rtt * 1000, 2)}


def _internal(tm: Any) -> bool:
    """Kafka's internal topics and, by convention, every topic whose name starts with "_"
    (`_schemas`, `_confluent-*`): the console offers no one-click delete for them."""
    return bool(tm.internal) or tm.name.startswith("_")


def _brokers(request: Request, md: Any, leaders: dict[int, int],
             replicas: dict[int, int]) -> list[dict[str, Any]]:
    """Every broker of the cluster, live or not. Metadata lists only live (registered,
    unfenced) brokers; a stopped one is still named by the replica sets of its partitions
    (kept in the cluster's metadata: etcd in a cluster), and this gateway remembers the
    address of every broker it has seen. Those not in Metadata are offline."""
    state = request.app.state
    seen: dict[tuple[Any, int], tuple[str, int]] = getattr(state, "console_seen_brokers", None)
    if seen is None:
        seen = state.console_seen_brokers = {}
    for i, addr in md.brokers.items():
        seen[(md.cluster_id, i)] = addr
    known = set(md.brokers) | {r for r in replicas if r >= 0}
    known |= {i for (cid, i) in seen if cid == md.cluster_id}
    out = []
    for i in sorted(known):
        online = i in md.brokers
        host, port = md.brokers[i] if online else seen.get((md.cluster_id, i), (None, None))
        out.append({"id": i, "host": host, "port": port, "online": online,
                    "leaders": leaders.get(i, 0), "replicas": replicas.get(i, 0)})
    return out


@router.get("/overview", responses=_ERRORS)
async def overview(
    request: Request,
    urp_offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    urp_limit: Annotated[int, Query(ge=1, le=500)] = 20,
) -> Any:
    """The cluster at a glance; the under-replicated partitions one page at a time
    (`urp_offset`, `urp_limit`), all of them counted."""
    gw = request.app.state.gateway
    cluster = _cluster(request)
    md = await cluster.metadata()
    tps = [(t, p) for t, tm in md.topics.items() for p in tm.partitions]
    marks = await cluster.watermarks(tps)
    sizes = await cluster.log_dirs()
    # Replication at a glance (issue 11): leaders and replicas per broker, partitions whose
    # ISR is smaller than their replica set (under-replicated) and those with no leader.
    leaders: dict[int, int] = {}
    replicas: dict[int, int] = {}
    urp: list[dict[str, Any]] = []
    offline = 0
    for name, tm in sorted(md.topics.items()):
        for pid, pm in sorted(tm.partitions.items()):
            leaders[pm.leader] = leaders.get(pm.leader, 0) + 1
            for r in pm.replicas:
                replicas[r] = replicas.get(r, 0) + 1
            if pm.leader < 0:
                offline += 1
            if len(pm.isr) < len(pm.replicas) or pm.leader < 0:
                urp.append({"topic": name, "partition": pid, "leader": pm.leader,
                            "replicas": pm.replicas, "isr": pm.isr})
    user = [t for t in md.topics.values() if not _internal(t)]
    internal = [t for t in md.topics.values() if _internal(t)]
    out: dict[str, Any] = {
        "cluster_id": md.cluster_id,
        "controller_id": md.controller_id,
        "brokers": _brokers(request, md, leaders, replicas),
        "under_replicated": len(urp),
        "offline_partitions": offline,
        "under_replicated_partitions": urp[urp_offset:urp_offset + urp_limit],
        "under_replicated_offset": urp_offset,
        "under_replicated_limit": urp_limit,
        # Topics and partitions counted alike: the user's, and the internal ones apart.
        "topics": len(user),
        "partitions": sum(len(t.partitions) for t in user),
        "internal_topics": len(internal),
        "internal_partitions": sum(len(t.partitions) for t in internal),
        # Sum of high watermarks: its rate of change is the cluster's messages in per second.
        "messages_total": sum(max(m.high_watermark, 0) for m in marks.values()),
        "bytes_total": sum(s for s, _ in sizes.values()),
        "time": time.time(),
        "embedded": gw.embedded,
    }
    if gw.settings.broker_metrics is not None:
        out["broker"] = gw.settings.broker_metrics.totals()
    return out


@router.get("/topics", responses=_ERRORS)
async def topics(request: Request) -> Any:
    cluster = _cluster(request)
    md = await cluster.metadata()
    tps = [(t, p) for t, tm in md.topics.items() for p in tm.partitions]
    marks = await cluster.watermarks(tps)
    sizes = await cluster.log_dirs()
    rows = []
    for name, tm in sorted(md.topics.items()):
        parts = [(name, p) for p in tm.partitions]
        rows.append({
            "name": name, "internal": _internal(tm), "partitions": len(tm.partitions),
            "replication_factor": max((len(p.replicas) for p in tm.partitions.values()),
                                      default=0),
            "messages": sum(max(marks[tp].high_watermark - marks[tp].log_start_offset, 0)
                            for tp in parts),
            "size": sum(sizes.get(tp, (0, 0))[0] for tp in parts),
        })
    # Retention of every topic in one DescribeConfigs each would be N round trips; the
    # list shows it for non-internal topics only, concurrently.
    async def retention(row: dict[str, Any]) -> None:
        try:
            cfg = {c["name"]: c["value"] for c in await cluster.topic_configs(row["name"])}
        except ClusterError:
            cfg = {}
        row["retention_ms"] = cfg.get("retention.ms")
        row["retention_bytes"] = cfg.get("retention.bytes")
        row["cleanup_policy"] = cfg.get("cleanup.policy")

    await asyncio.gather(*(retention(r) for r in rows))
    return rows


@router.post("/topics", status_code=201, responses=_ERRORS)
async def create_topic(request: Request, body: NewTopicBody) -> Any:
    await _cluster(request).create_topic(body.name, body.partitions, body.replication_factor,
                                         body.configs)
    return {"name": body.name}


@router.delete("/topics/{topic}", status_code=204, response_class=Response, responses=_ERRORS)
async def delete_topic(request: Request, topic: str,
                       confirm: Annotated[str | None, Query(max_length=249)] = None) -> Response:
    """Delete a topic; an internal one (`__consumer_offsets`, `_schemas`, ...) only with
    `?confirm=<its name>`, so that no single click loses the cluster's own state."""
    tm = await _cluster(request).topic(topic)
    if tm is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    if _internal(tm) and confirm != topic:
        raise RestError(403, 40302, f"{topic} is an internal topic: deleting it loses the "
                        "state it holds; repeat with ?confirm=<topic name> to delete it")
    await _cluster(request).delete_topic(topic)
    return Response(status_code=204)


@router.get("/topics/{topic}", responses=_ERRORS)
async def topic_detail(request: Request, topic: str) -> Any:
    cluster = _cluster(request)
    tm = await cluster.topic(topic)
    if tm is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    tps = [(topic, p) for p in sorted(tm.partitions)]
    marks, sizes, configs = await asyncio.gather(
        cluster.watermarks(tps), cluster.log_dirs(), cluster.topic_configs(topic)
    )
    parts = []
    for tp in tps:
        pm = tm.partitions[tp[1]]
        m = marks[tp]
        size, lag = sizes.get(tp, (0, 0))
        parts.append({
            "partition": pm.partition, "leader": pm.leader, "replicas": pm.replicas,
            "isr": pm.isr, "error": pm.error,
            "log_start_offset": m.log_start_offset, "high_watermark": m.high_watermark,
            # DescribeLogDirs' offset_lag is log end minus high watermark on the leader.
            "log_end_offset": m.high_watermark + lag if m.high_watermark >= 0 else -1,
            "last_stable_offset": m.last_stable_offset, "size": size,
        })
    return {"name": topic, "internal": _internal(tm), "partitions": parts, "configs": configs}


@router.put("/topics/{topic}/configs", responses=_ERRORS)
async def alter_configs(request: Request, topic: str, body: ConfigChanges) -> Any:
    cluster = _cluster(request)
    if await cluster.topic(topic) is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    if body.configs:
        await cluster.alter_topic_configs(topic, body.configs)
    return {"configs": await cluster.topic_configs(topic)}


@router.get("/topics/{topic}/messages", responses=_ERRORS)
async def browse(
    request: Request, topic: str,
    partition: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    offset: Annotated[int | None, Query(ge=-2, le=MAX_SAFE_INT)] = None,
    timestamp: Annotated[int | None, Query(ge=0, le=MAX_SAFE_INT)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_BROWSE)] = 50,
    all_partitions: Annotated[bool, Query(alias="all")] = False,
) -> Any:
    """Records of one partition from `offset` (default: the last `limit`) or `timestamp`;
    with `all=true`, of every partition of the topic, in timestamp order: the first `limit`
    from `timestamp` (or from the start, with `offset=-2`), or the last `limit`."""
    cluster = _cluster(request)
    tm = await cluster.topic(topic)
    if tm is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    if all_partitions:
        if offset is not None and offset not in (-1, -2):
            raise RestError(422, 42207, "across all partitions, seek by timestamp, or from "
                            "the earliest (offset=-2) or latest (offset=-1) records")
        return await _browse_all(cluster, topic, sorted(tm.partitions), timestamp,
                                 earliest=offset == -2, limit=limit)
    if partition not in tm.partitions:
        raise RestError(404, E.PARTITION_NOT_FOUND, "Partition not found.")
    m = (await cluster.watermarks([(topic, partition)]))[(topic, partition)]
    if timestamp is not None:
        start = await cluster.offset_for_time(topic, partition, timestamp)
        if start < 0:
            start = m.high_watermark
    elif offset is None or offset == -1:
        start = max(m.high_watermark - limit, m.log_start_offset)
    elif offset == -2:
        start = m.log_start_offset
    else:
        if offset < m.log_start_offset or offset > m.high_watermark:
            raise RestError(
                422, 42207,
                f"offset {offset} is outside the partition's range "
                f"[{m.log_start_offset}, {m.high_watermark}]",
            )
        start = offset
    messages = await _read(cluster, topic, partition, start, m.high_watermark, limit)
    return {
        "topic": topic, "partition": partition, "start": start,
        "log_start_offset": m.log_start_offset, "high_watermark": m.high_watermark,
        "messages": messages,
    }


async def _browse_all(cluster: ClusterClient, topic: str, partitions: list[int],
                      timestamp: int | None, earliest: bool, limit: int) -> dict[str, Any]:
    """Every partition read from its start point (the offset of `timestamp`, its log
    start, or `limit` before its high watermark), merged in timestamp order."""
    tps = [(topic, p) for p in partitions]
    marks = await cluster.watermarks(tps)
    starts: dict[int, int] = {}
    if timestamp is not None:
        found = await asyncio.gather(*(cluster.offset_for_time(topic, p, timestamp)
                                       for p in partitions))
        for p, off in zip(partitions, found, strict=True):
            hw = marks[(topic, p)].high_watermark
            starts[p] = hw if off < 0 else off
    else:
        for p in partitions:
            m = marks[(topic, p)]
            starts[p] = (m.log_start_offset if earliest
                         else max(m.high_watermark - limit, m.log_start_offset))
    ends = {p: marks[(topic, p)].high_watermark for p in partitions}
    want = {p: min(ends[p] - starts[p], limit) for p in partitions if ends[p] > starts[p]}
    out = await _read_many(cluster, topic, starts, ends, want) if want else []
    out.sort(key=lambda r: (r["timestamp"], r["partition"], r["offset"]))
    out = out[-limit:] if timestamp is None and not earliest else out[:limit]
    return {
        "topic": topic, "partition": None, "all": True, "timestamp": timestamp,
        "partitions": [{"partition": p, "start": starts[p],
                        "log_start_offset": marks[(topic, p)].log_start_offset,
                        "high_watermark": ends[p]} for p in partitions],
        "messages": out,
    }


async def _read_many(cluster: ClusterClient, topic: str, starts: dict[int, int],
                     ends: dict[int, int], want: dict[int, int]) -> list[dict[str, Any]]:
    consumer = await cluster.start_consumer(None, "yak-console",
                                            max_partition_fetch_bytes=1024 * 1024)
    got: dict[int, list[dict[str, Any]]] = {p: [] for p in want}
    try:
        tps = {p: TopicPartition(topic, p) for p in want}
        consumer.assign(list(tps.values()))
        for p, tp in tps.items():
            consumer.seek(tp, starts[p])
        deadline = time.monotonic() + BROWSE_WAIT_S
        while time.monotonic() < deadline:
            open_ = [tp for p, tp in tps.items()
                     if len(got[p]) < want[p] and (not got[p] or got[p][-1]["offset"] < ends[p] - 1)]
            if not open_:
                break
            batch = await consumer.getmany(*open_, timeout_ms=500, max_records=MAX_BROWSE)
            for tp, records in batch.items():
                for r in records:
                    if len(got[tp.partition]) >= want[tp.partition]:
                        break
                    got[tp.partition].append({
                        "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
                        "timestamp_type": r.timestamp_type,
                        "key": _b64(r.key), "value": _b64(r.value),
                        "headers": [[k, _b64(v)] for k, v in (r.headers or ())],
                    })
    finally:
        await consumer.stop()
    return [r for rows in got.values() for r in rows]


async def _read(cluster: ClusterClient, topic: str, partition: int, start: int, end: int,
                limit: int) -> list[dict[str, Any]]:
    if start >= end:
        return []
    consumer = await cluster.start_consumer(None, "yak-console",
                                            max_partition_fetch_bytes=1024 * 1024)
    out: list[dict[str, Any]] = []
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + BROWSE_WAIT_S
        while len(out) < limit and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=500, max_records=limit - len(out))
            for r in batch.get(tp, []):
                out.append({
                    "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
                    "timestamp_type": r.timestamp_type,
                    "key": _b64(r.key), "value": _b64(r.value),
                    "headers": [[k, _b64(v)] for k, v in (r.headers or ())],
                })
            if out and out[-1]["offset"] >= end - 1:
                break
    finally:
        await consumer.stop()
    return out[:limit]


@router.post("/topics/{topic}/messages", status_code=201, responses=_ERRORS)
async def produce(request: Request, topic: str, body: ProduceBody) -> Any:
    core = _core(request)
    tm = await core.topic(topic)
    if body.partition is not None and body.partition not in tm.partitions:
        raise RestError(404, E.PARTITION_NOT_FOUND, "Partition not found.")

    def enc(s: str | None) -> bytes | None:
        if s is None or body.encoding != "base64":
            return None if s is None else s.encode()
        return from_b64(s)

    (res,) = await core.produce(topic, [OutRecord(
        enc(body.key), enc(body.value), body.partition,
        [(k, v.encode()) for k, v in body.headers.items()],
    )])
    if res.error is not None:
        raise res.error
    return {"topic": topic, "partition": res.partition, "offset": res.offset,
            "timestamp": res.timestamp_ms}


@router.get("/authorizer", responses=_ERRORS)
async def authorizer(request: Request) -> Any:
    """Whether the cluster enforces ACLs: its brokers' `authorizer.class.name` (an empty
    one means no authorizer: every principal may do everything, and ACLs, even if listed,
    are not checked). `enforced` is null when the caller may not read broker configs."""
    try:
        name = (await _cluster(request).broker_configs(["authorizer.class.name"]))[
            "authorizer.class.name"]
    except ClusterError:
        return {"enforced": None, "class_name": None}
    return {"enforced": bool(name), "class_name": name or None}


@router.get("/groups", responses=_ERRORS)
async def groups(request: Request) -> Any:
    cluster = _cluster(request)
    rows = await cluster.groups()

    async def fill(row: dict[str, Any]) -> None:
        try:
            lag = await cluster.group_lag(row["group_id"])
            row["lag"] = sum(r["lag"] for r in lag)
            row["partitions"] = len(lag)
        except ClusterError:
            row["lag"] = None
        try:
            row["members"] = len((await cluster.describe_group(row["group_id"]))["members"])
        except ClusterError:
            row["members"] = None

    await asyncio.gather(*(fill(r) for r in rows))
    return rows


@router.get("/transactions", responses=_ERRORS)
async def transactions(request: Request) -> Any:
    """Open transactions with their age and the LSO lag (high watermark - last stable
    offset) of each partition they hold, and every partition whose LSO lags its HW (what
    read_committed consumers cannot read yet)."""
    cluster = _cluster(request)
    txns, md = await asyncio.gather(cluster.transactions(), cluster.metadata())
    tps = [(t, p) for t, tm in md.topics.items() for p in tm.partitions]
    marks = await cluster.watermarks(tps)
    now = int(time.time() * 1000)

    def lag(t: str, p: int) -> dict[str, Any]:
        m = marks.get((t, p))
        hw, lso = (m.high_watermark, m.last_stable_offset) if m else (-1, -1)
        return {"topic": t, "partition": p, "high_watermark": hw, "last_stable_offset": lso,
                "lso_lag": max(hw - lso, 0) if hw >= 0 and lso >= 0 else None}

    open_rows = []
    for row in txns:
        if "start_time_ms" not in row:
            continue
        start = row["start_time_ms"]
        row["age_ms"] = now - start if start >= 0 else None
        row["partitions"] = [lag(t, p) for t, p in row["partitions"]]
        open_rows.append(row)
    held = [lag(t, p) for t, p in sorted(tps)]
    return {
        "open": sorted(open_rows, key=lambda r: -(r["age_ms"] or 0)),
        "total": len(txns),
        "lagging_partitions": [r for r in held if r["lso_lag"]],
        "time": now / 1000,
    }


@router.get("/groups/{group}", responses=_ERRORS)
async def group_detail(request: Request, group: str) -> Any:
    cluster = _cluster(request)
    known = {g["group_id"] for g in await cluster.groups()}
    if group not in known:
        raise RestError(404, 40405, "Consumer group not found.")
    desc, lag = await asyncio.gather(cluster.describe_group(group), cluster.group_lag(group))
    desc["lag"] = lag
    desc["total_lag"] = sum(r["lag"] for r in lag)
    return desc


# ------------------------------------------------------------------ client quotas (KIP-546)

QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")


# Kafka's IP quotas take only connection_creation_rate, which Yak does not enforce: the
# broker refuses them, so the console offers users and client ids.
QuotaEntityType = Literal["user", "client-id"]
_ByteRate = Annotated[int, Field(gt=0, le=MAX_SAFE_INT)]  # Kafka: whole bytes per second
_Rate = Annotated[float, Field(gt=0, le=MAX_SAFE_INT)]


class QuotaValues(BaseModel):
    """Quota key -> value; null removes the key, a key left out is left as it is."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})
    producer_byte_rate: _ByteRate | None = None
    consumer_byte_rate: _ByteRate | None = None
    request_percentage: _Rate | None = None
    controller_mutation_rate: _Rate | None = None

    @model_validator(mode="after")
    def _one_at_least(self) -> QuotaValues:
        if not self.model_fields_set:
            raise ValueError("name at least one quota")
        return self

    def changes(self) -> dict[str, float | None]:
        return {k: (None if (v := getattr(self, k)) is None else float(v))
                for k in sorted(self.model_fields_set)}


class QuotaChange(BaseModel):
    """Types, keys and value ranges in the schema itself, so a request it allows is one
    the server accepts."""

    # entity type -> name; null names the default entity of that type (`<default>`).
    entity: dict[QuotaEntityType, str | None] = Field(min_length=1)
    quotas: QuotaValues


def _quota_call(cluster: ClusterClient, fn: Any) -> Any:
    """Run `fn(client)` with Yak's own client (no Python Kafka client has the quota APIs),
    with the cluster's bootstrap and security; a Kafka error becomes a ClusterError."""
    from yak.client import KafkaClient
    from yak.errors import KafkaError

    try:
        with KafkaClient(cluster.bootstrap, client_id="yak-console",
                         request_timeout_ms=int(cluster.timeout_s * 1000), retries=1,
                         security=cluster.security) as c:
            return fn(c)
    except KafkaError as e:
        name = getattr(e.code, "name", str(e.code)).upper()
        raise ClusterError(f"{name}: {e.message}", int(e.code), name) from None
    except OSError as e:
        raise ClusterError(f"the cluster is unreachable: {e}", -195, "_TRANSPORT") from None


def _quota_number(v: float) -> float | int:
    return int(v) if float(v).is_integer() else v


@router.get("/quotas", responses=_ERRORS)
async def quotas(request: Request) -> Any:
    """Every client quota the cluster keeps (DescribeClientQuotas, any entity): one row
    per entity (user, client id, ip; a null name is that type's default)."""
    cluster = _cluster(request)
    found = await asyncio.to_thread(_quota_call, cluster, lambda c: c.describe_client_quotas(
        []))
    rows = [{"entity": e, "quotas": {k: _quota_number(v) for k, v in sorted(q.items())}}
            for e, q in found]
    rows.sort(key=lambda r: [(t, n is not None, n or "") for t, n in sorted(r["entity"].items())])
    return {"quotas": rows, "keys": list(QUOTA_KEYS)}


@router.post("/quotas", responses=_ERRORS)
async def alter_quotas(request: Request, body: QuotaChange) -> Any:
    """Set (a number) or remove (null) quota keys of one entity (AlterClientQuotas)."""
    quotas = body.quotas.changes()  # types, keys and values checked by the schema
    cluster = _cluster(request)
    results = await asyncio.to_thread(_quota_call, cluster, lambda c: c.alter_client_quotas(
        [(body.entity, quotas)]))
    for _entity, code, message in results:
        if code:
            from yak.errors import ErrorCode

            name = ErrorCode(code).name.upper()
            raise ClusterError(f"{name}: {message or name}", code, name)
    return {"entity": body.entity, "quotas": quotas}


# ------------------------------------------------------------------ one broker


def _broker_log_dirs(host: str, port: int, timeout_s: float, security: Any) -> list[dict[str, Any]]:
    """DescribeLogDirs v4 on one broker: its log directories with their space and the
    size and offset lag of every partition they hold."""
    from yak.client.connection import Connection, build
    from yak.protocol.kio_compat import schema_module

    conn = Connection(host, port, client_id="yak-console", timeout_s=timeout_s,
                      security=security)
    try:
        resp = conn.send(
            build(schema_module("describe_log_dirs", 4, "request").DescribeLogDirsRequest,
                  topics=None),
            schema_module("describe_log_dirs", 4, "response").DescribeLogDirsResponse)
    finally:
        conn.close()
    out = []
    for d in resp.results:
        parts = sorted(({"topic": str(t.name), "partition": int(p.partition_index),
                         "size": int(p.partition_size), "offset_lag": int(p.offset_lag)}
                        for t in d.topics for p in t.partitions),
                       key=lambda r: (r["topic"], r["partition"]))
        out.append({"path": str(d.log_dir), "error_code": int(d.error_code),
                    "total_bytes": int(d.total_bytes), "usable_bytes": int(d.usable_bytes),
                    "size": sum(p["size"] for p in parts), "partitions": parts})
    return out


def _broker_configs(cluster: ClusterClient, broker_id: int) -> list[dict[str, Any]]:
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    def source(v: Any) -> str:
        try:
            return ConfigSource(v).name
        except ValueError:
            return getattr(v, "name", str(v))

    res = ConfigResource(ResourceType.BROKER, str(broker_id))
    entries = cluster.admin.describe_configs([res], request_timeout=cluster.timeout_s)[res].result(
        cluster.timeout_s + 5)
    return [{"name": e.name, "value": None if e.is_sensitive else e.value,
             "is_default": bool(e.is_default), "read_only": bool(e.is_read_only),
             "sensitive": bool(e.is_sensitive),
             "source": source(e.source)}
            for e in sorted(entries.values(), key=lambda e: e.name)]


@router.get("/brokers/{broker_id}", responses=_ERRORS)
async def broker_detail(request: Request, broker_id: int) -> Any:
    """One broker: its address and status, its configs (DescribeConfigs), its log dirs
    (DescribeLogDirs: space, size per partition) and the partitions it leads and follows
    (with whether it is in their ISR)."""
    cluster = _cluster(request)
    md = await cluster.metadata()
    led: list[dict[str, Any]] = []
    followed: list[dict[str, Any]] = []
    leaders: dict[int, int] = {}
    replicas: dict[int, int] = {}
    for name, tm in sorted(md.topics.items()):
        for pid, pm in sorted(tm.partitions.items()):
            leaders[pm.leader] = leaders.get(pm.leader, 0) + 1
            for r in pm.replicas:
                replicas[r] = replicas.get(r, 0) + 1
            if broker_id not in pm.replicas and pm.leader != broker_id:
                continue
            row = {"topic": name, "partition": pid, "leader": pm.leader,
                   "replicas": pm.replicas, "isr": pm.isr, "in_sync": broker_id in pm.isr}
            (led if pm.leader == broker_id else followed).append(row)
    known = {b["id"]: b for b in _brokers(request, md, leaders, replicas)}
    if broker_id not in known:
        raise RestError(404, 40403, f"Broker {broker_id} not found.")
    out: dict[str, Any] = {**known[broker_id], "controller": broker_id == md.controller_id,
                           "led": led, "followed": followed, "configs": None,
                           "log_dirs": None, "errors": {}}
    if not out["online"]:
        out["errors"]["configs"] = out["errors"]["log_dirs"] = "the broker is offline"
        return out
    host, port = md.brokers[broker_id]
    configs, dirs = await asyncio.gather(
        asyncio.to_thread(_broker_configs, cluster, broker_id),
        asyncio.to_thread(_broker_log_dirs, host, port, cluster.timeout_s, cluster.security),
        return_exceptions=True)
    for key, val in (("configs", configs), ("log_dirs", dirs)):
        if isinstance(val, BaseException):
            out["errors"][key] = str(val) or type(val).__name__
        else:
            out[key] = val
    return out


# ------------------------------------------------------------------ group offsets: reset, delete

RESET_MODES = ("earliest", "latest", "offset", "timestamp", "shift")


class _ResetBase(BaseModel):
    topic: str = Field(pattern=TOPIC_NAME)
    partitions: list[int] | None = None
    apply: bool = False


class ResetToEnd(_ResetBase):
    to: Literal["earliest", "latest"]
    value: None = None


class ResetToOffset(_ResetBase):
    to: Literal["offset"]
    value: int = Field(ge=0, le=MAX_SAFE_INT)  # clamped to the log


class ResetToTimestamp(_ResetBase):
    to: Literal["timestamp"]
    value: int = Field(ge=0, le=MAX_SAFE_INT)  # ms since the epoch


class ResetShift(_ResetBase):
    to: Literal["shift"]
    value: int = Field(ge=-MAX_SAFE_INT, le=MAX_SAFE_INT)  # negative moves back


# One model per mode, so the OpenAPI document says which modes need which value (a
# request the schema allows is one the server accepts).
ResetBody = Annotated[ResetToEnd | ResetToOffset | ResetToTimestamp | ResetShift,
                      Field(discriminator="to")]


async def _empty_group(cluster: ClusterClient, group: str, doing: str) -> dict[str, Any]:
    """The group, described; refused (409) while it has active members: Kafka takes
    offset changes only for an empty group (a live member would overwrite them)."""
    known = {g["group_id"] for g in await cluster.groups()}
    if group not in known:
        raise RestError(404, 40405, "Consumer group not found.")
    desc = await cluster.describe_group(group)
    if desc["members"]:
        raise RestError(409, 40901, f"cannot {doing} of group {group!r}: it is "
                        f"{desc['state']} with {len(desc['members'])} active member(s); "
                        "stop its consumers first (Kafka requires the group to be empty)")
    return desc


@router.post("/groups/{group}/offsets/reset", responses=_ERRORS)
async def reset_group_offsets(request: Request, group: str, body: ResetBody) -> Any:
    """The group's committed offsets on one topic moved to the earliest or latest offset,
    an offset, a timestamp's offset, or shifted by N (clamped to the log). Without
    `apply`, a preview: current and new offset per partition, nothing committed."""
    cluster = _cluster(request)
    tm = await cluster.topic(body.topic)
    if tm is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    parts = sorted(tm.partitions)
    if body.partitions:
        missing = sorted(set(body.partitions) - set(parts))
        if missing:
            raise RestError(404, E.PARTITION_NOT_FOUND,
                            f"topic {body.topic!r} has no partition {missing[0]}")
        parts = sorted(set(body.partitions))
    desc = await _empty_group(cluster, group, "reset the offsets")
    tps = [(body.topic, p) for p in parts]
    current, marks = await asyncio.gather(cluster.group_offsets(group), cluster.watermarks(tps))

    def clamp(tp: tuple[str, int], off: int) -> int:
        return min(max(off, marks[tp].log_start_offset), marks[tp].high_watermark)

    target: dict[tuple[str, int], int] = {}
    v = body.value or 0
    if body.to == "timestamp":
        found = await asyncio.gather(*(cluster.offset_for_time(t, p, v) for t, p in tps))
        # No record at or after the time: the end of the log, as Kafka's tool does.
        target = {tp: (o if o >= 0 else marks[tp].high_watermark)
                  for tp, o in zip(tps, found, strict=True)}
    for tp in tps:
        if body.to == "earliest":
            target[tp] = marks[tp].log_start_offset
        elif body.to == "latest":
            target[tp] = marks[tp].high_watermark
        elif body.to == "offset":
            target[tp] = clamp(tp, v)
        elif body.to == "shift":
            if tp not in current:  # the group's state, not the request: a conflict
                raise RestError(409, E.ILLEGAL_STATE,
                                f"cannot shift the offset of {group!r} on "
                                f"{tp[0]}-{tp[1]}: it has no committed offset (reset it to "
                                "the earliest, the latest or an offset instead)")
            target[tp] = clamp(tp, current[tp] + v)
    if body.apply:
        await _commit_offsets(cluster, group, target)
    rows = [{"topic": t, "partition": p, "current": current.get((t, p)), "new": target[(t, p)],
             "log_start_offset": marks[(t, p)].log_start_offset,
             "high_watermark": marks[(t, p)].high_watermark} for t, p in tps]
    return {"group": group, "state": desc["state"], "topic": body.topic, "to": body.to,
            "value": body.value, "applied": body.apply, "partitions": rows}


async def _commit_offsets(cluster: ClusterClient, group: str,
                          target: dict[tuple[str, int], int]) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as CTP

    req = ConsumerGroupTopicPartitions(
        group, [CTP(t, p, o) for (t, p), o in sorted(target.items())])
    futs = cluster.admin.alter_consumer_group_offsets([req], request_timeout=cluster.timeout_s)
    res = await cluster._future(futs[group])
    for tp in res.topic_partitions:
        if tp.error is not None:
            raise ClusterError(f"{tp.error.name()}: reset offsets of {group!r} on "
                               f"{tp.topic}-{tp.partition}: {tp.error.str()}",
                               tp.error.code(), tp.error.name())


def _offset_delete(cluster: ClusterClient, group: str, topic: str,
                   parts: list[int]) -> tuple[str | None, list[tuple[int, str | None]]]:
    """OffsetDelete (KIP-496) at the group's coordinator, with Yak's own client (no Python
    Kafka client has it): (the group-level error name, [(partition, error name)])."""
    from kio.schema.offset_delete.v0 import request as req_mod
    from kio.schema.offset_delete.v0.response import OffsetDeleteResponse

    from yak.client.connection import BrokerConnectionError
    from yak.client.transactions import TransactionalClient
    from yak.errors import ErrorCode, KafkaError

    request = req_mod.OffsetDeleteRequest(group_id=group, topics=(
        req_mod.OffsetDeleteRequestTopic(name=topic, partitions=tuple(
            req_mod.OffsetDeleteRequestPartition(partition_index=p) for p in parts)),))
    client = TransactionalClient(cluster.bootstrap, client_id="yak-console",
                                 request_timeout_ms=int(cluster.timeout_s * 1000), retries=1,
                                 security=cluster.security)
    try:
        for _ in range(3):  # the coordinator may move between FindCoordinator and the call
            node = client.find_coordinator(group, key_type=0)
            resp = client._connect(node).send(request, OffsetDeleteResponse)
            if resp.error_code not in (ErrorCode.not_coordinator,
                                       ErrorCode.coordinator_not_available,
                                       ErrorCode.coordinator_load_in_progress):
                break
    except BrokerConnectionError as e:
        raise ClusterError(f"the cluster is unreachable: {e.message}", -195,
                           "_TRANSPORT") from None
    except KafkaError as e:
        name = getattr(e.code, "name", str(e.code)).upper()
        raise ClusterError(f"{name}: {e.message}", int(e.code), name) from None
    finally:
        client.close()
    top = None if resp.error_code is ErrorCode.none else resp.error_code.name.upper()
    return top, sorted((int(p.partition_index),
                        None if p.error_code is ErrorCode.none else p.error_code.name.upper())
                       for t in resp.topics for p in t.partitions)


@router.delete("/groups/{group}/offsets/{topic}", responses=_ERRORS)
async def delete_group_offsets(request: Request, group: str, topic: str) -> Any:
    """Delete the group's committed offsets on a topic (OffsetDelete). The broker refuses
    (GROUP_SUBSCRIBED_TO_TOPIC) while an active member consumes the topic."""
    cluster = _cluster(request)
    tm = await cluster.topic(topic)
    if tm is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    known = {g["group_id"] for g in await cluster.groups()}
    if group not in known:
        raise RestError(404, 40405, "Consumer group not found.")
    top, results = await asyncio.to_thread(_offset_delete, cluster, group, topic,
                                           sorted(tm.partitions))
    failed = [(p, e) for p, e in results if e]
    if top or failed:
        name = top or failed[0][1]
        where = topic if top else f"{topic}-{failed[0][0]}"
        raise RestError(409, 40902, f"{name}: the broker refused to delete the offsets of "
                        f"group {group!r} on {where}")
    return {"group": group, "topic": topic,
            "partitions": [{"partition": p, "error": e} for p, e in results]}


@router.delete("/groups/{group}", status_code=204, response_class=Response, responses=_ERRORS)
async def delete_group(request: Request, group: str) -> Response:
    """Delete an empty group and its committed offsets (DeleteGroups); the broker refuses
    (NON_EMPTY_GROUP) one with active members."""
    cluster = _cluster(request)
    known = {g["group_id"] for g in await cluster.groups()}
    if group not in known:
        raise RestError(404, 40405, "Consumer group not found.")
    futs = cluster.admin.delete_consumer_groups([group], request_timeout=cluster.timeout_s)
    try:
        await cluster._future(futs[group])
    except ClusterError as e:
        raise RestError(409, 40903, f"{e.name or 'ERROR'}: the broker refused to delete "
                        f"group {group!r}: {e.message}") from None
    return Response(status_code=204)
