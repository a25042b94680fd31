"""A small synchronous Kafka client: metadata, list offsets, fetch raw batches, produce.

It returns record batches as raw bytes, never as per-record Python objects: the Spark
connector turns those bytes into Arrow columns itself (`yak.spark.arrow_codec`). Every
request goes through `_call`, which owns the bounded-retry policy so that "broker
unreachable" always ends in one clear error after `retries` attempts instead of hanging.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import import_module
from typing import Any

from kio.static.primitive import i8, i16, i32, i64

from yak.client.connection import BrokerConnectionError, Connection, build
from yak.errors import ErrorCode, KafkaError, UnknownTopicOrPartitionError, error_for_code
from yak.security.client import ClientSecurity

EARLIEST = -2
LATEST = -1

# Preferred API versions, newest first; the highest one the broker also supports is used.
_VERSIONS: dict[str, tuple[int, list[int]]] = {
    "metadata": (3, [12, 9, 5, 1]),
    "list_offsets": (2, [7, 5, 4, 1]),
    "fetch": (1, [12, 11, 4]),
    "produce": (0, [9, 8, 7, 3]),
    "init_producer_id": (22, [4, 1, 0]),
    "create_topics": (19, [5, 4, 2]),
    "describe_client_quotas": (48, [1, 0]),
    "alter_client_quotas": (49, [1, 0]),
    # transactions (yak.client.transactions): the classic protocol's versions
    "find_coordinator": (10, [3, 2, 1]),
    "add_partitions_to_txn": (24, [3, 2, 1, 0]),
    "add_offsets_to_txn": (25, [3, 2, 1, 0]),
    "end_txn": (26, [3, 2, 1, 0]),
    "write_txn_markers": (27, [1]),
    "txn_offset_commit": (28, [3, 2, 1, 0]),
    "offset_fetch": (9, [7]),  # require_stable (KIP-447) needs v7
    "describe_producers": (61, [0]),
    "describe_transactions": (65, [0]),
    "list_transactions": (66, [2, 1, 0]),
}


def _schema(api: str, version: int, kind: str) -> Any:
    mod = import_module(f"kio.schema.{api}.v{version}.{kind}")
    suffix = "Request" if kind == "request" else "Response"
    name = "".join(p.capitalize() for p in api.split("_")) + suffix
    return getattr(mod, name)


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int


@dataclass
class FetchedPartition:
    """One partition's slice of a Fetch response: raw batches plus the watermarks."""

    error: int
    high_watermark: int
    log_start_offset: int
    records: bytes
    aborted: list[tuple[int, int]] = field(default_factory=list)  # (producer id, first offset)


class YakClientError(KafkaError):
    """A client-side failure with a message that names what to fix."""


