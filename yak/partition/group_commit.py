"""Group commit for `write.caching=false`: acks=all waits until its records are fsynced,
and concurrent waiters share the fsync jobs.

Why its own part: durability is a step of the delayed produce (after replication), with
its own state (one job per partition in flight, the waiters behind it) and its own
threads; the append path only asks for a future (`sync`) and awaits it with the high
watermark's. The fsync runs in the ReplicaManager's io threads, never on the event loop.

At most one fsync job per partition is in the io threads; requests arriving while it
runs wait for the next one, which then covers everything appended meanwhile. So a burst
of pipelined acks=all produces costs one thread hand-off per fsync, not one per request.
A failed fsync fails exactly the waiters it covered.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from yak.errors import KafkaStorageError

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from yak.partition.partition import Partition

__all__ = ["GroupCommit"]


class _SyncState:
    __slots__ = ("waiters", "running")

    def __init__(self) -> None:
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.running = False


class GroupCommit:
    """Per partition, the fsync job in flight and who waits on it."""

    def __init__(self, io_pool: Executor) -> None:
        self._io_pool = io_pool
        self._syncs: dict[Partition, _SyncState] = {}

    def sync(self, p: Partition, offset: int) -> asyncio.Future[None]:
        """A future done once `p` is durable up to `offset` (fsync off the event loop)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        st = self._syncs.get(p)
        if st is None:
            st = self._syncs[p] = _SyncState()
        st.waiters.append((offset, fut))
        if not st.running:
            self._start_sync(loop, p, st)
        return fut

    def _start_sync(self, loop: asyncio.AbstractEventLoop, p: Partition, st: _SyncState
                    ) -> None:
        target = max(o for o, _ in st.waiters)
        try:
            job = loop.run_in_executor(self._io_pool, p.log.sync, target)
        except RuntimeError as e:  # the io threads are shut down: the broker is stopping
            for _, fut in st.waiters:
                if not fut.done():
                    fut.set_exception(KafkaStorageError(f"not synced: {e}"))
            st.waiters = []
            self._syncs.pop(p, None)
            return
        st.running = True
        job.add_done_callback(lambda j: self._sync_done(loop, p, st, target, j))

    def _sync_done(self, loop: asyncio.AbstractEventLoop, p: Partition, st: _SyncState,
                   target: int, job: asyncio.Future[None]) -> None:
        st.running = False
        exc = None if not job.cancelled() else asyncio.CancelledError()
        if exc is None:
            exc = job.exception()
        later: list[tuple[int, asyncio.Future[None]]] = []
        for offset, fut in st.waiters:
            if fut.done():
                continue  # given up on (request timeout)
            if offset > target:
                later.append((offset, fut))
            elif exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(None)
        st.waiters = later
        if later:
            self._start_sync(loop, p, st)
        elif not later and self._syncs.get(p) is st:
            del self._syncs[p]
