"""The resumable etcd watch: one gateway stream at a time, re-opened from the next
revision after a drop, a failover or an idle timeout, with a snapshot after a compaction.

Why a module of its own: the transport (`yak.cluster.etcd.EtcdClient`) sends one request
and reads one answer; a watch is a long-lived loop over its streams with its own recovery
rules (which revision to resume from, when to re-read the range). It reaches the client
only through `_order()`, `_watch_stream()` and `range()`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx

from yak.cluster.etcd_values import (
    EtcdError,
    EtcdUnavailable,
    Event,
    WatchResponse,
    _b64,
    _int,
    prefix_range_end,
)

if TYPE_CHECKING:
    from yak.cluster.etcd import EtcdClient

__all__ = ["Watch"]

log = logging.getLogger("yak.cluster.etcd")  # the logger name the watch always had


class Watch:
    """A resumable watch. Iterate it (`async for resp in watch`); `close()` ends it.

    After a dropped stream (member died, idle timeout, failover) it re-opens from the revision
    after the last one delivered, so no event is missed or repeated. If that revision was
    compacted meanwhile, it re-reads the range and yields a WatchResponse with a snapshot.
    It keeps retrying while etcd is unreachable (a watcher has nothing better to do); bound
    any wait on it from outside.
    """

    def __init__(self, client: EtcdClient, key: str, *, prefix: bool, start_revision: int,
                 idle_timeout: float) -> None:
        self._client = client
        self.key = key
        self.prefix = prefix
        self.next_revision = start_revision  # 0 = "from now"
        self.idle_timeout = idle_timeout
        self.reconnects = 0
        self._closed = False

    def close(self) -> None:
        self._closed = True

    def __aiter__(self) -> AsyncIterator[WatchResponse]:
        return self._run()

    async def _snapshot(self) -> WatchResponse:
        r = await self._client.range(self.key, prefix=self.prefix)
        self.next_revision = r.revision + 1
        return WatchResponse(r.revision, [], r.kvs)

    async def _run(self) -> AsyncIterator[WatchResponse]:
        backoff = 0.05
        attempt = 0
        while not self._closed:
            create: dict[str, Any] = {"key": _b64(self.key), "progress_notify": True}
            if self.prefix:
                create["range_end"] = _b64(prefix_range_end(self.key))
            if self.next_revision:
                create["start_revision"] = str(self.next_revision)
            order = self._client._order()
            idx = order[attempt % len(order)]
            try:
                async for msg in self._client._watch_stream(idx, create, self.idle_timeout):
                    if "error" in msg and "result" not in msg:
                        err = msg["error"]
                        text = err.get("message", err) if isinstance(err, dict) else err
                        raise EtcdUnavailable(f"etcd watch: {text}")
                    res = msg.get("result", {})
                    hdr_rev = _int(res.get("header", {}), "revision")
                    if res.get("canceled"):
                        compact = _int(res, "compact_revision")
                        if compact:
                            log.info("etcd watch on %s: revision %d compacted (oldest %d);"
                                     " re-reading", self.key, self.next_revision, compact)
                            snap = await self._snapshot()
                            yield snap
                            break
                        raise EtcdUnavailable(
                            f"etcd watch canceled: {res.get('cancel_reason') or 'no reason'}")
                    backoff = 0.05
                    if res.get("created"):
                        if not self.next_revision:
                            self.next_revision = hdr_rev + 1
                        continue
                    events = [Event.from_json(e) for e in res.get("events", [])]
                    if events:
                        self.next_revision = events[-1].kv.mod_revision + 1
                        yield WatchResponse(hdr_rev, events)
                    elif hdr_rev >= self.next_revision:  # progress notification
                        self.next_revision = hdr_rev + 1
                    if self._closed:
                        return
            except (httpx.TransportError, httpx.TimeoutException, EtcdUnavailable,
                    json.JSONDecodeError) as e:
                if not isinstance(e, httpx.ReadTimeout):
                    log.debug("etcd watch on %s via %s dropped: %s", self.key,
                              self._client.endpoints[idx], e)
                    attempt += 1
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)
            except EtcdError as e:
                log.warning("etcd watch on %s: %s; retrying", self.key, e)
                attempt += 1
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
            self.reconnects += 1
