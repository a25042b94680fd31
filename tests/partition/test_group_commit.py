"""write.caching=false on real logs: acks=all waits for the fsync, and concurrent waiters
share fsync jobs (at most one per partition in the io threads; who arrives meanwhile is
covered by the next). A failed fsync fails exactly the waiters it covered."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path

from yak.errors import ErrorCode
from yak.partition import AppendOrigin, PartitionState, ReplicaManager
from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager


def _setup(tmp_path: Path) -> tuple[LogManager, ReplicaManager]:
    lm = LogManager(str(tmp_path / "d"), LogConfig(), start_cleaner=False)
    lm.startup()
    rm = ReplicaManager(1, lm)
    rm.apply_partition_state("t", 0, uuid.uuid4(), PartitionState((1,), (1,), 1, 0, 0),
                             LogConfig.from_props({"write.caching": "false"}))
    return lm, rm


def test_concurrent_acks_all_share_fsync_jobs(tmp_path: Path) -> None:
    lm, rm = _setup(tmp_path)
    p = rm.get_partition("t", 0)
    real_sync = p.log.sync
    calls = []
    concurrent = [0, 0]
    lock = threading.Lock()

    def slow_sync(offset: int) -> None:
        with lock:
            concurrent[0] += 1
            concurrent[1] = max(concurrent[1], concurrent[0])
        calls.append(offset)
        # The point of the test: a slow disk, so requests pile up behind the fsync in flight.
        time.sleep(0.02)
        real_sync(offset)
        with lock:
            concurrent[0] -= 1

    p.log.sync = slow_sync

    async def body() -> list[int]:
        async def one(i: int) -> int:
            # The point of the test, not synchronisation: requests arrive spread over
            # ~100 ms, so most of them arrive while a (20 ms) fsync is in flight.
            await asyncio.sleep(i * 0.002)
            batch = memoryview(build_batch([Record(b"k", b"v%d" % i)]))
            (r,) = await rm.append_records([("t", 0, batch)], -1, AppendOrigin.CLIENT, 10_000)
            return r.error

        return list(await asyncio.gather(*(one(i) for i in range(50))))

    try:
        errors = asyncio.run(body())
        assert errors == [0] * 50
        assert concurrent[1] == 1  # one fsync job at a time for the partition
        assert len(calls) < 25, calls  # ~one per 20 ms window, not one per request
        assert calls == sorted(calls) and calls[-1] == 50
    finally:
        rm.io_pool.shutdown(wait=True)
        lm.shutdown()


def test_a_failed_fsync_fails_the_waiters_it_covered(tmp_path: Path) -> None:
    lm, rm = _setup(tmp_path)
    p = rm.get_partition("t", 0)
    real_sync = p.log.sync
    failures = [1]

    def flaky_sync(offset: int) -> None:
        if failures[0]:
            failures[0] -= 1
            raise OSError(5, "Input/output error")
        real_sync(offset)

    p.log.sync = flaky_sync

    async def body() -> tuple[int, int]:
        batch = memoryview(build_batch([Record(b"k", b"v")]))
        (r1,) = await rm.append_records([("t", 0, batch)], -1, AppendOrigin.CLIENT, 5000)
        (r2,) = await rm.append_records([("t", 0, batch)], -1, AppendOrigin.CLIENT, 5000)
        return r1.error, r2.error

    try:
        assert asyncio.run(body()) == (ErrorCode.kafka_storage_error, ErrorCode.none)
    finally:
        rm.io_pool.shutdown(wait=True)
        lm.shutdown()
