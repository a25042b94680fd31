"""Clocks that the time-driven parts take, so tests move time instead of sleeping.

Every part whose behaviour depends on elapsed time (the partition layer's ISR
expiration and retry pauses, the group and transaction coordinators' timers) reads
time through a `Clock` given at construction. Production passes a real clock; a test
passes `ManualClock` and calls `advance()`: a timeout then fires because the test said
so, not because a sleep happened to be long enough on a loaded machine.

Two real clocks, because two kinds of time are read: `SystemClock` is wall time, for
what is written to disk and must mean the same after a restart (commit timestamps,
expirations); `MonotonicClock` is for durations within one process (how long a follower
has been silent), which must not jump when the wall clock is set.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "MonotonicClock", "SystemClock"]


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    """Wall-clock milliseconds (what survives a restart)."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)


class MonotonicClock:
    """Monotonic milliseconds (durations inside one process)."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when a test says so."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms

    def now_ms(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms
