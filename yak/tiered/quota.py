"""The remote fetch quota (KIP-956's `remote.log.manager.fetch.max.bytes.per.second`).

Kafka bounds the bytes a broker reads from remote storage per second, over all partitions
and clients, not per client: while the quota is spent, a Fetch that would read the remote
log answers that partition empty (no error, no client throttle time) and Kafka counts the
time in RemoteLogManager's RemoteFetchThrottleTime. Yak does the same, with one difference
of where the wait happens: Kafka's empty answer goes to the delayed-fetch purgatory for the
fetch's max wait, Yak's remote read waits (asleep, the loop free) at most
`remote.fetch.max.wait.ms` for the quota before answering empty, so a consumer reading
tiered data sees the same pacing instead of a stream of empty answers.

A token bucket: each read's bytes are counted when it returns (Kafka counts the records a
remote read gave), the balance may go negative by one read, and reads start again once it
is back to zero; an idle quota refills to at most one second of bytes (the burst).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["RemoteFetchQuota", "UNLIMITED"]

UNLIMITED = 2**62  # at or above: no quota (the setting's default is Long.MAX_VALUE)


class RemoteFetchQuota:
    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._tokens = 0.0
        self._last = clock()
        self.throttled = 0  # remote reads that waited for the quota
        self.throttle_s = 0.0  # and how long they waited, in all
        self.recorded = 0

    def unlimited(self) -> bool:
        return self.rate >= UNLIMITED

    def wait_s(self) -> float:
        """Seconds until the quota allows another remote read (0: now)."""
        if self.unlimited():
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.rate), self._tokens + (now - self._last) * self.rate)
        self._last = now
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def record(self, nbytes: int) -> None:
        """A remote read returned `nbytes` of records."""
        self.recorded += nbytes
        if not self.unlimited():
            self.wait_s()  # refill up to now first
            self._tokens -= nbytes

    async def admit(self, limit_s: float) -> bool:
        """Wait (asleep, the loop free) for the quota, at most `limit_s`: True if the read
        may go on, False if the quota is still spent (the fetch answers empty)."""
        wait = self.wait_s()
        if wait <= 0:
            return True
        await asyncio.sleep(min(wait, limit_s))
        self.throttled += 1
        self.throttle_s += min(wait, limit_s)
        return wait <= limit_s
