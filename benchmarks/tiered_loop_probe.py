"""An event-loop probe for a broker process that benchmarks start (`tiered_produce_ab.py`):
no broker code changes, loaded through a `sitecustomize` that `site_dir()` writes.

- lag: a thread asks the loop to run a callback every 5 ms (`call_soon_threadsafe`, which
  wakes the loop through its self-pipe as a request arriving on a socket does) and records
  how long the loop took to run it, in a histogram of fixed buckets;
- slow steps: every callback the loop runs (`asyncio.Handle._run`) is timed and those over
  5 ms are counted by what ran (a task's coroutine and the line it stopped at, or the
  callback's name): the loop's own long steps, where lag with no slow step is the machine
  (other threads holding the GIL, or no free CPU).

The process writes its cumulative figures to `$YAK_LOOP_PROBE_OUT.<pid>.json` once a
second; a benchmark reads the file before and after a run and subtracts (`delta`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

EDGES_MS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
PERIOD_S = 0.005
SLOW_MS = 5.0

_hist = [0] * (len(EDGES_MS) + 1)
_slow: dict[str, list[float]] = {}  # what ran -> [count, total ms, max ms]
_loop: list[asyncio.AbstractEventLoop] = []


def _record(sent: float) -> None:
    d = (time.perf_counter() - sent) * 1000
    i = 0
    while i < len(EDGES_MS) and d > EDGES_MS[i]:
        i += 1
    _hist[i] += 1


def _name(handle: asyncio.Handle) -> str:
    cb = getattr(handle, "_callback", None)
    task = getattr(cb, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        frame = getattr(coro, "cr_frame", None)
        where = (f" @ {Path(frame.f_code.co_filename).name}:{frame.f_lineno}"
                 if frame is not None else "")
        return f"{getattr(coro, '__qualname__', '?')}{where}"
    return re.sub(r" at 0x[0-9a-f]+", "", getattr(cb, "__qualname__", None) or repr(cb))[:120]


def _pinger(out: str) -> None:
    loop = _loop[0]
    last_write = 0.0
    while not loop.is_closed():
        time.sleep(PERIOD_S)
        try:
            loop.call_soon_threadsafe(_record, time.perf_counter())
        except RuntimeError:
            return
        now = time.monotonic()
        if now - last_write >= 1.0:
            last_write = now
            tmp = f"{out}.{os.getpid()}.tmp"
            Path(tmp).write_text(json.dumps({"edges_ms": EDGES_MS, "hist": _hist,
                                             "slow": _slow}))
            os.replace(tmp, f"{out}.{os.getpid()}.json")


def _start(loop: asyncio.AbstractEventLoop, out: str) -> None:
    if not _loop:
        _loop.append(loop)
        threading.Thread(target=_pinger, args=(out,), daemon=True, name="loop-probe").start()


def install(out: str, asyncio_loop: bool = False) -> None:
    """Ping the main thread's loop once it is set (`asyncio.run` sets it; the broker's is
    uvloop's) and time its callbacks (asyncio's own loop only: uvloop's handles are not
    `asyncio.Handle`s, so under uvloop there are no slow steps, only the lag).
    `asyncio_loop`: the broker gets asyncio's loop instead of uvloop's (a diagnosis run:
    its slow steps are named)."""
    if asyncio_loop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            uvloop.EventLoopPolicy = asyncio.DefaultEventLoopPolicy  # type: ignore[misc]
    set_loop = asyncio.events.set_event_loop

    def set_event_loop(loop: asyncio.AbstractEventLoop | None) -> None:
        set_loop(loop)
        if loop is not None and threading.current_thread() is threading.main_thread():
            _start(loop, out)

    asyncio.events.set_event_loop = set_event_loop
    asyncio.set_event_loop = set_event_loop
    orig = asyncio.events.Handle._run

    def _run(handle: asyncio.Handle) -> None:
        if threading.current_thread() is not threading.main_thread():
            return orig(handle)
        _start(handle._loop, out)  # type: ignore[attr-defined]
        t = time.perf_counter()
        orig(handle)
        d = (time.perf_counter() - t) * 1000
        if d > SLOW_MS:
            s = _slow.setdefault(_name(handle), [0, 0.0, 0.0])
            s[0] += 1
            s[1] += d
            s[2] = max(s[2], d)

    asyncio.events.Handle._run = _run  # type: ignore[method-assign]


def site_dir(tmp: Path, out: Path, asyncio_loop: bool = False) -> Path:
    """A directory for PYTHONPATH whose `sitecustomize` installs the probe in every Python
    process started with it (only the broker's loop callbacks matter; others write files
    under their own pid)."""
    d = tmp / "loop-probe-site"
    d.mkdir(exist_ok=True)
    repo = Path(__file__).resolve().parent.parent
    (d / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(repo)!r})\n"
        f"from benchmarks.tiered_loop_probe import install\n"
        f"install({str(out)!r}, asyncio_loop={asyncio_loop!r})\n")
    return d


def read(out: Path, pid: int) -> dict[str, Any]:
    try:
        return json.loads(Path(f"{out}.{pid}.json").read_text())
    except (OSError, ValueError):
        return {"edges_ms": EDGES_MS, "hist": [0] * (len(EDGES_MS) + 1), "slow": {}}


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What happened between two reads: lag percentiles (a bucket's upper edge), the
    share of pings later than 5 ms and 20 ms, and the slow steps (count, total, max)."""
    hist = [a - b for a, b in zip(after["hist"], before["hist"], strict=True)]
    n = sum(hist) or 1

    def pct(q: float) -> float:
        acc = 0
        for i, c in enumerate(hist):
            acc += c
            if acc >= q * n:
                return EDGES_MS[i] if i < len(EDGES_MS) else float("inf")
        return float("inf")

    slow = {}
    for k, (c, tot, mx) in after["slow"].items():
        c0, t0, _ = before["slow"].get(k, (0, 0.0, 0.0))
        if c > c0:
            slow[k] = [c - c0, round(tot - t0, 1), round(mx, 1)]
    def over(ms: float) -> float:  # the share of pings later than `ms` (an edge), in %
        return round(100 * sum(c for i, c in enumerate(hist) if i and EDGES_MS[i - 1] >= ms)
                     / n, 2)

    return {"pings": n, "lag_p50_ms": pct(0.5), "lag_p99_ms": pct(0.99),
            "lag_p999_ms": pct(0.999), "over_5ms_pct": over(5), "over_20ms_pct": over(20),
            "slow_steps": dict(sorted(slow.items(), key=lambda kv: -kv[1][1])[:8])}
