"""Waiting on a condition, never on the clock alone.

A test that sleeps "long enough" for something to happen is racy on a loaded machine
(too short) and slow on an idle one (too long). These helpers poll the real condition
until a deadline and fail with a sentence naming what never happened and the last value
seen, so a timeout reads as a finding rather than a bare `assert False`.

    wait_until(lambda: log.high_watermark == 10, 10, "HW 10")            # threads, subprocesses
    await await_until(lambda: reg.is_registered(), 5, "registered")      # on an event loop
    await await_until(lambda: client.get(key), 5, "the key")             # an async condition

A sleep that is the point of a test (letting a timeout elapse on purpose, pacing a
producer, holding a window open to show that nothing happens in it) is not a wait, and
stays a plain sleep with a comment that says so.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def _failure(timeout: float, what: str, last: object, error: BaseException | None) -> str:
    why = f"; last error: {error!r}" if error is not None else f"; last value: {last!r}"
    return f"timed out after {timeout:g} s waiting for {what}{why}"


def wait_until(cond: Callable[[], T], timeout: float, what: str, every: float = 0.05,
               ignore: tuple[type[BaseException], ...] = ()) -> T:
    """Poll `cond` until it returns something truthy, and return that; AssertionError
    naming `what` once `timeout` seconds pass. Exceptions of the `ignore` types count as
    not yet (a broker still starting refuses connections); others propagate."""
    deadline = time.monotonic() + timeout
    last: object = None
    error: BaseException | None = None
    while True:
        try:
            last, error = cond(), None
            if last:
                return last  # type: ignore[return-value]
        except ignore as e:
            error = e
        if time.monotonic() > deadline:
            raise AssertionError(_failure(timeout, what, last, error))
        time.sleep(every)  # the back-off between polls, not the synchronisation


async def await_until(cond: Callable[[], T | Awaitable[T]], timeout: float, what: str,
                      every: float = 0.02,
                      ignore: tuple[type[BaseException], ...] = ()) -> T:
    """`wait_until` for a test on an event loop: `cond` may be a plain function or return
    an awaitable (an etcd get, a request), and the loop keeps running between polls."""
    deadline = time.monotonic() + timeout
    last: object = None
    error: BaseException | None = None
    while True:
        try:
            got = cond()
            if inspect.isawaitable(got):
                got = await got
            last, error = got, None
            if last:
                return last  # type: ignore[return-value]
        except ignore as e:
            error = e
        if time.monotonic() > deadline:
            raise AssertionError(_failure(timeout, what, last, error))
        await asyncio.sleep(every)  # the back-off between polls, not the synchronisation


def wait_steady(read: Callable[[], T], hold: float, timeout: float, what: str,
                every: float = 0.1) -> T:
    """Poll `read` until it gives a truthy value that then stays the same for `hold`
    seconds, and return it: for a flow that must start and then stall (a server that stops
    sending to a client that reads nothing). A test that then holds a further window open
    to show the value does not move is checking, not waiting."""
    deadline = time.monotonic() + timeout
    value, since = read(), time.monotonic()
    while not value or time.monotonic() - since < hold:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} to"
                                 f" settle for {hold:g} s; last value: {value!r}")
        time.sleep(every)  # the back-off between polls, not the synchronisation
        now = read()
        if now != value:
            value, since = now, time.monotonic()
    return value


async def await_steady(read: Callable[[], T], hold: float, timeout: float, what: str,
                       every: float = 0.1) -> T:
    """`wait_steady` on an event loop: the loop runs between polls."""
    deadline = time.monotonic() + timeout
    value, since = read(), time.monotonic()
    while not value or time.monotonic() - since < hold:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} to"
                                 f" settle for {hold:g} s; last value: {value!r}")
        await asyncio.sleep(every)  # the back-off between polls, not the synchronisation
        now = read()
        if now != value:
            value, since = now, time.monotonic()
    return value
