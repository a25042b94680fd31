"""The disk guard of tiered storage: uploads that keep failing (the store down, slow or
refusing) keep every rolled segment on the broker's disk, since local copies are deleted
only once uploaded. The guard makes that visible before the disk fills.

Decided (issue 25): Kafka has no such guard; Redpanda blocks writes when its disk is full.
Refusing produce because a remote store is down turns an object-store outage into a
produce outage, which is the opposite of what tiering promises ("produce and consume of
local data are unaffected"), and the broker's disk-full path already fails appends with
KAFKA_STORAGE_ERROR when the disk really is full. So the guard only reports: past
`remote.log.manager.copy.lag.max.bytes` of rolled, not-yet-uploaded segments over the
tiered partitions this broker leads, it logs one WARNING line per interval (with the
bytes, the bound and the last upload error) and sets `yak_tiered_disk_guard_active`
to 1; one INFO line when the lag is back under the bound. Produce is never refused by it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["DiskGuard", "WARN_INTERVAL_S"]

log = logging.getLogger(__name__)

WARN_INTERVAL_S = 60.0  # one WARNING line per this many seconds while over the bound


class DiskGuard:
    def __init__(self, max_bytes: int, clock: Callable[[], float] = time.monotonic,
                 interval_s: float = WARN_INTERVAL_S) -> None:
        self.max_bytes = max_bytes  # < 0: off
        self.interval_s = interval_s
        self._clock = clock
        self.active = False
        self.lag_bytes = 0
        self._warned_at = -1e18

    def check(self, lag_bytes: int, last_error: str | None) -> None:
        """Called once per remote log manager tick with the copy lag over the partitions
        led here (bytes of rolled segments not uploaded yet)."""
        self.lag_bytes = lag_bytes
        over = 0 <= self.max_bytes < lag_bytes
        now = self._clock()
        if over and (not self.active or now - self._warned_at >= self.interval_s):
            self._warned_at = now
            log.warning(
                "tiered storage disk guard: %d bytes of rolled segments wait for upload,"
                " over remote.log.manager.copy.lag.max.bytes=%d; they stay on local disk"
                " until uploads succeed (last upload error: %s)",
                lag_bytes, self.max_bytes, last_error or "none")
        elif self.active and not over:
            log.info("tiered storage disk guard: copy lag back to %d bytes (bound %d)",
                     lag_bytes, self.max_bytes)
        self.active = over
