"""How a connection's pipelined requests wait for each other and start without a task
(issue 28; used by `yak.broker.connection`).

- `finished`: wait for the request before this one to end, however it ends, with one
  future and one callback (`asyncio.shield` built two futures and two closures per wait).
- `resumed`: a request whose first step the connection ran inline (Python 3.11 has no
  eager tasks) goes on in a task from where it stopped.
"""

from __future__ import annotations

import asyncio
import functools
import types
import typing
from collections.abc import Coroutine, Generator
from typing import Any


async def finished(task: asyncio.Task[int]) -> None:
    """Wait for another request's task to end however it ends; only a cancellation of the
    waiter itself propagates (and never reaches `task`). One future and one callback:
    `asyncio.shield` built two futures and two closures per wait (issue 28)."""
    if task.done():
        return
    waiter: asyncio.Future[None] = task.get_loop().create_future()
    task.add_done_callback(functools.partial(_set_done, waiter))
    await waiter


@types.coroutine
def resumed(coro: Coroutine[Any, Any, int],
             awaited: Any) -> Generator[Any, None, int]:
    """`coro` from where its first step, run by the caller, stopped: it awaits `awaited`
    (what it yielded: a future, or None for a bare yield). This hands that to the task,
    then whatever the task delivers back (a cancellation) to `coro`, and once that first
    wait is over the task drives `coro` itself (`yield from`)."""
    while True:
        try:
            yield awaited
        except BaseException as e:  # noqa: BLE001 (delivered as the task would have)
            try:
                awaited = coro.throw(e)
            except StopIteration as stop:
                return typing.cast(int, stop.value)
            continue
        return (yield from coro)  # type: ignore[misc]


def _set_done(waiter: asyncio.Future[None], _task: asyncio.Task[int]) -> None:
    if not waiter.done():
        waiter.set_result(None)
