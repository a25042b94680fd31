"""A small asyncio TCP proxy that can cut, heal and delay one link, for fault drills.

Put it between two processes (a follower and its leader, a broker and etcd) and point one
side at the proxy's address. Why not `tc`/`ip netns`: those need root and a kernel with the
right modules (this machine has no netem); a proxy works anywhere, per link.

- `cut("drop")`: a silent partition. Bytes in both directions are discarded, connections stay
  open, new ones are accepted and go nowhere, so peers see timeouts, not errors. The streams
  that lost bytes can never be resumed (their framing is broken), so `heal()` closes them and
  the peers reconnect, as they would after their TCP connections timed out.
- `cut("reset")`: every connection is closed now and new ones are closed on accept.
- `delay(ms)`: each chunk is forwarded `ms` later, order kept.

`NetProxy` runs on the caller's event loop; `ThreadedNetProxy` runs one in a background
thread for synchronous tests and harnesses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine
from typing import Any, Literal

__all__ = ["NetProxy", "ThreadedNetProxy"]

log = logging.getLogger(__name__)

CHUNK = 256 * 1024


class _Link:
    """One proxied connection: client <-> proxy <-> target."""

    def __init__(self, proxy: NetProxy, client_r: asyncio.StreamReader,
                 client_w: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.client_r = client_r
        self.client_w = client_w
        self.target_w: asyncio.StreamWriter | None = None
        self.poisoned = False  # lost bytes while cut: must be closed on heal
        self.tasks: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        p = self.proxy
        try:
            if p.mode == "drop":
                self.poisoned = True
                # Partitioned: nothing reaches the target; swallow what the client sends.
                await self._drain_forever(self.client_r)
                return
            target_r, self.target_w = await asyncio.open_connection(*p.target)
            self.tasks = [
                asyncio.create_task(self._pump(self.client_r, self.target_w)),
                asyncio.create_task(self._pump(target_r, self.client_w)),
            ]
            await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        except OSError as e:
            log.debug("proxy %s -> %s: %s", p.address, p.target, e)
        finally:
            self.close()

    async def _drain_forever(self, reader: asyncio.StreamReader) -> None:
        while await reader.read(CHUNK):
            pass

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        p = self.proxy
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if p.mode == "drop":
                    self.poisoned = True
                    continue
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if p.mode == "drop":
                    self.poisoned = True
                    continue
                p.bytes_forwarded += len(data)
                await queue.put((time.monotonic() + p.delay_s, data))
                if sender.done():
                    break
            # Let queued bytes out before the half-close propagates.
            while not queue.empty() and not sender.done():
                await asyncio.sleep(0.001)
        finally:
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender

    def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        for w in (self.client_w, self.target_w):
            if w is not None:
                with contextlib.suppress(Exception):
                    w.close()
        self.proxy._links.discard(self)


class NetProxy:
    """Listens on `listen` (port 0: any free port) and forwards to `target`."""

    def __init__(self, target: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)
                 ) -> None:
        self.target = target
        self.listen = listen
        self.mode: Literal["open", "drop", "reset"] = "open"
        self.delay_s = 0.0
        self.bytes_forwarded = 0
        self.connections = 0
        self._links: set[_Link] = set()
        self._server: asyncio.base_events.Server | None = None
        self._link_tasks: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None, "not started"
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def port(self) -> int:
        return self.address[1]

    async def start(self) -> NetProxy:
        self._server = await asyncio.start_server(self._accept, *self.listen)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        pending = [t for link in self._links for t in link.tasks] + list(self._link_tasks)
        for link in list(self._links):
            link.close()
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def cut(self, mode: Literal["drop", "reset"] = "drop") -> None:
        self.mode = mode
        if mode == "reset":
            for link in list(self._links):
                link.close()
        else:
            for link in self._links:
                link.poisoned = True

    def heal(self) -> None:
        self.mode = "open"
        for link in list(self._links):
            if link.poisoned:
                link.close()

    def delay(self, ms: float) -> None:
        self.delay_s = max(0.0, ms / 1000)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.mode == "reset":
            writer.close()
            return
        link = _Link(self, reader, writer)
        self._links.add(link)
        task = asyncio.current_task()
        if task is not None:
            self._link_tasks.add(task)
        try:
            await link.run()
        finally:
            if task is not None:
                self._link_tasks.discard(task)


class ThreadedNetProxy:
    """A NetProxy on its own event loop thread, with the same controls, callable from
    synchronous code (tests, the local-cluster harness)."""

    def __init__(self, target: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)
                 ) -> None:
        self.proxy = NetProxy(target, listen)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"netproxy->{target[0]}:{target[1]}")
        self._thread.start()
        self._call(self.proxy.start())

    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _do(self, fn: Any, *args: Any) -> None:
        async def run() -> None:
            fn(*args)
        self._call(run())

    @property
    def port(self) -> int:
        return self.proxy.port

    @property
    def address(self) -> tuple[str, int]:
        return self.proxy.address

    def cut(self, mode: Literal["drop", "reset"] = "drop") -> None:
        self._do(self.proxy.cut, mode)

    def heal(self) -> None:
        self._do(self.proxy.heal)

    def delay(self, ms: float) -> None:
        self._do(self.proxy.delay, ms)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self._call(self.proxy.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> ThreadedNetProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
