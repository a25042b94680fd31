"""A share-group member over the wire (KIP-932), for the gateway's queue sessions.

Why Yak's own client and not confluent-kafka 2.16's `ShareConsumer`: the gateway hands
each record to a remote caller under its acquisition lock and takes accept / release /
reject back by id, later, in any order, from another HTTP request. librdkafka's share
consumer refuses a `poll()` until every record of the previous one is acknowledged,
keeps acknowledgements local until the next poll or commit (so the caller cannot be
told which ones the broker refused), does not expose the lock's duration, and blocks a
thread in `poll()` per session. Speaking ShareGroupHeartbeat (76), ShareFetch (78) and
ShareAcknowledge (79) with kio through `yak.wire` gives every record's delivery count and
lock deadline (from ShareFetch's `AcquisitionLockTimeoutMs`), acknowledgements sent when
the caller gives them with the broker's answer per partition, and a long poll that is a
coroutine, not a thread (like aiokafka for the consumer sessions).

One `ShareMember` is one member of one share group: a heartbeat task to the group
coordinator keeps it in the group and learns its assignment; one share session per
partition leader (Kafka's epoch rules: 0 opens, each request advances it by one, -1
closes and releases what the session holds). Requests on one leader's session are
serialised by a lock, so a fetch and an acknowledgement never race for an epoch; a long
poll therefore fetches in rounds of at most `FETCH_ROUND_MS` so acknowledgements wait at
most that long. Offsets acquired without a record (control batches, compacted gaps)
are acknowledged as GAP on that session's next fetch, as Kafka's clients do.

A leader session that fails (timeout, lost connection, a stale epoch) is reopened at
epoch 0: the broker releases what the old one held, so the gateway forgets those
records (their ids answer INVALID_RECORD_STATE) rather than acknowledge into a session
that no longer owns them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from yak.errors import ErrorCode
from yak.gateway.cluster.model import ClusterError
from yak.protocol import kio_compat
from yak.protocol.records import decode_records, iter_batches
from yak.security.connect import connection
from yak.wire import BrokerConnectionError, KafkaConnection

log = logging.getLogger(__name__)

GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
RECORD_LIMIT = 1  # ShareFetch v2 share_acquire_mode: exactly max_records (KIP-1206)
ACK_TYPES = {"accept": ACCEPT, "release": RELEASE, "reject": REJECT}
FETCH_ROUND_MS = 250
MAX_FETCH_BYTES = 8 * 1024 * 1024
_INT32_MAX = 2**31 - 1
_REJOIN = frozenset({ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch})
_COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                                ErrorCode.coordinator_load_in_progress})
_SESSION_LOST = frozenset({ErrorCode.share_session_not_found,
                           ErrorCode.invalid_share_session_epoch,
                           ErrorCode.unknown_member_id})
_STALE_METADATA = frozenset({ErrorCode.not_leader_or_follower,
                             ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id,
                             ErrorCode.fenced_leader_epoch})


def _mod(api: str, version: int) -> Any:
    return kio_compat.schema_module(api, version, "request")


def kafka_error(what: str, code: ErrorCode, message: str | None = None) -> ClusterError:
    """A Kafka error code as the gateway's cluster calls report it (name and code kept)."""
    return ClusterError(what + (f" ({message})" if message else ""), int(code),
                        code.name.upper())


@dataclass(slots=True)
class ShareRecord:
    """One acquired record: where it is, how often it was delivered, until when the lock
    holds (wall-clock ms; the broker may release it any time after)."""

    topic: str
    partition: int
    offset: int
    delivery_count: int
    lock_deadline_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int
    leader: int  # the node whose share session acquired it (acknowledgements go there)
    session_generation: int  # that session's generation when it was acquired

    @property
    def id(self) -> str:
        """`topic:partition:offset:delivery_count` (topic names never hold ':'): one
        delivery of one record, so an id from before a redelivery is not this one."""
        return f"{self.topic}:{self.partition}:{self.offset}:{self.delivery_count}"


