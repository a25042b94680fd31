"""Electing the one registry that assigns ids, through the cluster's group coordinator.

As Confluent's Schema Registry does: every registry joins the consumer group
`schema-registry` with protocol type `sr` and its identity (host, port, scheme, leader
eligibility) as member metadata; the group's leader member picks the registry leader and
hands the choice to everyone in SyncGroup; heartbeats keep membership and a rebalance (a
registry joining, leaving or dying, detected by the coordinator's session timeout) elects
again. It is Kafka's classic group protocol spoken over the wire with kio's codecs, through
`yak.wire.KafkaConnection` (secured by `yak.security.connect`), so it works against any
Kafka cluster, not just Yak.

A member's view of the leader is `None` while a rebalance is in progress. Correctness does
not rest on the election alone: the log decides which id assignment wins (see `state.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from yak.wire import KafkaConnection

log = logging.getLogger(__name__)

GROUP_ID = "schema-registry"
PROTOCOL_TYPE = "sr"
PROTOCOL_NAME = "v0"
SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 15_000
HEARTBEAT_S = 3.0
CLIENT_ID = "yak-registry"


@dataclass(frozen=True)
class Identity:
    host: str
    port: int
    scheme: str = "http"
    leader_eligibility: bool = True

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def to_json(self) -> bytes:
        return json.dumps({"version": 1, "host": self.host, "port": self.port,
                           "leader_eligibility": self.leader_eligibility,
                           "scheme": self.scheme}).encode()

    @classmethod
    def from_json(cls, raw: bytes | dict[str, Any]) -> Identity:
        d = json.loads(raw) if isinstance(raw, bytes | bytearray) else raw
        return cls(str(d["host"]), int(d["port"]), str(d.get("scheme", "http")),
                   bool(d.get("leader_eligibility", True)))


def _connection(host: str, port: int, security: Any) -> KafkaConnection:
    """TLS and SASL login as `security` (a ClientSecurity, None: PLAINTEXT) says; imported
    here, so a registry on a PLAINTEXT cluster never loads the SASL client side."""
    from yak.security.connect import connection

    return connection(host, port, security, 5.0, CLIENT_ID)


def _api(name: str, version: int) -> Any:
    from importlib import import_module

    return import_module(f"kio.schema.{name}.v{version}.request")


class LeaderElector:
    """Keeps this registry in the `schema-registry` group; `leader` is the elected identity."""

    def __init__(self, bootstrap: str, identity: Identity,
                 on_change: Callable[[Identity | None], None] | None = None,
                 group_id: str = GROUP_ID, security: Any = None) -> None:
        self.bootstrap = [(h.rsplit(":", 1)[0], int(h.rsplit(":", 1)[1]))
                          for h in bootstrap.split(",") if h.strip()]
        self.security = security  # ClientSecurity of the gateway's connection (TLS, SASL)
        self.identity = identity
        self.group_id = group_id
        self.on_change = on_change
        self.leader: Identity | None = None
        self.generation = -1
        self.member_id = ""
        self._conn: KafkaConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._stopping = False
        self._last_leader: Identity | None = None  # kept through rebalances, for stability

    @property
    def is_leader(self) -> bool:
        return self.leader == self.identity

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="registry-elector")

    async def wait_for_leader(self, timeout_s: float) -> Identity | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.leader is None:
            left = deadline - loop.time()
            if left <= 0:
                return None
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):  # not wait_for: 3.11's drops a cancel
                    await self._changed.wait()
        return self.leader

    async def wait_for_new_leader(self, old: Identity, timeout_s: float) -> Identity | None:
        """A leader other than `old` (which did not answer), once the group elected one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.leader is None or self.leader == old:
            left = deadline - loop.time()
            if left <= 0:
                return None
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 0.5)):  # not wait_for: 3.11's drops a cancel
                    await self._changed.wait()
        return self.leader

    def _set_leader(self, leader: Identity | None) -> None:
        if leader is not None:
            self._last_leader = leader
        if leader != self.leader:
            log.info("schema registry leader: %s", leader.url if leader else "unknown")
        self.leader = leader
        self._changed.set()
        if self.on_change is not None:
            self.on_change(leader)

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._conn is not None and self.member_id:
            with contextlib.suppress(Exception):
                req = _api("leave_group", 1)
                await self._conn.request(
                    req.LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id),
                    2.0)
        if self._conn is not None:
            self._conn.close()

    # -- the membership loop -------------------------------------------------------------

    async def _run(self) -> None:
        backoff = 0.2
        while not self._stopping:
            try:
                await self._coordinator()
                await self._join_and_sync()
                backoff = 0.2
                await self._heartbeat_until_rebalance()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # broker down, coordinator moved: find it again
                log.debug("registry election: %r", e)
                self._set_leader(None)
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _coordinator(self) -> None:
        if self._conn is not None:
            return
        req = _api("find_coordinator", 2)
        last: Exception | None = None
        for host, port in self.bootstrap:
            conn = _connection(host, port, self.security)
            try:
                await conn.open()
            except OSError as e:  # unreachable: BrokerConnectionError is one
                last = e
                continue
            try:
                r = await conn.request(
                    req.FindCoordinatorRequest(key=self.group_id, key_type=i8(0)), 10.0)
            finally:
                conn.close()
            if r.error_code != ErrorCode.none:
                raise ConnectionError(f"FindCoordinator: {r.error_code.name}")
            self._conn = _connection(r.host, int(r.port), self.security)
            await self._conn.open()
            return
        raise ConnectionError(f"no broker reachable: {last}")

    async def _join_and_sync(self) -> None:
        assert self._conn is not None
        jreq = _api("join_group", 5)
        while True:
            self._set_leader(None)
            r = await self._conn.request(jreq.JoinGroupRequest(
                group_id=self.group_id,
                session_timeout=timedelta(milliseconds=SESSION_TIMEOUT_MS),
                rebalance_timeout=timedelta(milliseconds=REBALANCE_TIMEOUT_MS),
                member_id=self.member_id, group_instance_id=None,
                protocol_type=PROTOCOL_TYPE,
                protocols=(jreq.JoinGroupRequestProtocol(name=PROTOCOL_NAME,
                                                         metadata=self.identity.to_json()),),
            ), REBALANCE_TIMEOUT_MS / 1000 + 10)
            if r.error_code == ErrorCode.member_id_required:
                self.member_id = r.member_id
                continue
            if r.error_code == ErrorCode.unknown_member_id:
                self.member_id = ""
                continue
            if r.error_code != ErrorCode.none:
                raise ConnectionError(f"JoinGroup: {r.error_code.name}")
            self.member_id = r.member_id
            self.generation = int(r.generation_id)
            assignments = ()
            sreq = _api("sync_group", 3)
            if r.leader == r.member_id:
                assignments = self._assign(r.members, sreq)
            s = await self._conn.request(sreq.SyncGroupRequest(
                group_id=self.group_id, generation_id=i32(self.generation),
                member_id=self.member_id, group_instance_id=None, assignments=assignments,
            ), REBALANCE_TIMEOUT_MS / 1000 + 10)
            if s.error_code == ErrorCode.rebalance_in_progress:
                continue
            if s.error_code != ErrorCode.none:
                if s.error_code == ErrorCode.unknown_member_id:
                    self.member_id = ""
                raise ConnectionError(f"SyncGroup: {s.error_code.name}")
            choice = json.loads(bytes(s.assignment) or b"{}")
            leader = choice.get("leader_identity") if choice.get("error", 0) == 0 else None
            self._set_leader(Identity.from_json(leader) if leader else None)
            return

    def _assign(self, members: Any, sreq: Any) -> tuple[Any, ...]:
        """Keep the current leader if it is still a member, else the first eligible one."""
        idents = {}
        for m in members:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                idents[m.member_id] = Identity.from_json(bytes(m.metadata))
        eligible = sorted((mid, ident) for mid, ident in idents.items()
                          if ident.leader_eligibility)
        chosen = next(((mid, i) for mid, i in eligible if i == self._last_leader), None)
        if chosen is None and eligible:
            chosen = eligible[0]
        if chosen is None:
            payload = {"version": 1, "error": 1, "leader": None, "leader_identity": None}
        else:
            payload = {"version": 1, "error": 0, "leader": chosen[0],
                       "leader_identity": json.loads(chosen[1].to_json())}
        data = json.dumps(payload).encode()
        return tuple(sreq.SyncGroupRequestAssignment(member_id=m.member_id, assignment=data)
                     for m in members)

    async def _heartbeat_until_rebalance(self) -> None:
        assert self._conn is not None
        hreq = _api("heartbeat", 3)
        while not self._stopping:
            await asyncio.sleep(HEARTBEAT_S)
            r = await self._conn.request(hreq.HeartbeatRequest(
                group_id=self.group_id, generation_id=i32(self.generation),
                member_id=self.member_id, group_instance_id=None), 10.0)
            if r.error_code == ErrorCode.none:
                continue
            if r.error_code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation,
                                ErrorCode.fenced_instance_id):
                if r.error_code == ErrorCode.unknown_member_id:
                    self.member_id = ""
                return  # rejoin
            if r.error_code == ErrorCode.rebalance_in_progress:
                return
            raise ConnectionError(f"Heartbeat: {r.error_code.name}")
