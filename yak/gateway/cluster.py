"""The gateway's view of a Kafka cluster, reached only over the Kafka protocol.

Admin and produce go through confluent-kafka (librdkafka): its AdminClient covers
metadata, ListOffsets, configs, topics and groups, and its producer batches and retries
for us. Those calls block or complete on librdkafka's threads, so each is bridged onto
the event loop (`run_in_executor` / `asyncio.wrap_future`) and never blocks it.
Consumers are aiokafka, which is asyncio-native: a long poll is a coroutine waiting in
`getmany(timeout_ms=...)`, not a thread blocked in librdkafka's `poll()`.

This is the only place the gateway builds Kafka clients (admin, producer, consumers),
so connection settings (and, with security, credentials) are set once for all of them.

Every call has a bounded timeout: a dead broker must turn into an error the REST API
and the console can show, never a hung request.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
TOPIC_CACHE_S = 2.0


class ClusterError(Exception):
    """A failed cluster call, carrying Kafka's error name/code when there is one."""

    def __init__(self, message: str, code: int = -1, name: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.name = name

    @property
    def unreachable(self) -> bool:
        return self.name in ("_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "TIMEOUT")


def _cluster_error(exc: BaseException) -> ClusterError:
    if isinstance(exc, ClusterError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err: KafkaError = exc.args[0]
        return ClusterError(err.str(), err.code(), err.name())
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return ClusterError("timed out waiting for the cluster", -185, "_TIMED_OUT")
    return ClusterError(str(exc) or type(exc).__name__)


@dataclass
class PartitionMeta:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    error: str | None = None


@dataclass
class TopicMeta:
    name: str
    partitions: dict[int, PartitionMeta] = field(default_factory=dict)
    internal: bool = False
    # Kafka's error name for a topic a named Metadata request answered with an error
    # (e.g. TOPIC_AUTHORIZATION_FAILED); None when the topic was served.
    error: str | None = None


@dataclass
class ClusterMeta:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, tuple[str, int]]
    topics: dict[str, TopicMeta]


# Transaction states with work in flight (the rest are finished or idle ids).
OPEN_TXN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


@dataclass
class Watermarks:
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int


@dataclass
class Produced:
    topic: str
    partition: int
    offset: int
    timestamp: int


class ClusterClient:
    """Admin and producer access to one cluster; clients are created on first use."""

    def __init__(self, bootstrap: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                 client_id: str = "yak-gateway", security: Any = None) -> None:
        self.bootstrap = bootstrap
        self.security = security  # ClientSecurity (TLS, SASL) or None: PLAINTEXT
        self.timeout_s = timeout_s
        self.client_id = client_id
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        self._poller: threading.Thread | None = None
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._topic_cache: dict[str, tuple[float, TopicMeta]] = {}
        self._reports: list[tuple[Delivery, int, KafkaError | None, Any]] = []

    # ------------------------------------------------------------------ plumbing

    def _common(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "client.id": self.client_id,
            "socket.timeout.ms": int(self.timeout_s * 1000),
            "reconnect.backoff.max.ms": 1000,
            # A dead broker is reported by our own bounded timeouts, not by log spam.
            "log_level": 3,
            **(self.security.librdkafka() if self.security is not None else {}),
        }

    @property
    def admin(self) -> AdminClient:
        with self._lock:
            if self._admin is None:
                self._admin = AdminClient(self._common())
            return self._admin

    @property
    def producer(self) -> Producer:
        with self._lock:
            if self._producer is None:
                conf = self._common() | {
                    "linger.ms": 2,
                    "message.timeout.ms": int(self.timeout_s * 1000),
                    # Matches Java's partitioner, so keyed REST records land where Java's would.
                    "partitioner": "murmur2_random",
                    "enable.idempotence": False,
                }
                self._producer = Producer(conf)
                self._poller = threading.Thread(
                    target=self._poll_loop, args=(self._producer,), daemon=True,
                    name="yak-gateway-producer",
                )
                self._poller.start()
            return self._producer

    def _poll_loop(self, producer: Producer) -> None:
        """Delivery reports are collected here, off the event loop, and handed over in
        one `call_soon_threadsafe` per poll: one loop wake-up per batch, not per record."""
        while not self._closing.is_set():
            producer.poll(0.1)
            if self._reports:
                reports, self._reports = self._reports, []
                reports[0][0].loop.call_soon_threadsafe(_settle_all, reports)

    def _report(self, delivery: Delivery, index: int, err: KafkaError | None,
                msg: Any) -> None:
        self._reports.append((delivery, index, err, msg))

    def new_consumer(self, group_id: str | None, client_id: str,
                     **overrides: Any) -> AIOKafkaConsumer:
        """An aiokafka consumer on this cluster, not started (see `start_consumer`)."""
        conf: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "group_id": group_id,
            "client_id": client_id,
            "enable_auto_commit": False,
            "request_timeout_ms": int(self.timeout_s * 1000),
            "fetch_max_wait_ms": 500,
            "metadata_max_age_ms": 5_000,
        } | (self.security.aiokafka() if self.security is not None else {}) | overrides
        return AIOKafkaConsumer(**conf)

    async def start_consumer(self, group_id: str | None, client_id: str,
                             **overrides: Any) -> AIOKafkaConsumer:
        """A started consumer; a cluster that cannot be reached is a ClusterError."""
        consumer = self.new_consumer(group_id, client_id, **overrides)
        try:
            await asyncio.wait_for(consumer.start(), self.timeout_s + 2)
        except Exception as e:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.stop(), 2)
            raise ClusterError(f"cannot start a consumer: {e!r}", -195, "_TRANSPORT") from e
        return consumer

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(
                loop.run_in_executor(None, fn, *args), self.timeout_s + 1
            )
        except Exception as e:
            raise _cluster_error(e) from e

    async def _future(self, fut: Future[T]) -> T:
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), self.timeout_s + 1)
        except Exception as e:
            raise _cluster_error(e) from e

    async def close(self) -> None:
        self._closing.set()
        producer = self._producer
        if producer is not None:
            await asyncio.get_running_loop().run_in_executor(None, producer.flush, 5)
        if self._poller is not None:
            self._poller.join(2)

    # ------------------------------------------------------------------ metadata

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

    # ------------------------------------------------------------------ topics and configs

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Mapping[str, str] | None = None) -> None:
        nt = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                      config=dict(configs or {}))
        futs = self.admin.create_topics([nt], request_timeout=self.timeout_s)
        await self._future(futs[name])

    async def delete_topic(self, name: str) -> None:
        futs = self.admin.delete_topics([name], request_timeout=self.timeout_s)
        self._topic_cache.pop(name, None)
        await self._future(futs[name])

    async def topic_configs(self, name: str) -> list[dict[str, Any]]:
        res = ConfigResource(ResourceType.TOPIC, name)
        futs = self.admin.describe_configs([res], request_timeout=self.timeout_s)
        entries: dict[str, ConfigEntry] = await self._future(futs[res])
        return [
            {
                "name": e.name,
                "value": None if e.is_sensitive else e.value,
                "source": _source_name(e.source),
                "is_default": bool(e.is_default),
                "read_only": bool(e.is_read_only),
                "sensitive": bool(e.is_sensitive),
            }
            for e in sorted(entries.values(), key=lambda e: e.name)
        ]

    async def alter_topic_configs(self, name: str, changes: Mapping[str, str | None]) -> None:
        """Set each given config; None deletes the override (back to the broker default)."""
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            if v is not None
            else ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
            for k, v in changes.items()
        ]
        res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        futs = self.admin.incremental_alter_configs([res], request_timeout=self.timeout_s)
        await self._future(futs[res])

    # ------------------------------------------------------------------ groups

    async def groups(self) -> list[dict[str, Any]]:
        fut = self.admin.list_consumer_groups(request_timeout=self.timeout_s)
        res = await self._future(fut)
        return [
            {"group_id": g.group_id, "state": getattr(g.state, "name", str(g.state)),
             "simple": bool(g.is_simple_consumer_group)}
            for g in sorted(res.valid, key=lambda g: g.group_id)
        ]

    async def describe_group(self, group: str) -> dict[str, Any]:
        futs = self.admin.describe_consumer_groups([group], request_timeout=self.timeout_s)
        d = await self._future(futs[group])
        members = [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "group_instance_id": m.group_instance_id,
                "assignment": sorted(
                    [tp.topic, tp.partition] for tp in (m.assignment.topic_partitions or [])
                ) if m.assignment else [],
            }
            for m in d.members
        ]
        return {
            "group_id": d.group_id,
            "state": getattr(d.state, "name", str(d.state)),
            "protocol": d.partition_assignor,
            "coordinator": d.coordinator.id if d.coordinator is not None else None,
            "members": members,
        }

    async def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        futs = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout_s
        )
        res = await self._future(futs[group])
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in res.topic_partitions
            if tp.offset >= 0
        }

    async def group_lag(self, group: str) -> list[dict[str, Any]]:
        """Committed offset, high watermark and lag per partition the group committed."""
        committed = await self.group_offsets(group)
        marks = await self.watermarks(committed)
        return [
            {
                "topic": t, "partition": p, "committed": off,
                "high_watermark": marks[(t, p)].high_watermark,
                "lag": max(marks[(t, p)].high_watermark - off, 0),
            }
            for (t, p), off in sorted(committed.items())
        ]

    # ------------------------------------------------------------------ produce

    def produce_many(self, topic: str,
                     records: Sequence[tuple[bytes | None, bytes | None, int | None,
                                             Sequence[tuple[str, bytes]] | None, int | None]],
                     ) -> Delivery:
        """Hand (key, value, partition, headers, timestamp_ms) records to the producer now,
        in order; `Delivery.future` settles once every record has its delivery report.

        Synchronous on purpose: records handed over in a given order are appended in that
        order (per partition), whatever the callers await afterwards. One future per call,
        not per record: reports reach the loop once per producer poll, in a batch.
        """
        loop = asyncio.get_running_loop()
        delivery = Delivery(loop, len(records))
        produce = self.producer.produce
        report = self._report
        for i, (key, value, partition, headers, timestamp_ms) in enumerate(records):
            kwargs: dict[str, Any] = {"value": value, "key": key,
                                      "on_delivery": functools.partial(report, delivery, i)}
            if partition is not None:
                kwargs["partition"] = partition
            if headers:
                kwargs["headers"] = list(headers)
            if timestamp_ms is not None:
                kwargs["timestamp"] = timestamp_ms
            try:
                produce(topic, **kwargs)
            except BufferError:
                delivery.fail(i, ClusterError("producer queue is full, retry later", -184,
                                              "_QUEUE_FULL"))
            except KafkaException as e:
                delivery.fail(i, _cluster_error(e))
        return delivery

    async def transactions(self) -> list[dict[str, Any]]:
        """The transactions the coordinators know (ListTransactions), open ones described
        (DescribeTransactions: start time, timeout, partitions). No Python Kafka client has
        these APIs: Yak's blocking client, in a thread, with this cluster's security."""

        def fetch() -> list[dict[str, Any]]:
            from yak.client.transactions import TransactionalClient

            with TransactionalClient(self.bootstrap, client_id=self.client_id,
                                     request_timeout_ms=int(self.timeout_s * 1000), retries=1,
                                     security=self.security) as c:
                out = []
                for t in c.list_transactions():
                    row: dict[str, Any] = {"transactional_id": t.transactional_id,
                                           "producer_id": t.producer_id, "state": t.state}
                    if t.state in OPEN_TXN_STATES:
                        d = c.describe_transaction(t.transactional_id, known=True)
                        row.update(producer_epoch=d.producer_epoch, timeout_ms=d.timeout_ms,
                                   start_time_ms=d.start_time_ms,
                                   partitions=[list(tp) for tp in d.partitions])
                    out.append(row)
                return out

        return await self._blocking(fetch)

    async def topic_access(self, name: str) -> tuple[bool, frozenset[str]]:
        """(exists, the operations this client's principal may do on it) for one topic, by
        DescribeTopics, which never auto-creates. A topic the principal may not describe
        is PERMISSION_DENIED (TOPIC_AUTHORIZATION_FAILED) whether or not it exists, as
        Kafka answers a named Metadata request."""
        from confluent_kafka import TopicCollection

        futs = self.admin.describe_topics(TopicCollection([name]),
                                          include_authorized_operations=True,
                                          request_timeout=self.timeout_s)
        try:
            desc = await self._future(futs[name])
        except ClusterError as e:
            if e.name in ("UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID"):
                return False, frozenset()
            raise
        return True, frozenset(op.name for op in desc.authorized_operations or ())

    async def cluster_operations(self) -> frozenset[str]:
        """What this client's principal may do on the cluster resource, as the cluster
        itself decides (DescribeCluster with include_cluster_authorized_operations): the
        gateway asks rather than evaluating ACLs itself."""
        fut = self.admin.describe_cluster(include_authorized_operations=True,
                                          request_timeout=self.timeout_s)
        desc = await self._future(fut)
        return frozenset(op.name for op in desc.authorized_operations or ())

    async def broker_configs(self, names: Iterable[str]) -> dict[str, str | None]:
        """The values of some of a broker's settings (DescribeConfigs on a BROKER
        resource: DESCRIBE_CONFIGS on the cluster); a sensitive or unknown one is None."""
        md = await self.metadata()
        if not md.brokers:
            raise ClusterError("no broker in the cluster's metadata", -195, "_TRANSPORT")
        res = ConfigResource(ResourceType.BROKER, str(min(md.brokers)))
        futs = self.admin.describe_configs([res], request_timeout=self.timeout_s)
        entries: dict[str, ConfigEntry] = await self._future(futs[res])
        return {n: (entries[n].value if n in entries else None) for n in names}

    # ------------------------------------------------------------------ ACLs and users

    async def describe_acls(self) -> list[Any]:
        """Every ACL binding this principal may see (DescribeAcls: DESCRIBE on the
        cluster), as confluent-kafka `AclBinding`s."""
        from confluent_kafka.admin import (
            AclBindingFilter,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
        )

        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
        fut = self.admin.describe_acls(flt, request_timeout=self.timeout_s)
        return list(await self._future(fut))

    async def create_acls(self, bindings: Sequence[Any]) -> None:
        futs = self.admin.create_acls(list(bindings), request_timeout=self.timeout_s)
        for fut in futs.values():
            await self._future(fut)

    async def delete_acls(self, filters: Sequence[Any]) -> list[Any]:
        """Delete what each filter matches; returns the deleted bindings."""
        futs = self.admin.delete_acls(list(filters), request_timeout=self.timeout_s)
        out: list[Any] = []
        for fut in futs.values():
            out.extend(await self._future(fut))
        return out

    async def scram_users(self) -> dict[str, list[tuple[str, int]]]:
        """User name -> [(mechanism, iterations)] (DescribeUserScramCredentials; no
        secret ever leaves the broker).

        librdkafka 2.16 crashes the whole process when this API is refused (any top-level
        error, Kafka's own answer included: it frees a string it does not own), and here
        that process is the gateway or the broker embedding it. So the cluster is asked
        first whether this principal may DESCRIBE the cluster, and a refusal is raised
        here as Kafka's CLUSTER_AUTHORIZATION_FAILED."""
        if "DESCRIBE" not in await self.cluster_operations():
            raise ClusterError("not authorized to describe users (DESCRIBE on the cluster)",
                               31, "CLUSTER_AUTHORIZATION_FAILED")
        fut = self.admin.describe_user_scram_credentials(request_timeout=self.timeout_s)
        got = await self._future(fut)  # type: ignore[arg-type]
        return {
            user: [(info.mechanism.name.replace("_", "-"), int(info.iterations))
                   for info in desc.scram_credential_infos]
            for user, desc in sorted(got.items())
        }

    async def alter_scram_users(self, alterations: Sequence[Any]) -> None:
        futs = self.admin.alter_user_scram_credentials(list(alterations),
                                                       request_timeout=self.timeout_s)
        for fut in futs.values():
            await self._future(fut)

    async def ping(self) -> float:
        """Round-trip time of a metadata request, in seconds (raises if unreachable)."""
        t0 = time.perf_counter()
        await self._blocking(self.admin.list_topics, None, min(self.timeout_s, 3.0))
        return time.perf_counter() - t0