@dataclass
class _LeaderSession:
    """The share session on one partition leader."""

    node: int
    epoch: int = 0  # 0: none open (the next fetch opens one)
    generation: int = 0  # bumped each time the session is lost: its records are gone
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)
    gaps: dict[tuple[uuid.UUID, int], list[int]] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def advance(self) -> None:
        self.epoch = 1 if self.epoch >= _INT32_MAX else self.epoch + 1

    def lost(self) -> None:
        self.epoch = 0
        self.generation += 1
        self.partitions.clear()
        self.gaps.clear()


class ShareMember:
    """One member of share group `group`, subscribed to `topics`."""

    def __init__(self, bootstrap: str, security: Any, timeout_s: float, group: str,
                 topics: list[str], client_id: str) -> None:
        self.group = group
        self.topics = list(topics)
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self.member_id = uuid.uuid4().hex
        self.epoch = 0
        self.heartbeat_ms = 5000
        self._bootstrap = [(h, int(p)) for h, _, p in
                           (a.strip().rpartition(":") for a in bootstrap.split(","))]
        self._conns: dict[tuple[str, int], KafkaConnection] = {}
        self._nodes: dict[int, tuple[str, int]] = {}
        self._coordinator: tuple[str, int] | None = None
        self._names: dict[uuid.UUID, str] = {}
        self._ids: dict[str, uuid.UUID] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._stale = True
        self.assignment: set[tuple[uuid.UUID, int]] = set()
        self._assigned = asyncio.Event()
        self._sessions: dict[int, _LeaderSession] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._fatal: ClusterError | None = None
        self._closed = False

    # ------------------------------------------------------------------ connections

    def _conn(self, addr: tuple[str, int]) -> KafkaConnection:
        c = self._conns.get(addr)
        if c is None:
            c = connection(addr[0], addr[1], self.security, self.timeout_s, self.client_id)
            self._conns[addr] = c
        return c

    async def _any(self, request: Any) -> Any:
        """`request` to a known broker (bootstrap first), the first that answers."""
        last: Exception | None = None
        for addr in [*self._bootstrap, *self._nodes.values()]:
            try:
                return await self._conn(addr).request(request, self.timeout_s)
            except (BrokerConnectionError, OSError) as e:
                last = e
        raise ClusterError(f"no broker answered: {last!r}", -195, "_TRANSPORT")

    async def _refresh_metadata(self) -> None:
        m = _mod("metadata", 12)
        resp = await self._any(m.MetadataRequest(
            topics=tuple(m.MetadataRequestTopic(topic_id=None, name=t) for t in self.topics),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        self._nodes = {b.node_id: (b.host, b.port) for b in resp.brokers}
        for t in resp.topics:
            if t.error_code is ErrorCode.topic_authorization_failed:
                raise kafka_error(f"reading topic {t.name}", t.error_code)
            if t.error_code is not ErrorCode.none or t.topic_id is None:
                continue
            self._names[t.topic_id] = t.name
            self._ids[t.name] = t.topic_id
            for p in t.partitions:
                self._leaders[(t.name, p.partition_index)] = p.leader_id
        self._stale = False

    async def _find_coordinator(self) -> tuple[str, int]:
        m = _mod("find_coordinator", 4)
        resp = await self._any(m.FindCoordinatorRequest(key_type=0,
                                                        coordinator_keys=(self.group,)))
        (c,) = resp.coordinators
        if c.error_code is not ErrorCode.none:
            raise kafka_error(f"finding the coordinator of share group {self.group}",
                              c.error_code, c.error_message)
        self._nodes[c.node_id] = (c.host, c.port)
        return c.host, c.port

    # ------------------------------------------------------------------ membership

    async def start(self) -> None:
        """Join the group (the first heartbeat); then heartbeat in the background."""
        await self._refresh_metadata()
        missing = [t for t in self.topics if t not in self._ids]
        if missing:
            raise ClusterError(f"unknown topic(s): {', '.join(missing)}",
                               int(ErrorCode.unknown_topic_or_partition), "UNKNOWN_TOPIC_OR_PART")
        await self._beat()
        self._heartbeat = asyncio.get_running_loop().create_task(self._heartbeats())

    async def _beat(self, leaving: bool = False) -> None:
        m = _mod("share_group_heartbeat", 1)
        if self._coordinator is None:
            self._coordinator = await self._find_coordinator()
        req = m.ShareGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id,
            member_epoch=-1 if leaving else self.epoch, rack_id=None,
            subscribed_topic_names=None if leaving else tuple(self.topics))
        try:
            resp = await self._conn(self._coordinator).request(req, self.timeout_s)
        except (BrokerConnectionError, OSError):
            self._coordinator = None
            raise
        code = resp.error_code
        if code in _COORDINATOR_MOVED:
            self._coordinator = None
            return
        if code in _REJOIN:
            self.epoch = 0  # rejoin with the same member id, as Kafka's clients do
            return
        if code is not ErrorCode.none:
            self._fatal = kafka_error(f"share group {self.group} heartbeat", code,
                                      resp.error_message)
            self._assigned.set()
            raise self._fatal
        if leaving:
            return
        self.epoch = resp.member_epoch
        self.heartbeat_ms = max(int(resp.heartbeat_interval.total_seconds() * 1000), 100)
        if resp.assignment is not None:
            new = {(tp.topic_id, p) for tp in resp.assignment.topic_partitions
                   for p in tp.partitions}
            if any(tid not in self._names for tid, _ in new):
                self._stale = True
            self.assignment = new
            if new:
                self._assigned.set()
            else:
                self._assigned.clear()

    async def _heartbeats(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.heartbeat_ms / 1000)
            try:
                await self._beat()
            except ClusterError:
                if self._fatal is not None:
                    return
            except (BrokerConnectionError, OSError) as e:
                log.info("share group %s heartbeat failed: %r", self.group, e)

    # ------------------------------------------------------------------ fetching

    def _session(self, node: int) -> _LeaderSession:
        s = self._sessions.get(node)
        if s is None:
            s = self._sessions[node] = _LeaderSession(node)
        return s

    async def poll(self, max_records: int, timeout_ms: int) -> list[ShareRecord]:
        """Acquire records: returns as soon as some arrive, or [] after `timeout_ms`."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self._fatal is not None:
                raise self._fatal
            left = deadline - time.monotonic()
            if not self.assignment:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(left, 0)):  # not wait_for: 3.11's drops a cancel
                        await self._assigned.wait()
                if not self.assignment:
                    return []
            if self._stale:
                await self._refresh_metadata()
            by_leader: dict[int, list[tuple[uuid.UUID, int]]] = {}
            for tid, p in sorted(self.assignment, key=lambda k: (str(k[0]), k[1])):
                name = self._names.get(tid)
                leader = self._leaders.get((name, p), -1) if name else -1
                if leader < 0:
                    self._stale = True
                    continue
                by_leader.setdefault(leader, []).append((tid, p))
            wait_ms = max(min(int(left * 1000), FETCH_ROUND_MS), 0)
            rounds = await asyncio.gather(*(
                self._fetch(node, parts, max_records, wait_ms)
                for node, parts in by_leader.items()))
            got = [r for rs in rounds for r in rs]
            if got or time.monotonic() >= deadline:
                return got
            if not by_leader:
                await asyncio.sleep(min(FETCH_ROUND_MS / 1000, max(left, 0)))

    async def _fetch(self, node: int, parts: list[tuple[uuid.UUID, int]], max_records: int,
                     wait_ms: int) -> list[ShareRecord]:
        # v2 with share_acquire_mode 1 (record_limit, KIP-1206): the gateway hands a
        # WebSocket/gRPC client at most max_in_flight records, so it asks for exactly
        # max_records; v1's batch-optimized mode takes the last batch to its end.
        m = _mod("share_fetch", 2)
        s = self._session(node)
        async with s.lock:
            forgotten: dict[uuid.UUID, list[int]] = {}
            for tid, p in s.partitions - set(parts):
                forgotten.setdefault(tid, []).append(p)
            wanted: dict[uuid.UUID, list[Any]] = {}
            for tid, p in parts:
                gaps = s.gaps.get((tid, p), []) if s.epoch else []
                wanted.setdefault(tid, []).append(m.FetchPartition(
                    partition_index=p, acknowledgement_batches=tuple(
                        m.AcknowledgementBatch(first_offset=f, last_offset=last,
                                               acknowledge_types=(GAP,))
                        for f, last in _runs(gaps))))
            req = m.ShareFetchRequest(
                group_id=self.group, member_id=self.member_id, share_session_epoch=s.epoch,
                max_wait=datetime.timedelta(milliseconds=wait_ms if s.epoch else 0),
                min_bytes=1, max_bytes=MAX_FETCH_BYTES, max_records=max_records,
                batch_size=max_records, share_acquire_mode=RECORD_LIMIT, is_renew_ack=False,
                topics=tuple(m.FetchTopic(topic_id=t, partitions=tuple(ps))
                             for t, ps in wanted.items()),
                forgotten_topics_data=tuple(m.ForgottenTopic(topic_id=t, partitions=tuple(ps))
                                            for t, ps in forgotten.items()) if s.epoch else ())
            sent_ms = int(time.time() * 1000)
            try:
                resp = await self._conn(self._nodes[node]).request(
                    req, self.timeout_s + wait_ms / 1000)
            except (BrokerConnectionError, OSError, KeyError) as e:
                log.info("share fetch from node %s failed: %r", node, e)
                s.lost()
                self._stale = True
                return []
            if resp.error_code is not ErrorCode.none:
                if resp.error_code in _SESSION_LOST:
                    s.lost()
                    return []
                if resp.error_code.name.endswith("_authorization_failed"):
                    raise kafka_error(f"share fetch for group {self.group}", resp.error_code)
                log.info("share fetch from node %s: %s", node, resp.error_code.name)
                return []
            s.advance()
            s.partitions = set(parts)
            s.gaps.clear()
            lock_ms = int(resp.acquisition_lock_timeout.total_seconds() * 1000)
            return self._records(s, resp, sent_ms + lock_ms)

    def _records(self, s: _LeaderSession, resp: Any, deadline_ms: int) -> list[ShareRecord]:
        out: list[ShareRecord] = []
        for t in resp.responses:
            name = self._names.get(t.topic_id)
            for p in t.partitions:
                if p.error_code in _STALE_METADATA:
                    self._stale = True
                if not p.acquired_records or name is None:
                    continue
                counts: dict[int, int] = {}
                for a in p.acquired_records:
                    for off in range(a.first_offset, a.last_offset + 1):
                        counts[off] = a.delivery_count
                buf = p.records or b""
                for pos, h in iter_batches(buf):
                    if h.is_control:
                        continue
                    for r in decode_records(memoryview(buf)[pos:pos + h.size]):
                        n = counts.pop(r.offset, None)  # type: ignore[arg-type]
                        if n is None:
                            continue
                        out.append(ShareRecord(
                            name, p.partition_index, r.offset or 0, n, deadline_ms, r.key,
                            r.value, r.headers, r.timestamp or -1, s.node, s.generation))
                if counts:  # acquired offsets that are no records: GAP on the next fetch
                    s.gaps.setdefault((t.topic_id, p.partition_index), []).extend(sorted(counts))
        return out

    # ------------------------------------------------------------------ acknowledging

    async def acknowledge(self, acks: Iterable[tuple[ShareRecord, int]]
                          ) -> dict[tuple[str, int], ErrorCode]:
        """Send `(record, ACCEPT|RELEASE|REJECT)`s to the sessions that acquired them;
        Kafka's answer per (topic, partition)."""
        by_node: dict[int, dict[tuple[str, int], list[tuple[int, int]]]] = {}
        gens: dict[int, int] = {}
        for rec, kind in acks:
            by_node.setdefault(rec.leader, {}).setdefault(
                (rec.topic, rec.partition), []).append((rec.offset, kind))
            gens[rec.leader] = rec.session_generation
        out: dict[tuple[str, int], ErrorCode] = {}
        for node, parts in by_node.items():
            out.update(await self._acknowledge(node, gens[node], parts))
        return out

    async def _acknowledge(self, node: int, generation: int,
                           parts: dict[tuple[str, int], list[tuple[int, int]]]
                           ) -> dict[tuple[str, int], ErrorCode]:
        m = _mod("share_acknowledge", 1)
        s = self._session(node)
        async with s.lock:
            if s.epoch == 0 or s.generation != generation:
                return dict.fromkeys(parts, ErrorCode.invalid_record_state)
            topics: dict[uuid.UUID, list[Any]] = {}
            for (topic, p), offs in parts.items():
                batches = [m.AcknowledgementBatch(first_offset=f, last_offset=last,
                                                  acknowledge_types=(kind,))
                           for f, last, kind in _typed_runs(offs)]
                topics.setdefault(self._ids[topic], []).append(m.AcknowledgePartition(
                    partition_index=p, acknowledgement_batches=tuple(batches)))
            req = m.ShareAcknowledgeRequest(
                group_id=self.group, member_id=self.member_id, share_session_epoch=s.epoch,
                topics=tuple(m.AcknowledgeTopic(topic_id=t, partitions=tuple(ps))
                             for t, ps in topics.items()))
            try:
                resp = await self._conn(self._nodes[node]).request(req, self.timeout_s)
            except (BrokerConnectionError, OSError) as e:
                s.lost()
                self._stale = True
                log.info("share acknowledge to node %s failed: %r", node, e)
                return dict.fromkeys(parts, ErrorCode.network_exception)
            if resp.error_code is not ErrorCode.none:
                if resp.error_code in _SESSION_LOST:
                    s.lost()
                return dict.fromkeys(parts, resp.error_code)
            s.advance()
            out = dict.fromkeys(parts, ErrorCode.none)
            for t in resp.responses:
                name = self._names.get(t.topic_id, "")
                for p in t.partitions:
                    out[(name, p.partition_index)] = p.error_code
            return out

    # ------------------------------------------------------------------ closing

    async def close(self) -> None:
        """Close every share session (the broker releases what they hold), leave the
        group, close the connections. Never raises."""
        if self._closed:
            return
        self._closed = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._heartbeat
        m = _mod("share_acknowledge", 1)
        for node, s in self._sessions.items():
            if s.epoch == 0 or node not in self._nodes:
                continue
            async with s.lock:
                with contextlib.suppress(Exception):
                    await self._conn(self._nodes[node]).request(m.ShareAcknowledgeRequest(
                        group_id=self.group, member_id=self.member_id,
                        share_session_epoch=-1, topics=()), self.timeout_s)
                s.lost()
        if self.epoch > 0:  # joined: leave now rather than after the session timeout
            with contextlib.suppress(Exception):
                await self._beat(leaving=True)
        for c in self._conns.values():
            c.close()
        self._conns.clear()


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as (first, last) runs of consecutive ones."""
    out: list[tuple[int, int]] = []
    for off in sorted(offsets):
        if out and off == out[-1][1] + 1:
            out[-1] = (out[-1][0], off)
        else:
            out.append((off, off))
    return out


def _typed_runs(offsets: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(offset, type)s as (first, last, type) runs of consecutive offsets of one type."""
    out: list[tuple[int, int, int]] = []
    for off, kind in sorted(offsets):
        if out and off == out[-1][1] + 1 and kind == out[-1][2]:
            out[-1] = (out[-1][0], off, kind)
        else:
            out.append((off, off, kind))
    return out
