"""Broker registration and the live broker set.

A broker registers `/yak/<cluster>/brokers/<node.id>` (a RegisterBrokerRecord) on a lease
whose TTL is `broker.session.timeout.ms`, renewed every `broker.heartbeat.interval.ms`. The
key's create_revision is the broker epoch: it only ever grows, and a broker that lost its
session and registered again has a new, larger one (Kafka's broker epoch, as the KRaft
controller hands out in BrokerRegistrationResponse).

Loss of the session is reported to the owner (`on_state`), because the owner must fence
itself: a broker whose registration is gone may have been replaced as leader, so it must
never acknowledge another write under its old epoch. `is_registered()` is the check to make
before acknowledging; it needs no I/O (see yak/cluster/lease.py). By default the broker then
registers again with a new epoch, as a Kafka broker does after its session expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from yak.cluster.etcd import Compare, EtcdError, Op
from yak.cluster.etcd_values import EtcdUnavailable, LeaseNotFoundError
from yak.cluster.kv import KVClient
from yak.cluster.layout import ClusterKeys
from yak.cluster.lease import LeaseKeeper
from yak.cluster.prefix_view import PrefixView
from yak.cluster.records import RegisterBrokerRecord, decode, encode

__all__ = [
    "BrokerRegistration",
    "DuplicateBrokerRegistrationError",
    "LiveBroker",
    "LiveBrokers",
    "RegistrationState",
]

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS = 9000  # broker.session.timeout.ms
DEFAULT_HEARTBEAT_INTERVAL_MS = 2000  # broker.heartbeat.interval.ms


class DuplicateBrokerRegistrationError(EtcdError):
    """Another live process holds this node.id (Kafka's DUPLICATE_BROKER_REGISTRATION)."""


class RegistrationState(enum.Enum):
    UNREGISTERED = "unregistered"
    REGISTERED = "registered"
    LOST = "lost"  # the session lease expired or was revoked: fence now
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class LiveBroker:
    record: RegisterBrokerRecord
    epoch: int  # the registration key's create_revision

    @property
    def node_id(self) -> int:
        return self.record.broker_id


class BrokerRegistration:
    """Holds this broker's registration; `on_state(state, epoch)` hears every change.

    `start()` returns once registered (or raises DuplicateBrokerRegistrationError when another
    live incarnation still holds the node id after `register_timeout_s`: as in Kafka, a
    restarted broker waits for its previous incarnation's session to end).
    """

    def __init__(self, client: KVClient, keys: ClusterKeys, record: RegisterBrokerRecord, *,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
                 on_state: Callable[[RegistrationState, int], None] | None = None,
                 rejoin: bool = True, register_timeout_s: float | None = None) -> None:
        self.client = client
        self.keys = keys
        self.record = record
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rejoin = rejoin
        # Long enough for a previous incarnation's session to lapse, plus a margin.
        self.register_timeout_s = (register_timeout_s if register_timeout_s is not None
                                   else session_timeout_ms / 1000 * 2 + 5)
        self._on_state = on_state
        self.state = RegistrationState.UNREGISTERED
        self.epoch = -1
        self.lease: LeaseKeeper | None = None
        self._supervisor: asyncio.Task[None] | None = None

    @property
    def key(self) -> str:
        return self.keys.broker(self.record.broker_id)

    def is_registered(self) -> bool:
        """True only while the registration certainly exists in etcd (no I/O)."""
        return (self.state is RegistrationState.REGISTERED and self.lease is not None
                and self.lease.valid())

    def _set_state(self, state: RegistrationState) -> None:
        self.state = state
        if self._on_state is not None:
            try:
                self._on_state(state, self.epoch)
            except Exception:
                log.exception("broker %d: on_state(%s) failed", self.record.broker_id, state)

    async def start(self) -> None:
        """Register, retrying while etcd is unreachable for up to `register_timeout_s`.

        A broker restarted on a saturated machine (the chaos run at load ~20) once found its
        etcd endpoint silent for one 5 s request budget and exited: a transient outage at
        start is retried as after a lost session (Kafka's broker keeps asking its
        controller); only one that outlasts the whole budget stops the start."""
        deadline = time.monotonic() + self.register_timeout_s
        backoff = 0.1
        while True:
            left = deadline - time.monotonic()
            try:
                await asyncio.wait_for(self._register(), max(left, 1.0) + 1)
                break
            except (EtcdUnavailable, LeaseNotFoundError) as e:
                # LeaseNotFoundError: the lease just granted lapsed before the registration
                # was written (run E: a restart at load ~15 next to an etcd member's
                # restart); the next attempt grants a fresh one.
                if deadline - time.monotonic() <= backoff:
                    raise
                log.warning("broker %d: registering failed (%s); retrying until %.0f s have"
                            " passed", self.record.broker_id, e, self.register_timeout_s)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
        self._supervisor = asyncio.get_running_loop().create_task(
            self._supervise(), name=f"broker-{self.record.broker_id}-session")

    async def stop(self) -> None:
        """Deregister now (controlled shutdown's last step) rather than at session expiry."""
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None
        was = self.state
        self.state = RegistrationState.STOPPED
        if self.lease is not None:
            if was is RegistrationState.REGISTERED:
                # Only our own incarnation's key: compare its create_revision (our epoch).
                with contextlib.suppress(EtcdError):
                    await self.client.txn([Compare.create_revision(self.key, "==", self.epoch)],
                                          [Op.delete(self.key)])
            await self.lease.stop(revoke=True)
        self._set_state(RegistrationState.STOPPED)

    async def update(self, record: RegisterBrokerRecord) -> bool:
        """Rewrite this broker's record (e.g. in_controlled_shutdown) if still registered
        under the same epoch; False when the registration is gone."""
        if record.broker_id != self.record.broker_id or self.lease is None:
            raise ValueError("update() must keep the node id of a started registration")
        r = await self.client.txn(
            [Compare.create_revision(self.key, "==", self.epoch)],
            [Op.put(self.key, encode(record), lease=self.lease.lease_id)])
        if r.succeeded:
            self.record = record
        return r.succeeded

    async def _register(self) -> None:
        lease = LeaseKeeper(self.client, self.session_timeout_ms, self.heartbeat_interval_ms,
                            name=f"broker {self.record.broker_id} session")
        await lease.start()
        deadline = time.monotonic() + self.register_timeout_s
        waited_logged = False
        try:
            while True:
                r = await self.client.txn(
                    [Compare.create_revision(self.key, "==", 0)],
                    [Op.put(self.key, encode(self.record), lease=lease.lease_id)],
                    [Op.get(self.key)])
                if r.succeeded:
                    break
                kvs = r.responses[0].kvs
                if not kvs:
                    continue  # deleted between the compare and the read
                other = decode(RegisterBrokerRecord, kvs[0].value)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DuplicateBrokerRegistrationError(
                        f"node.id {self.record.broker_id} is still registered by another live"
                        f" broker (incarnation {other.incarnation_id}) after"
                        f" {self.register_timeout_s:g} s: is another broker running with"
                        " this node.id?")
                if not waited_logged:
                    log.warning("node.id %d is registered by incarnation %s; waiting up to"
                                " %.0f s for its session to end", self.record.broker_id,
                                other.incarnation_id, left)
                    waited_logged = True
                await self._wait_deleted(kvs[0].mod_revision + 1, min(left, 1.0))
        except BaseException:
            await lease.stop(revoke=True)
            raise
        self.lease = lease
        self.epoch = r.revision  # the txn's revision is the new key's create_revision
        log.info("broker %d registered, epoch %d, lease %x (TTL %d s)", self.record.broker_id,
                 self.epoch, lease.lease_id, lease.granted_ttl_s)
        self._set_state(RegistrationState.REGISTERED)

    async def _wait_deleted(self, from_revision: int, timeout: float) -> None:
        async def deleted() -> None:
            watch = self.client.watch(self.key, start_revision=from_revision)
            async with contextlib.aclosing(watch.__aiter__()) as stream:  # type: ignore[type-var]
                async for resp in stream:
                    if any(e.type == "DELETE" for e in resp.events) or resp.snapshot == []:
                        return

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(deleted(), timeout)

    async def _supervise(self) -> None:
        """Wait for the session to be lost; report it; register again if asked to."""
        while True:
            assert self.lease is not None
            await self.lease.lost.wait()
            old_epoch = self.epoch
            log.warning("broker %d lost its registration (epoch %d): fenced",
                        self.record.broker_id, old_epoch)
            self._set_state(RegistrationState.LOST)
            if not self.rejoin:
                return
            backoff = 0.1
            while True:
                try:
                    await asyncio.wait_for(self._register(), self.register_timeout_s + 1)
                    break
                except (EtcdError, TimeoutError) as e:
                    log.warning("broker %d: registering again failed (%s); retrying",
                                self.record.broker_id, e)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)


