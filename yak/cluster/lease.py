"""An etcd lease kept alive, with a local deadline the owner can check before acting.

Why a local deadline: a process that was paused (SIGSTOP, a long GC or swap stall, a VM
freeze) resumes believing it still holds whatever it held. Its lease may have expired while
it slept, and etcd deleted the keys on it (its broker registration, the controller key);
another broker may already have taken over. The first keepalive after the pause will say so,
but the owner must not act in the gap before that answer. So the keeper records, for every
successful renewal, `valid_until = time the renewal was *sent* + the TTL granted`. etcd's
leader restarts the TTL when it *receives* the renewal, which is later, so the lease is
certainly alive until `valid_until` and the check needs no round trip. CLOCK_MONOTONIC keeps
running while a process is stopped, so after a pause longer than the TTL `valid()` is false
from the first instruction the process runs.

etcd counts TTLs in whole seconds, with a minimum of about 2 s at its default heartbeat
(1.5 x election timeout, rounded up), so a TTL in ms is rounded up.

Why a thread of its own: renewals ran on the broker's event loop, and a loop starved for
longer than the TTL (recovering logs, or a saturated machine; docs/reliability.md finding 9)
lost the broker's session although the process was alive and serving, which moved its
leaderships and shrank every ISR. Kafka's brokers heartbeat to the controller from their
own thread for the same reason. The renewals now run on a private event loop in a daemon
thread, with their own etcd client; the owner's loop is told of a lost lease through
`call_soon_threadsafe`. A paused process (SIGSTOP, a VM freeze) pauses every thread, so the
local deadline above protects exactly as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import math
import threading
import time
from collections.abc import Callable

from yak.cluster.etcd import EtcdError, EtcdUnavailable, LeaseNotFoundError
from yak.cluster.kv import KVClient

__all__ = ["LeaseKeeper", "LeaseState"]

log = logging.getLogger(__name__)


class LeaseState(enum.Enum):
    NEW = "new"
    ACTIVE = "active"  # renewed; valid() until valid_until
    LOST = "lost"  # etcd said the lease is gone (expired or revoked elsewhere)
    CLOSED = "closed"  # stop() was called


class LeaseKeeper:
    """Grants a lease and renews it every `interval_ms` until stopped or lost.

    `on_lost(reason)` is called once, on the event loop that called `start()`, when etcd
    reports the lease gone. While etcd is unreachable the keeper keeps trying; `valid()`
    turns false at the local deadline, and the lapse is logged once per change of state.

    The renewals run in a thread (see the module doc). The thread writes `valid_until`,
    `_gap`, `_last_attempt` and `_unreachable_logged` (single assignments, read without a
    lock); `_lock` orders the thread's last write against `stop()`/`suspend()`, after which
    it writes nothing.
    """

    def __init__(self, client: KVClient, ttl_ms: int, interval_ms: int, *,
                 on_lost: Callable[[str], None] | None = None, name: str = "lease",
                 clock: Callable[[], float] = time.monotonic) -> None:
        if interval_ms <= 0 or ttl_ms <= 0:
            raise ValueError("lease TTL and renewal interval must be positive")
        if interval_ms >= ttl_ms:
            raise ValueError(f"{name}: renewal interval {interval_ms} ms must be below the "
                             f"TTL {ttl_ms} ms")
        self.client = client
        self.ttl_s = max(1, math.ceil(ttl_ms / 1000))
        self.interval_s = interval_ms / 1000
        self.name = name
        self._on_lost = on_lost
        self._clock = clock
        self.lease_id = 0
        self.granted_ttl_s = 0
        self.valid_until = 0.0
        self.state = LeaseState.NEW
        self.lost = asyncio.Event()
        self._owner_loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._halted = False  # stop()/suspend() called: the thread must write nothing more
        self._cancel_renewals: Callable[[], None] | None = None  # set by the thread
        self._unreachable_logged = False
        self._last_attempt = 0.0  # clock when the latest renewal attempt started
        self._gap = False  # an attempt came late (the process stalled) since the last renewal

    def valid(self) -> bool:
        """True while the lease is certainly alive in etcd (no I/O; see the module doc)."""
        return self.state is LeaseState.ACTIVE and self._clock() < self.valid_until

    def _attempt_budget_s(self) -> float:
        """Longest normal time between two renewal attempts: the interval, one keepalive's
        timeout and a margin for a busy event loop."""
        return self.interval_s + max(0.5, min(self.client.timeout, self.interval_s)) + 1.0

    def alive_without_etcd(self) -> bool:
        """valid(), or: etcd has not answered since the last renewal *and* this process
        kept trying on schedule all along. That is an etcd outage seen by a running broker
        (which keeps serving with what it has), not a process that was paused: a pause
        shows as a late attempt (or one still late now) and answers False until etcd
        renews the lease or declares it gone."""
        if self.valid():
            return True
        if self.state is not LeaseState.ACTIVE or self._gap or not self._unreachable_logged:
            return False
        return self._clock() - self._last_attempt <= self._attempt_budget_s()

    def remaining_s(self) -> float:
        return max(0.0, self.valid_until - self._clock()) if self.valid() else 0.0

    async def start(self) -> int:
        """Grant the lease and start renewing it; returns the lease id."""
        t0 = self._clock()
        self.lease_id, self.granted_ttl_s = await self.client.lease_grant(self.ttl_s)
        self.valid_until = t0 + self.granted_ttl_s
        self._last_attempt = t0
        self.state = LeaseState.ACTIVE
        self._owner_loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._thread_main, name=f"{self.name}-keepalive",
                                        daemon=True)
        self._thread.start()
        return self.lease_id

    async def stop(self, revoke: bool = True) -> None:
        """Stop renewing; with `revoke`, also delete the lease (and every key on it) now."""
        was_active = self.state is LeaseState.ACTIVE
        self.state = LeaseState.CLOSED
        thread = self._halt()
        if thread is not None:
            # The renewal in flight is cancelled, so this is quick; bounded all the same.
            deadline = time.monotonic() + self.client.timeout + 1.0
            while thread.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        if revoke and was_active and self.lease_id:
            try:
                await self.client.lease_revoke(self.lease_id)
            except EtcdError as e:  # it will expire on its own within the TTL
                log.warning("%s: revoking lease %x failed (%s); it expires within %d s",
                            self.name, self.lease_id, e, self.granted_ttl_s)

    def suspend(self) -> None:
        """Stop renewing without revoking, as if the process froze (tests and fault drills)."""
        self._halt()

    def _halt(self) -> threading.Thread | None:
        """Tell the renewal thread to stop; from here on it changes nothing."""
        with self._lock:
            self._halted = True
            cancel = self._cancel_renewals
        if cancel is not None:
            with contextlib.suppress(RuntimeError):  # its loop already closed
                cancel()
        thread, self._thread = self._thread, None
        return thread

    def _report_lost(self, reason: str) -> None:
        """From the renewal thread: the lease is gone. valid() turns false at once; the
        owner's loop runs `_mark_lost` (event, callback) as soon as it gets to it."""
        with self._lock:
            if self._halted:
                return
            self.valid_until = 0.0
            self._halted = True
        loop = self._owner_loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the owner's loop is closed: nobody to tell
                loop.call_soon_threadsafe(self._mark_lost, reason)

    def _mark_lost(self, reason: str) -> None:
        if self.state is not LeaseState.ACTIVE:
            return
        self.state = LeaseState.LOST
        self.lost.set()
        log.warning("%s: lease %x lost: %s", self.name, self.lease_id, reason)
        if self._on_lost is not None:
            self._on_lost(reason)

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            task = loop.create_task(self._renew(), name=f"{self.name}-keepalive")
            with self._lock:
                self._cancel_renewals = lambda: loop.call_soon_threadsafe(task.cancel)
                if self._halted:
                    task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(task)
        except Exception as e:  # a bug here must not pass silently: the session would lapse
            log.exception("%s: lease %x renewal thread failed", self.name, self.lease_id)
            self._report_lost(f"renewal thread failed: {e!r}")
        finally:
            with self._lock:
                self._cancel_renewals = None
            loop.close()

    async def _renew(self) -> None:
        # A client of this thread's own: an httpx client belongs to the loop it runs on
        # (the local backend is thread-safe and hands back itself, which is not closed).
        client = self.client.for_thread()
        try:
            await self._run(client)
        finally:
            if client is not self.client:
                await client.aclose()

    async def _run(self, client: KVClient) -> None:
        while not self._halted:
            await asyncio.sleep(self.interval_s)
            owner = self._owner_loop
            if owner is not None and owner.is_closed():
                # Its owner is gone without stopping it (a test's loop ended): renewing on
                # would keep the lease, and every key on it, alive for the process's life.
                with self._lock:
                    self._halted = True
                return
            t0 = self._clock()
            if t0 - self._last_attempt > self._attempt_budget_s():
                self._gap = True  # stalled (paused?) since the last attempt
            self._last_attempt = t0
            if t0 >= self.valid_until and not self._unreachable_logged:
                # Not renewed in time (etcd unreachable, or this process was paused): the
                # owner already sees valid() == False; etcd's answer decides what comes next.
                log.warning("%s: lease %x not renewed within its %d s TTL", self.name,
                            self.lease_id, self.granted_ttl_s)
                self._unreachable_logged = True
            try:
                ttl = await client.lease_keepalive(
                    self.lease_id, timeout=max(0.5, min(client.timeout, self.interval_s)))
            except LeaseNotFoundError:
                ttl = 0
            except EtcdUnavailable as e:
                if not self._unreachable_logged:
                    log.warning("%s: etcd unreachable, lease %x not renewed: %s", self.name,
                                self.lease_id, e)
                    self._unreachable_logged = True
                continue
            except EtcdError as e:
                log.warning("%s: lease %x keepalive failed: %s", self.name, self.lease_id, e)
                continue
            if ttl <= 0:
                self._report_lost("expired" if self._clock() >= self.valid_until
                                  else "gone (revoked)")
                return
            with self._lock:
                if self._halted:
                    return
                self.valid_until = t0 + ttl
                self._gap = False
            if self._unreachable_logged:
                log.info("%s: lease %x renewed again", self.name, self.lease_id)
                self._unreachable_logged = False
