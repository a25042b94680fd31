"""Delayed operations: Fetch long-polls and acks=all produces waiting on the high watermark.

Kafka parks requests that cannot complete yet in "purgatories" keyed by partition and
re-checks them when that partition changes. Yak has the same two:

- `FetchPurgatory`: a consumer's Fetch that found less than `min_bytes` parks one future
  under every partition it reads; new data on a partition wakes exactly the fetches that
  read it. With nobody waiting, `notify` is one dict lookup, so appends pay almost nothing.
- `ProducePurgatory`: an acks=all produce waits until the partition's high watermark
  passes its last offset (every in-sync replica has it). On one broker the leader is the
  whole ISR, the high watermark moves with the append and nothing ever waits here; with
  followers (issue 11) it is what holds the response until replication catches up.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import Iterable

__all__ = ["FetchPurgatory", "ProducePurgatory", "TopicPartition"]

TopicPartition = tuple[str, int]


class FetchPurgatory:
    """Parked fetches by partition. A follower's fetch reads up to the log end, so only
    new data (or a change of the partition) can give it more; a consumer's reads up to
    the high watermark (or the last stable offset), so a high watermark move can too.
    The two are kept apart so that `notify_high_watermark` (a move caused by a follower's
    fetch, which appends nothing) wakes the consumers only: at RF=3 the leader's high
    watermark moves on about every other follower fetch, and each such wake-up of the
    other follower's parked fetch was a read that found nothing and parked again."""

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[bool]]] = {}
        # Fetches bounded by the log end (followers', `wait(..., log_end=True)`).
        self._log_end: dict[TopicPartition, set[asyncio.Future[bool]]] = {}

    def notify(self, topic: str, partition: int) -> None:
        """New data or a change of the partition: wake every fetch parked on it."""
        key = (topic, partition)
        waiters = self._waiters.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(True)
        if self._log_end:
            waiters = self._log_end.pop(key, None)
            if waiters:
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(True)

    def notify_high_watermark(self, topic: str, partition: int) -> None:
        """Only the high watermark moved (nothing was appended, nothing else changed):
        wake the fetches it can give more to, not those bounded by the log end."""
        waiters = self._waiters.pop((topic, partition), None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(True)

    def notify_all(self) -> None:
        """Wake every waiter (shutdown, or a change that affects all partitions)."""
        waiters, self._waiters = self._waiters, {}
        log_end, self._log_end = self._log_end, {}
        for group in (*waiters.values(), *log_end.values()):
            for fut in group:
                if not fut.done():
                    fut.set_result(True)

    async def wait(self, partitions: Iterable[TopicPartition], timeout_s: float,
                   log_end: bool = False) -> bool:
        """Wait until one of `partitions` gets new data or `timeout_s` passes.

        Returns True if woken by new data. Callers re-read the logs either way: a wake-up
        is a hint, not a promise that enough bytes arrived. `log_end`: the fetch reads up
        to the log end (a follower's, unthrottled), so a high watermark move alone
        (`notify_high_watermark`) does not wake it.
        """
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        keys = partitions if isinstance(partitions, list) else list(partitions)
        table = self._log_end if log_end else self._waiters
        for key in keys:
            group = table.get(key)
            if group is None:
                table[key] = {fut}
            else:
                group.add(fut)
        handle = loop.call_later(timeout_s, _expire, fut)
        try:
            return await fut
        finally:
            handle.cancel()
            for key in keys:
                group = table.get(key)
                if group is not None:
                    group.discard(fut)
                    if not group:
                        del table[key]

    def waiting(self) -> int:
        """Number of (partition, fetch) registrations; for metrics and tests."""
        return (sum(len(g) for g in self._waiters.values())
                + sum(len(g) for g in self._log_end.values()))


class ProducePurgatory:
    """acks=all appends waiting for the high watermark to reach an offset.

    A partition's waiters are kept sorted by the offset they need, so a high watermark
    move completes a prefix of them: the work is per waiter completed, never a scan of
    every waiter still parked (at RF=3 a busy partition has tens parked, and the high
    watermark moves once per follower fetch). Futures completed elsewhere (a timeout,
    `fail`) are dropped with the prefix they sit in, or by `forget`."""

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, list[tuple[int, int, asyncio.Future[bool]]]] = {}
        self._seq = itertools.count()  # ties in `required` keep arrival order

    def watch(self, topic: str, partition: int, required_offset: int) -> asyncio.Future[bool]:
        """A future that becomes True once the high watermark is >= `required_offset`,
        or False if the partition stops being led here (`fail`). A caller that gives up
        on it (request timeout) calls `forget`."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault((topic, partition), [])
        entry = (required_offset, next(self._seq), fut)
        if not waiters or waiters[-1][0] <= required_offset:
            waiters.append(entry)  # the usual case: appends come in offset order
        else:
            bisect.insort(waiters, entry)
        return fut

    def forget(self, topic: str, partition: int, fut: asyncio.Future[bool]) -> None:
        """Drop a waiter given up on (a timed-out request), so it does not stay
        registered while the high watermark stands still."""
        key = (topic, partition)
        waiters = self._waiters.get(key)
        if waiters is None:
            return
        for i, w in enumerate(waiters):
            if w[2] is fut:
                del waiters[i]
                break
        if not waiters:
            del self._waiters[key]

    def check(self, topic: str, partition: int, high_watermark: int) -> None:
        """The high watermark moved: complete the waiters it satisfies (a prefix)."""
        key = (topic, partition)
        waiters = self._waiters.get(key)
        if not waiters or waiters[0][0] > high_watermark:
            return
        n = bisect.bisect_right(waiters, high_watermark, key=_required)
        for _, _, fut in waiters[:n]:
            if not fut.done():
                fut.set_result(True)
        if n == len(waiters):
            del self._waiters[key]
        else:
            del waiters[:n]

    def fail(self, topic: str, partition: int) -> None:
        """Leadership moved away (or the partition was deleted): nobody waits any more."""
        for _, _, fut in self._waiters.pop((topic, partition), ()):
            if not fut.done():
                fut.set_result(False)

    def fail_all(self) -> None:
        waiters, self._waiters = self._waiters, {}
        for group in waiters.values():
            for _, _, fut in group:
                if not fut.done():
                    fut.set_result(False)

    def waiting(self) -> int:
        """Waiters not completed yet (metrics, tests)."""
        return sum(1 for g in self._waiters.values() for w in g if not w[2].done())


def _required(entry: tuple[int, int, asyncio.Future[bool]]) -> int:
    return entry[0]


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
