"""Queue sessions: share-group consumption (KIP-932) shared by every transport.

A share session is one member of a share group (`cluster.share_member.ShareMember`) and the
records it has handed to its caller and not yet had acknowledged, by record id
(`topic:partition:offset:delivery_count`). The caller polls a batch, each record with
its id, delivery count and lock deadline, then accepts, releases or rejects records by
id. An id the session never handed out, already acknowledged, or whose lock deadline has
passed is refused with Kafka's INVALID_RECORD_STATE before anything is sent (the broker
may already have given the record to someone else); the broker's own refusal, per
partition, is reported the same way.

Named sessions (REST: `/share-groups/{group}/instances/{name}`) nobody has touched for
the consumer instance timeout are closed, as consumer instances are; stream sessions
(a WebSocket share subscription, a gRPC `ShareConsume`) live as long as their stream.
Closing a session closes its share sessions on the brokers, which releases every record
it still holds for redelivery, and leaves the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from yak.errors import ErrorCode
from yak.gateway.cluster import ClusterClient
from yak.gateway.cluster.model import ClusterError
from yak.gateway.cluster.share_member import ACK_TYPES, ShareMember, ShareRecord
from yak.gateway.core.errors import GatewayError, Reason, from_cluster_error
from yak.gateway.settings import DEFAULT_INSTANCE_TIMEOUT_S

log = logging.getLogger(__name__)

DEFAULT_SHARE_POLL_MS = 1000
SHARE_POLL_MAX_RECORDS = 500


@dataclass(frozen=True, slots=True)
class AckResult:
    """The outcome of one acknowledgement: `error` None when the broker applied it."""

    id: str
    type: str
    error: str | None = None
    error_code: int = 0


def invalid_record_state(ids: list[str], why: str) -> GatewayError:
    shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
    return GatewayError(Reason.ILLEGAL_STATE, f"INVALID_RECORD_STATE: {why}: {shown}",
                        int(ErrorCode.invalid_record_state), "INVALID_RECORD_STATE")


@contextlib.contextmanager
def _cluster_call() -> Iterator[None]:
    """A failed cluster call as the core reports it (Kafka's name and code kept)."""
    try:
        yield
    except ClusterError as e:
        raise from_cluster_error(e) from None


class ShareSession:
    """One share-group member and the records it holds for its caller."""

    def __init__(self, session_id: str, group: str, member: ShareMember,
                 fmt: str = "binary") -> None:
        self.id = session_id
        self.group = group
        self.member = member
        self.format = fmt
        self.topics = list(member.topics)
        self.held: dict[str, ShareRecord] = {}  # handed out, not yet acknowledged
        self.last_used = time.monotonic()
        self.poll_lock = asyncio.Lock()
        self.busy = 0
        self.closed = False

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def outstanding(self) -> int:
        """Records handed out, not acknowledged, and still locked."""
        self._prune(int(time.time() * 1000))
        return len(self.held)

    def _prune(self, now_ms: int) -> None:
        """Forget records whose lock has passed: the broker makes them available again."""
        for rid in [rid for rid, r in self.held.items() if r.lock_deadline_ms <= now_ms]:
            del self.held[rid]

    async def poll(self, max_records: int = SHARE_POLL_MAX_RECORDS,
                   timeout_ms: int = DEFAULT_SHARE_POLL_MS) -> list[ShareRecord]:
        """Long poll: acquired records as soon as some arrive, or [] after `timeout_ms`.
        Every record returned is locked for this session until its `lock_deadline_ms`."""
        if self.closed:
            raise GatewayError(Reason.SESSION_NOT_FOUND, "share session closed")
        async with self.poll_lock:
            self.busy += 1
            try:
                with _cluster_call():
                    records = await self.member.poll(max_records, timeout_ms)
            finally:
                self.busy -= 1
                self.touch()
            self._prune(int(time.time() * 1000))
            for r in records:
                self.held[r.id] = r
            return records

    async def acknowledge(self, acks: Iterable[tuple[str, str]]) -> list[AckResult]:
        """`(record id, "accept"|"release"|"reject")`s. All checked first: an unknown type
        is INVALID_ARGUMENT, an id not held (never handed out, acknowledged already, or
        past its lock deadline) INVALID_RECORD_STATE, and then nothing is sent. Otherwise
        one request per leader; the broker's answer per record (a partition it refused
        gives each of its records that error)."""
        if self.closed:
            raise GatewayError(Reason.SESSION_NOT_FOUND, "share session closed")
        todo = list(acks)
        if not todo:
            raise GatewayError(Reason.INVALID_ARGUMENT, "no acknowledgements given")
        now_ms = int(time.time() * 1000)
        bad_type = [t for _, t in todo if t not in ACK_TYPES]
        if bad_type:
            raise GatewayError(Reason.INVALID_ARGUMENT,
                               f"acknowledgement type must be one of {', '.join(ACK_TYPES)}, "
                               f"not {bad_type[0]!r}")
        if len({rid for rid, _ in todo}) != len(todo):
            raise GatewayError(Reason.INVALID_ARGUMENT, "a record id is given twice")
        unknown = [rid for rid, _ in todo if rid not in self.held]
        if unknown:
            raise invalid_record_state(unknown, "not acquired by this session (unknown id, "
                                                "or acknowledged already)")
        expired = [rid for rid, _ in todo if self.held[rid].lock_deadline_ms <= now_ms]
        if expired:
            for rid in expired:
                del self.held[rid]
            raise invalid_record_state(expired, "the acquisition lock expired")
        self.busy += 1
        try:
            records = [(self.held.pop(rid), ACK_TYPES[kind]) for rid, kind in todo]
            with _cluster_call():
                codes = await self.member.acknowledge(records)
        finally:
            self.busy -= 1
            self.touch()
        out = []
        for (rec, _), (rid, kind) in zip(records, todo, strict=True):
            code = codes.get((rec.topic, rec.partition), ErrorCode.none)
            out.append(AckResult(rid, kind) if code is ErrorCode.none else
                       AckResult(rid, kind, code.name.upper(), int(code)))
        return out

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.held.clear()
        try:
            await asyncio.wait_for(self.member.close(), 10)
        except Exception:
            log.warning("closing share session %s/%s failed", self.group, self.id,
                        exc_info=True)


def check_acks(results: list[AckResult]) -> list[AckResult]:
    """`results`, or INVALID_RECORD_STATE (another Kafka error: its name) when the
    broker refused any; the message says the others were applied."""
    failed = [r for r in results if r.error is not None]
    if not failed:
        return results
    first = failed[0]
    reason = (Reason.ILLEGAL_STATE if first.error_code == ErrorCode.invalid_record_state
              else Reason.KAFKA_ERROR)
    raise GatewayError(reason, f"{first.error}: refused by the broker for "
                       f"{', '.join(r.id for r in failed[:10])}; the other "
                       f"{len(results) - len(failed)} acknowledgement(s) were applied",
                       first.error_code, first.error or "")


class ShareSessionRegistry:
    """Every queue session of one gateway core: named ones (REST, keyed by (group,
    name), expiring when idle) and stream ones (keyed by id, closed by their stream)."""

    def __init__(self, cluster: ClusterClient,
                 instance_timeout_s: float = DEFAULT_INSTANCE_TIMEOUT_S) -> None:
        self.cluster = cluster
        self.instance_timeout_s = instance_timeout_s
        self.instances: dict[tuple[str, str], ShareSession] = {}
        self.streams: dict[str, ShareSession] = {}
        self._reaper: asyncio.Task[None] | None = None

    async def _member(self, group: str, topics: list[str], client_id: str) -> ShareMember:
        if not group:
            raise GatewayError(Reason.INVALID_ARGUMENT, "a share group id is required")
        topics = list(dict.fromkeys(topics))
        if not topics or not all(isinstance(t, str) and t for t in topics):
            raise GatewayError(Reason.INVALID_ARGUMENT,
                               "topics must be a non-empty list of topic names")
        c = self.cluster
        member = ShareMember(c.bootstrap, c.security, c.timeout_s, group, topics, client_id)
        try:
            with _cluster_call():
                await member.start()
        except BaseException:
            await member.close()
            raise
        return member

    # ---------------------------------------------------------------- named (REST)

    async def create(self, group: str, name: str | None, topics: list[str],
                     fmt: str = "binary") -> ShareSession:
        name = name or f"rest-share-{uuid.uuid4().hex[:12]}"
        if (group, name) in self.instances:
            raise GatewayError(Reason.SESSION_EXISTS,
                               f"share consumer {name} already exists in share group {group}")
        member = await self._member(group, topics, f"yak-rest-share-{name}")
        if (group, name) in self.instances:  # created meanwhile by a concurrent request
            await member.close()
            raise GatewayError(Reason.SESSION_EXISTS,
                               f"share consumer {name} already exists in share group {group}")
        session = ShareSession(name, group, member, fmt)
        self.instances[(group, name)] = session
        self._start_reaper()
        return session

    def get(self, group: str, name: str) -> ShareSession:
        session = self.instances.get((group, name))
        if session is None:
            raise GatewayError(Reason.SESSION_NOT_FOUND, "Share consumer instance not found.")
        session.touch()
        return session

    async def delete(self, group: str, name: str) -> None:
        session = self.instances.pop((group, name), None)
        if session is None:
            raise GatewayError(Reason.SESSION_NOT_FOUND, "Share consumer instance not found.")
        await session.close()

    async def reap(self, now: float | None = None) -> list[tuple[str, str]]:
        """Close named sessions idle longer than the timeout; returns the keys closed."""
        now = time.monotonic() if now is None else now
        idle = [key for key, s in self.instances.items()
                if now - s.last_used > self.instance_timeout_s and not s.busy]
        for key in idle:
            log.info("REST share consumer %s/%s expired after %.0f s idle", *key,
                     self.instance_timeout_s)
            with contextlib.suppress(GatewayError):
                await self.delete(*key)
        return idle

    def _start_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_loop())

    async def _reap_loop(self) -> None:
        period = max(min(self.instance_timeout_s / 4, 5.0), 0.1)
        while True:
            await asyncio.sleep(period)
            try:
                await self.reap()
            except Exception:
                log.exception("reaping REST share consumers failed")

    # ---------------------------------------------------------------- streams

    async def open_stream(self, group: str, topics: list[str], client_id: str) -> ShareSession:
        member = await self._member(group, topics, client_id)
        session = ShareSession(uuid.uuid4().hex, group, member)
        self.streams[session.id] = session
        return session

    def stream(self, session_id: str) -> ShareSession:
        session = self.streams.get(session_id)
        if session is None:
            raise GatewayError(Reason.SESSION_NOT_FOUND,
                               f"no open share session {session_id!r}")
        return session

    async def close_stream(self, session: ShareSession) -> None:
        self.streams.pop(session.id, None)
        await session.close()

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        for key in list(self.instances):
            with contextlib.suppress(GatewayError):
                await self.delete(*key)
        for session in list(self.streams.values()):
            await self.close_stream(session)
