"""Deadlines of the coordinators on the runtime, kept as data in one queue.

Kafka's coordinators are driven by many timers (the group's session timeouts, join
barrier, initial rebalance delay and offset expiration; the transaction coordinator's
sweeps and marker retries); Kafka's runtime gives each shard a `CoordinatorTimer`.
Keeping them as keyed deadlines in one heap instead of one `loop.call_later` handle each makes two things
easy: re-arming a member's session timer on every heartbeat is an O(log n) push
with lazy deletion, and tests can drive every timeout with a fake clock
(`ManualClock` + `run_due()`) instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Callable, Hashable

from yak.clock import Clock, ManualClock, SystemClock

__all__ = ["Clock", "SystemClock", "ManualClock", "TimerQueue"]

log = logging.getLogger(__name__)


class TimerQueue:
    """Keyed one-shot timers. Scheduling a key again replaces its previous deadline."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._heap: list[tuple[int, int, Hashable]] = []
        self._live: dict[Hashable, tuple[int, int, Callable[[], None]]] = {}  # seq, deadline, fn
        self._seq = itertools.count()
        self._wakeup: asyncio.Event | None = None

    def __len__(self) -> int:
        return len(self._live)

    def schedule(self, key: Hashable, deadline_ms: int, fn: Callable[[], None]) -> None:
        seq = next(self._seq)
        self._live[key] = (seq, deadline_ms, fn)
        heapq.heappush(self._heap, (deadline_ms, seq, key))
        if len(self._heap) > 4 * len(self._live) + 1024:
            # Re-arming a session timer on every heartbeat leaves the old entry behind;
            # with long session timeouts those would pile up, so rebuild from live ones.
            self._heap = [(d, q, k) for k, (q, d, _) in self._live.items()]
            heapq.heapify(self._heap)
        if self._wakeup is not None and self._heap[0][1] == seq:
            self._wakeup.set()

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def cancel_shard(self, shard: Hashable) -> int:
        """Cancel every timer whose key is a tuple starting with `shard` (the runtime's
        per-shard timers, `("shard", topic, partition, ...)`, when the shard unloads)."""
        n = len(shard) if isinstance(shard, tuple) else 1
        prefix = shard if isinstance(shard, tuple) else (shard,)
        gone = [k for k in self._live if isinstance(k, tuple) and k[:n] == prefix]
        for k in gone:
            del self._live[k]
        return len(gone)

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._live

    def next_deadline(self) -> int | None:
        while self._heap:
            deadline, seq, key = self._heap[0]
            live = self._live.get(key)
            if live is not None and live[0] == seq:
                return deadline
            heapq.heappop(self._heap)
        return None

    def run_due(self) -> int:
        """Fire every timer whose deadline has passed; returns how many fired."""
        now = self.clock.now_ms()
        fired = 0
        while self._heap and self._heap[0][0] <= now:
            _, seq, key = heapq.heappop(self._heap)
            live = self._live.get(key)
            if live is None or live[0] != seq:
                continue
            del self._live[key]
            try:
                live[2]()
            except Exception:  # one broken timer must not stop every other one
                log.exception("coordinator timer %r failed", key)
            fired += 1
        return fired

    async def run_forever(self, max_sleep_ms: int = 1000) -> None:
        """Fire timers as they fall due (the broker runs this as one background task)."""
        self._wakeup = asyncio.Event()
        try:
            while True:
                self.run_due()
                deadline = self.next_deadline()
                now = self.clock.now_ms()
                sleep_ms = max_sleep_ms if deadline is None else min(max_sleep_ms, deadline - now)
                self._wakeup.clear()
                if sleep_ms > 0:
                    with contextlib.suppress(TimeoutError):
                        # asyncio.timeout, not wait_for: 3.11's wait_for drops a cancel
                        async with asyncio.timeout(sleep_ms / 1000):
                            await self._wakeup.wait()
        finally:
            self._wakeup = None
