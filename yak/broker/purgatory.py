"""Delayed Fetch wake-ups.

A consumer's Fetch that finds less than `min_bytes` waits up to `max_wait_ms` for data.
Rather than polling the logs, a waiting Fetch parks one future under every partition it
reads; an append calls `notify(topic, partition)`, which wakes exactly the fetches that
read that partition. With nobody waiting, `notify` is one dict lookup, so the Produce
path pays almost nothing for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

TopicPartition = tuple[str, int]


class Purgatory:
    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[bool]]] = {}

    def notify(self, topic: str, partition: int) -> None:
        waiters = self._waiters.pop((topic, partition), None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(True)

    def notify_all(self) -> None:
        """Wake every waiter (shutdown, or a change that affects all partitions)."""
        waiters, self._waiters = self._waiters, {}
        for group in waiters.values():
            for fut in group:
                if not fut.done():
                    fut.set_result(True)

    async def wait(self, partitions: Iterable[TopicPartition], timeout_s: float) -> bool:
        """Wait until one of `partitions` gets an append or `timeout_s` passes.

        Returns True if woken by an append. Callers re-read the logs either way: a wake-up
        is a hint, not a promise that enough bytes arrived.
        """
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        keys = list(partitions)
        for key in keys:
            self._waiters.setdefault(key, set()).add(fut)
        handle = loop.call_later(timeout_s, _expire, fut)
        try:
            return await fut
        finally:
            handle.cancel()
            for key in keys:
                group = self._waiters.get(key)
                if group is not None:
                    group.discard(fut)
                    if not group:
                        del self._waiters[key]

    def waiting(self) -> int:
        """Number of (partition, fetch) registrations; for metrics and tests."""
        return sum(len(g) for g in self._waiters.values())


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
