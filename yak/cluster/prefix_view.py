"""A live local copy of every etcd key under a prefix (brokers, partitions, the controller).

Read once with a range, then follow a watch from the revision after that read, so no change
is missed between the two; after a compaction the watch delivers a fresh snapshot, which
replaces the copy. Owners get `on_change(view, changed_keys)` after each batch, on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from yak.cluster.etcd import KeyValue
from yak.cluster.kv import KVClient

__all__ = ["PrefixView"]

log = logging.getLogger(__name__)


class PrefixView:
    def __init__(self, client: KVClient, prefix: str, *, exact: bool = False,
                 on_change: Callable[[PrefixView, set[str]], None] | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.exact = exact  # one key rather than a prefix
        self.items: dict[str, KeyValue] = {}
        self.revision = 0
        self._on_change = on_change
        self._changed = asyncio.Event()  # replaced after every batch; waiters hold the old one
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        r = await self.client.range(self.prefix, prefix=not self.exact)
        self.items = {kv.key: kv for kv in r.kvs}
        self.revision = r.revision
        self._task = asyncio.get_running_loop().create_task(
            self._follow(r.revision + 1), name=f"watch {self.prefix}")
        self._notify(set(self.items))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def wait_for(self, predicate: Callable[[PrefixView], bool], timeout: float) -> None:
        """Until `predicate(self)` holds; TimeoutError after `timeout` seconds."""
        async with asyncio.timeout(timeout):
            while not predicate(self):
                await self._changed.wait()

    def _notify(self, changed: set[str]) -> None:
        if self._on_change is not None and changed:
            try:
                self._on_change(self, changed)
            except Exception:  # an owner's bug must not stop the watch
                log.exception("on_change for %s failed", self.prefix)
        fired, self._changed = self._changed, asyncio.Event()
        fired.set()

    async def _follow(self, start_revision: int) -> None:
        watch = self.client.watch(self.prefix, prefix=not self.exact,
                                  start_revision=start_revision)
        async with contextlib.aclosing(watch.__aiter__()) as stream:  # type: ignore[type-var]
            async for resp in stream:
                changed: set[str] = set()
                if resp.snapshot is not None:
                    new = {kv.key: kv for kv in resp.snapshot}
                    changed = {k for k in set(new) | set(self.items)
                               if new.get(k) != self.items.get(k)}
                    self.items = new
                for ev in resp.events:
                    changed.add(ev.kv.key)
                    if ev.type == "DELETE":
                        self.items.pop(ev.kv.key, None)
                    else:
                        self.items[ev.kv.key] = ev.kv
                self.revision = max(self.revision, resp.revision)
                self._notify(changed)
