"""Failed share-partition loads, said out loud: a log line per share partition (rate
limited) and a count per error code in the share metrics.

A share partition whose state cannot be loaded on its leader (`ShareManager._load`: the
state read from the share coordinator, the leader epoch checked again after it, the copy
of records held at the delivery limit to the dead-letter topic, the first write) hands out
nothing and answers no error (librdkafka takes a share partition's coordinator errors as
fatal); the next ShareFetch tries again. Without this module such a loop is silent: the
share chaos workload once saw two share partitions deliver nothing for 35 s after their
leader was killed, with nothing in the new leader's log to say which step failed.
"""

from __future__ import annotations

import asyncio
import logging
import time

from yak.errors import ErrorCode

__all__ = ["LOG_EVERY_S", "LoadFailures"]

log = logging.getLogger("yak.share.manager")

# At most one line per share partition this often; the failures in between are counted
# into the next line.
LOG_EVERY_S = 10.0

Key = tuple[str, str, int]  # (group, topic, partition)


class LoadFailures:
    def __init__(self) -> None:
        self.by_error: dict[str, int] = {}  # error name -> failed loads (the metric)
        self._last: dict[Key, float] = {}  # when a line was last logged for a key
        self._quiet: dict[Key, int] = {}  # failures since that line

    def done(self, key: Key, fut: asyncio.Future[tuple[ErrorCode, str]]) -> None:
        """A load task ended: count and log it if it failed (a done callback)."""
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            self.failed(key, ErrorCode.unknown_server_error, f"raised {exc!r}")
            return
        code, step = fut.result()
        if code is ErrorCode.none:
            if self._last.pop(key, None) is not None:
                log.info("share partition %s-%s-%d loaded after %d more failed tries",
                         *key, self._quiet.pop(key, 0))
            return
        self.failed(key, code, step)

    def failed(self, key: Key, code: ErrorCode, step: str) -> None:
        self.by_error[code.name] = self.by_error.get(code.name, 0) + 1
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < LOG_EVERY_S:
            self._quiet[key] = self._quiet.get(key, 0) + 1
            return
        self._last[key] = now
        quiet = self._quiet.pop(key, 0)
        log.warning("share partition %s-%s-%d not loaded: %s (%s)%s; it hands out nothing "
                    "until a later ShareFetch loads it", *key, code.name.upper(), step,
                    f", {quiet} more failed tries since the last line" if quiet else "")
