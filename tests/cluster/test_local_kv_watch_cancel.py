"""A local store's watch ends when its consumer is cancelled, even when the cancel comes
just as an event arrives (Python 3.11's `asyncio.wait_for` drops a cancel that lands
after the awaited get completed: the watch then ran on, and `PrefixView.stop()`, awaiting
it, hung a full-suite run's test for its 300 s timeout)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from yak.cluster.etcd import WatchResponse
from yak.cluster.local_kv import LocalKV


def test_a_cancel_landing_with_an_event_ends_the_watch(tmp_path: Path) -> None:
    async def body() -> list[int]:
        kv = await LocalKV(tmp_path / "kv.json").open()
        stuck = []
        for spins in range(8):  # where in the event's hand-over the cancel lands
            for _ in range(5):
                watch = kv.watch("/w/", prefix=True)

                async def consume(w=watch) -> None:  # noqa: ANN001
                    async for _resp in w:
                        pass

                task = asyncio.create_task(consume())
                await asyncio.sleep(0.01)  # the watch is parked in its queue's get
                assert watch._queue is not None
                watch._queue.put_nowait(WatchResponse(kv.revision + 1, []))
                for _ in range(spins):
                    await asyncio.sleep(0)
                task.cancel()
                done, _ = await asyncio.wait({task}, timeout=3)
                if not done:
                    stuck.append(spins)
                    watch.close()
                    await asyncio.wait({task}, timeout=3)
        await kv.aclose()
        return stuck

    assert asyncio.run(body()) == []