class LiveBrokers:
    """The registered brokers, kept current by a watch: `brokers` maps node id -> LiveBroker.

    `on_change(brokers, added, removed)` is called after each change with the node ids that
    appeared (or re-registered with a new epoch) and disappeared."""

    def __init__(self, client: KVClient, keys: ClusterKeys, *,
                 on_change: Callable[[dict[int, LiveBroker], set[int], set[int]], None]
                 | None = None) -> None:
        self.keys = keys
        self.brokers: dict[int, LiveBroker] = {}
        self._on_change = on_change
        self.view = PrefixView(client, keys.brokers, on_change=self._changed)

    async def start(self) -> None:
        await self.view.start()

    async def stop(self) -> None:
        await self.view.stop()

    async def wait_for(self, predicate: Callable[[dict[int, LiveBroker]], bool],
                       timeout: float) -> None:
        await self.view.wait_for(lambda _v: predicate(self.brokers), timeout)

    def _changed(self, view: PrefixView, keys: set[str]) -> None:
        added: set[int] = set()
        removed: set[int] = set()
        for key in keys:
            try:
                node_id = ClusterKeys.node_id_of(key)
            except ValueError:
                log.warning("ignoring unexpected key %s under %s", key, self.keys.brokers)
                continue
            kv = view.items.get(key)
            if kv is None:
                if self.brokers.pop(node_id, None) is not None:
                    removed.add(node_id)
                continue
            try:
                record = decode(RegisterBrokerRecord, kv.value)
            except (ValueError, TypeError, KeyError) as e:
                log.warning("ignoring unreadable registration %s: %s", key, e)
                continue
            prev = self.brokers.get(node_id)
            self.brokers[node_id] = LiveBroker(record, kv.create_revision)
            if prev is None or prev.epoch != kv.create_revision:
                added.add(node_id)
        if (added or removed) and self._on_change is not None:
            self._on_change(self.brokers, added, removed)