class Delivery:
    """The delivery reports of records handed to the producer together."""

    __slots__ = ("future", "loop", "pending", "results")

    def __init__(self, loop: asyncio.AbstractEventLoop, n: int) -> None:
        self.loop = loop
        self.future: asyncio.Future[list[Produced | ClusterError]] = loop.create_future()
        self.results: list[Produced | ClusterError | None] = [None] * n
        self.pending = n
        if not n:
            self.future.set_result([])

    def fail(self, index: int, error: ClusterError) -> None:
        self._settle(index, error)

    def _settle(self, index: int, result: Produced | ClusterError) -> None:
        if self.results[index] is not None:
            return
        self.results[index] = result
        self.pending -= 1
        if not self.pending and not self.future.done():
            self.future.set_result(self.results)  # type: ignore[arg-type]


def _settle_all(reports: list[tuple[Delivery, int, KafkaError | None, Any]]) -> None:
    """On the loop: one call per producer poll that had reports."""
    for delivery, index, err, msg in reports:
        if err is not None:
            delivery._settle(index, ClusterError(err.str(), err.code(), err.name()))
        else:
            delivery._settle(index, Produced(msg.topic(), msg.partition(), msg.offset(),
                                             msg.timestamp()[1]))


def _source_name(source: Any) -> str:
    from confluent_kafka.admin import ConfigSource

    try:
        return ConfigSource(int(source)).name
    except (ValueError, TypeError):
        return getattr(source, "name", str(source))


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