class KafkaClient:
    """Connections to the brokers of one cluster, keyed by node id, opened lazily."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "yak-spark",
        request_timeout_ms: int = 30_000,
        retries: int = 5,
        retry_backoff_ms: int = 200,
        security: ClientSecurity | None = None,
        isolation_level: int = 0,
    ) -> None:
        self.bootstrap = [_parse_hostport(s) for s in bootstrap_servers.split(",") if s.strip()]
        if not self.bootstrap:
            raise YakClientError("kafka.bootstrap.servers is empty")
        self.client_id = client_id
        self.security = security  # TLS / SASL for every connection (None: PLAINTEXT)
        # ListOffsets' isolation, as a Kafka consumer's: 1 (read_committed) makes "latest"
        # the last stable offset, so nothing is planned past an open transaction.
        self.isolation_level = isolation_level
        self.timeout_s = request_timeout_ms / 1000.0
        self.retries = retries
        self.backoff_s = retry_backoff_ms / 1000.0
        self._conns: dict[int | str, Connection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._versions: dict[str, int] = {}

    # -- plumbing -------------------------------------------------------------------------

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connect(self, node: int | str) -> Connection:
        conn = self._conns.get(node)
        if conn is not None:
            return conn
        if node == "bootstrap":
            errors = []
            for host, port in self.bootstrap:
                try:
                    conn = Connection(
                        host, port, client_id=self.client_id, timeout_s=self.timeout_s,
                        security=self.security,
                    )
                    break
                except BrokerConnectionError as exc:
                    errors.append(str(exc))
            if conn is None:
                raise BrokerConnectionError("; ".join(errors))
        else:
            host, port = self._brokers[node]  # type: ignore[index]
            conn = Connection(host, port, client_id=self.client_id, timeout_s=self.timeout_s,
                              security=self.security)
        self._negotiate(conn)
        self._conns[node] = conn
        return conn

    def _negotiate(self, conn: Connection) -> None:
        if self._versions:
            return
        req_cls = _schema("api_versions", 3, "request")
        resp = conn.send(
            build(req_cls, client_software_name="yak-spark", client_software_version="0.1"),
            _schema("api_versions", 3, "response"),
        )
        ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        for api, (key, prefs) in _VERSIONS.items():
            lo, hi = ranges.get(key, (0, -1))
            for v in prefs:
                if lo <= v <= hi:
                    self._versions[api] = v
                    break

    def _ensure(self, node: int | str) -> None:
        """Connect (and negotiate versions) under the same bounded retry policy as requests."""
        self._retrying(node, lambda: self._connect(node))

    def _retrying(self, node: int | str, fn: Any) -> Any:
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except BrokerConnectionError as exc:
                last = exc
                dead = self._conns.pop(node, None)
                if dead is not None:
                    dead.close()
                if attempt < self.retries:
                    time.sleep(self.backoff_s * (2**attempt))
        where = ",".join(f"{h}:{p}" for h, p in self.bootstrap)
        raise BrokerConnectionError(
            f"broker unreachable after {self.retries + 1} attempts "
            f"(kafka.bootstrap.servers={where}): {last}"
        )

    def _call(self, node: int | str, api: str, **fields: Any) -> Any:
        """Send one request with bounded retries on connection failures."""

        def once() -> Any:
            conn = self._connect(node)
            version = self._versions.get(api)
            if version is None:
                raise YakClientError(f"broker does not support a usable {api} version")
            req = build(_schema(api, version, "request"), **fields)
            return conn.send(req, _schema(api, version, "response"))

        return self._retrying(node, once)

    def _any_node(self) -> int | str:
        return next(iter(self._brokers), "bootstrap") if self._brokers else "bootstrap"

    # -- metadata ---------------------------------------------------------------------------

    def metadata(
        self, topics: Iterable[str] | None = None, auto_create: bool = False
    ) -> dict[str, list[PartitionInfo]]:
        """Topic -> partitions (with leaders); `None` means every topic in the cluster."""
        topic_list = None
        node = self._any_node()
        self._ensure(node)
        version = self._versions["metadata"]
        topic_cls = import_module(f"kio.schema.metadata.v{version}.request").MetadataRequestTopic
        if topics is not None:
            topic_list = tuple(build(topic_cls, topic_id=None, name=t) for t in topics)
        resp = self._call(
            node,
            "metadata",
            topics=topic_list,
            allow_auto_topic_creation=auto_create,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        for b in resp.brokers:
            self._brokers[int(b.node_id)] = (b.host, int(b.port))
        out: dict[str, list[PartitionInfo]] = {}
        for t in resp.topics:
            if t.error_code != ErrorCode.none:
                if t.error_code == ErrorCode.unknown_topic_or_partition:
                    continue
                if t.error_code == ErrorCode.leader_not_available:
                    continue
                raise error_for_code(int(t.error_code), f"metadata for topic {t.name!r}")
            parts = sorted(
                (
                    PartitionInfo(t.name, int(p.partition_index), int(p.leader_id))
                    for p in t.partitions
                ),
                key=lambda p: p.partition,
            )
            out[t.name] = parts
            for p in parts:
                self._leaders[(t.name, p.partition)] = p.leader
        return out

    def partitions_for(self, topic: str, auto_create: bool = False) -> list[PartitionInfo]:
        """Partitions of `topic`; with `auto_create` the broker may create it (as producers do)."""
        for attempt in range(10 if auto_create else 1):
            md = self.metadata([topic], auto_create=auto_create)
            if topic in md and md[topic]:
                return md[topic]
            if attempt < 9 and auto_create:
                time.sleep(0.05 * (attempt + 1))
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")

    def _leader(self, topic: str, partition: int) -> int | str:
        leader = self._leaders.get((topic, partition))
        if leader is None:
            self.metadata([topic])
            leader = self._leaders.get((topic, partition))
        if leader is None or leader < 0 or leader not in self._brokers:
            raise UnknownTopicOrPartitionError(f"no leader for {topic}-{partition}")
        return leader

    def _group_by_leader(
        self, tps: Iterable[tuple[str, int]]
    ) -> dict[int | str, list[tuple[str, int]]]:
        groups: dict[int | str, list[tuple[str, int]]] = {}
        for tp in tps:
            groups.setdefault(self._leader(*tp), []).append(tp)
        return groups

    # -- offsets ------------------------------------------------------------------------

    def list_offsets(self, requests: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """(topic, partition) -> timestamp (or EARLIEST/LATEST) => offset (-1 if none)."""
        out: dict[tuple[str, int], int] = {}
        for node, tps in self._group_by_leader(requests).items():
            version = self._versions["list_offsets"]
            mod = import_module(f"kio.schema.list_offsets.v{version}.request")
            by_topic: dict[str, list[Any]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(
                    build(
                        mod.ListOffsetsPartition,
                        partition_index=i32(p),
                        current_leader_epoch=i32(-1),
                        timestamp=i64(requests[(t, p)]),
                        max_num_offsets=i32(1),
                    )
                )
            topics = tuple(
                build(mod.ListOffsetsTopic, name=t, partitions=tuple(ps))
                for t, ps in by_topic.items()
            )
            resp = self._call(
                node, "list_offsets", replica_id=i32(-1),
                isolation_level=i8(self.isolation_level), topics=topics
            )
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.none:
                        raise error_for_code(
                            int(p.error_code), f"list offsets {t.name}-{p.partition_index}"
                        )
                    off = int(p.offset) if hasattr(p, "offset") else int(p.old_style_offsets[0])
                    out[(t.name, int(p.partition_index))] = off
        return out

    # -- fetch --------------------------------------------------------------------------

    def fetch(
        self,
        offsets: Mapping[tuple[str, int], int],
        *,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_bytes: int = 64 << 20,
        partition_max_bytes: int = 8 << 20,
        isolation_level: int = 0,
    ) -> dict[tuple[str, int], FetchedPartition]:
        out: dict[tuple[str, int], FetchedPartition] = {}
        for node, tps in self._group_by_leader(offsets).items():
            version = self._versions["fetch"]
            mod = import_module(f"kio.schema.fetch.v{version}.request")
            by_topic: dict[str, list[Any]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(
                    build(
                        mod.FetchPartition,
                        partition=i32(p),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(offsets[(t, p)]),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(partition_max_bytes),
                    )
                )
            topics = tuple(
                build(mod.FetchTopic, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()
            )
            resp = self._call(
                node,
                "fetch",
                replica_id=i32(-1),
                max_wait=timedelta(milliseconds=max_wait_ms),
                min_bytes=i32(min_bytes),
                max_bytes=i32(max_bytes),
                isolation_level=i8(isolation_level),
                session_id=i32(0),
                session_epoch=i32(-1),
                topics=topics,
                forgotten_topics_data=(),
                rack_id="",
            )
            if resp.error_code != ErrorCode.none:
                raise error_for_code(int(resp.error_code), "fetch")
            for t in resp.responses:
                for p in t.partitions:
                    out[(t.topic, int(p.partition_index))] = FetchedPartition(
                        error=int(p.error_code),
                        high_watermark=int(p.high_watermark),
                        log_start_offset=int(p.log_start_offset),
                        records=p.records or b"",
                        aborted=[
                            (int(a.producer_id), int(a.first_offset))
                            for a in (getattr(p, "aborted_transactions", None) or ())
                        ],
                    )
        return out

    # -- produce ------------------------------------------------------------------------

    def init_producer_id(self) -> tuple[int, int]:
        """An idempotent producer id and epoch (no transactional id)."""
        node = self._any_node()
        self._ensure(node)
        if "init_producer_id" not in self._versions:
            raise YakClientError("broker does not support InitProducerId")
        resp = self._call(
            node,
            "init_producer_id",
            transactional_id=None,
            transaction_timeout=timedelta(milliseconds=60_000),
            producer_id=i64(-1),
            producer_epoch=i16(-1),
        )
        if resp.error_code != ErrorCode.none:
            raise error_for_code(int(resp.error_code), "init producer id")
        return int(resp.producer_id), int(resp.producer_epoch)

    def produce(
        self,
        batches: Mapping[tuple[str, int], bytes],
        *,
        acks: int = -1,
        timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> dict[tuple[str, int], int]:
        """Send one encoded record set per partition; returns each partition's base offset.
        `transactional_id`: the batches belong to that producer's ongoing transaction.

        Retriable errors (leader moved, duplicate sequence after a lost response) are
        handled here; a duplicate-sequence answer means the batch is already in the log,
        which is exactly what an idempotent retry wants.
        """
        pending = dict(batches)
        out: dict[tuple[str, int], int] = {}
        for attempt in range(self.retries + 1):
            failed: dict[tuple[str, int], KafkaError] = {}
            for node, tps in self._group_by_leader(pending).items():
                version = self._versions["produce"]
                mod = import_module(f"kio.schema.produce.v{version}.request")
                by_topic: dict[str, list[Any]] = {}
                for t, p in tps:
                    by_topic.setdefault(t, []).append(
                        build(mod.PartitionProduceData, index=i32(p), records=pending[(t, p)])
                    )
                topic_data = tuple(
                    build(mod.TopicProduceData, name=t, partition_data=tuple(ps))
                    for t, ps in by_topic.items()
                )
                resp = self._call(
                    node,
                    "produce",
                    transactional_id=transactional_id,
                    acks=i16(acks),
                    timeout=timedelta(milliseconds=timeout_ms),
                    topic_data=topic_data,
                )
                if acks == 0:
                    for tp in tps:
                        out[tp] = -1
                    continue
                for t in resp.responses:
                    for p in t.partition_responses:
                        tp = (t.name, int(p.index))
                        code = int(p.error_code)
                        if code in (0, int(ErrorCode.duplicate_sequence_number)):
                            out[tp] = int(p.base_offset)
                        else:
                            failed[tp] = error_for_code(code, f"produce to {tp[0]}-{tp[1]}")
            if not failed:
                return out
            fatal = [e for e in failed.values() if not e.retriable]
            if fatal or attempt == self.retries:
                raise (fatal or list(failed.values()))[0]
            pending = {tp: pending[tp] for tp in failed}
            self._leaders.clear()
            time.sleep(self.backoff_s * (2**attempt))
        return out

    # -- admin (only what the sink needs for its state topic) -------------------------------

    def create_topic(
        self, topic: str, partitions: int = 1, configs: Mapping[str, str] | None = None
    ) -> None:
        node = self._any_node()
        self._ensure(node)
        if "create_topics" not in self._versions:
            raise YakClientError("broker does not support CreateTopics")
        version = self._versions["create_topics"]
        mod = import_module(f"kio.schema.create_topics.v{version}.request")
        cfgs = tuple(
            build(mod.CreatableTopicConfig, name=k, value=v) for k, v in (configs or {}).items()
        )
        topic_req = build(
            mod.CreatableTopic,
            name=topic,
            num_partitions=i32(partitions),
            replication_factor=i16(-1),
            assignments=(),
            configs=cfgs,
        )
        resp = self._call(
            node,
            "create_topics",
            topics=(topic_req,),
            timeout=timedelta(seconds=30),
            validate_only=False,
        )
        for t in resp.topics:
            if t.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                raise error_for_code(
                    int(t.error_code), f"create topic {topic!r}: {t.error_message}"
                )

    # -- client quotas (DescribeClientQuotas / AlterClientQuotas: no Python Kafka client
    # offers them, and `yak quota` needs them) ------------------------------------------

    def describe_client_quotas(
        self, components: list[tuple[str, int, str | None]], strict: bool = False
    ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """[(entity {type: name or None for the default}, {key: value})]; components are
        (entity type, match type 0 exact / 1 default / 2 any, name)."""
        node = self._any_node()
        self._ensure(node)
        version = self._versions.get("describe_client_quotas")
        if version is None:
            raise YakClientError("the broker does not support DescribeClientQuotas")
        mod = import_module(f"kio.schema.describe_client_quotas.v{version}.request")
        resp = self._call(node, "describe_client_quotas", strict=strict, components=tuple(
            build(mod.ComponentData, entity_type=t, match_type=i8(m), match=n)
            for t, m, n in components))
        if resp.error_code != ErrorCode.none:
            raise error_for_code(int(resp.error_code), resp.error_message or "")
        return [({e.entity_type: e.entity_name for e in entry.entity},
                 {v.key: float(v.value) for v in entry.values})
                for entry in resp.entries or ()]


    def alter_client_quotas(
        self,
        entries: list[tuple[dict[str, str | None], dict[str, float | None]]],
        validate_only: bool = False,
    ) -> list[tuple[dict[str, str | None], int, str | None]]:
        """Set (value) or remove (None) quota keys per entity; [(entity, error code, message)]."""
        node = self._any_node()
        self._ensure(node)
        version = self._versions.get("alter_client_quotas")
        if version is None:
            raise YakClientError("the broker does not support AlterClientQuotas")
        mod = import_module(f"kio.schema.alter_client_quotas.v{version}.request")
        resp = self._call(node, "alter_client_quotas", validate_only=validate_only, entries=tuple(
            build(mod.EntryData,
                  entity=tuple(build(mod.EntityData, entity_type=t, entity_name=n)
                               for t, n in entity.items()),
                  ops=tuple(build(mod.OpData, key=k, value=float(v or 0.0), remove=v is None)
                            for k, v in ops.items()))
            for entity, ops in entries))
        return [({e.entity_type: e.entity_name for e in r.entity}, int(r.error_code),
                 r.error_message) for r in resp.entries]

def _parse_hostport(s: str) -> tuple[str, int]:
    s = s.strip()
    if "://" in s:
        s = s.split("://", 1)[1]
    host, _, port = s.rpartition(":")
    if not host or not port.isdigit():
        raise YakClientError(f"kafka.bootstrap.servers: {s!r} is not host:port")
    return host.strip("[]"), int(port)
