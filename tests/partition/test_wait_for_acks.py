"""The delayed produce of acks=all (`wait_for_acks`, issue 28): each wait (the produce
purgatory's, the group commit's) is awaited directly, with one timer per request that
expires what is still pending. What the `asyncio.wait` it replaced gave, checked on real
logs under a ReplicaManager: per-partition outcomes in one request, a timeout that answers
on time and leaves no waiter parked, a failed or cancelled fsync job answered as a storage
error (never a hang, never taken for the request's own cancellation), and the request's own
cancellation going through."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from yak.errors import ErrorCode
from yak.partition import AppendOrigin, PartitionState, ReplicaManager
from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager

ME = 1
TID = uuid.uuid4()
NO_CACHE = LogConfig.from_props({"write.caching": "false"})


def batch() -> memoryview:
    return memoryview(build_batch([Record(b"k", b"v", int(time.time() * 1000))]))


@pytest.fixture
def rm(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
    logs.startup()
    manager = ReplicaManager(ME, logs)
    yield manager
    manager.io_pool.shutdown(wait=True)
    logs.shutdown()


def lead(rm: ReplicaManager, partition: int, replicas: tuple[int, ...],
         config: LogConfig | None = None) -> None:
    rm.apply_partition_state("t", partition, TID, PartitionState(replicas, replicas, ME, 0, 0),
                             config or LogConfig())


def test_one_partition_completes_the_other_times_out_on_time(rm: ReplicaManager) -> None:
    lead(rm, 0, (ME, 2))
    lead(rm, 1, (ME, 2))

    async def run() -> tuple[list[int], float]:
        started = time.monotonic()
        task = asyncio.ensure_future(rm.append_records(
            [("t", 0, batch()), ("t", 1, batch())], -1, AppendOrigin.CLIENT, 400))
        await asyncio.sleep(0.05)
        assert rm.produce_purgatory.waiting() == 2
        p0 = rm.get_partition("t", 0)
        p0.update_follower_fetch_state(2, p0.log_end_offset)  # partition 0 replicated
        results = await asyncio.wait_for(task, 10)
        return [r.error for r in results], time.monotonic() - started

    errors, took = asyncio.run(run())
    assert errors == [ErrorCode.none, ErrorCode.request_timed_out]
    assert 0.35 < took < 3.0, took
    assert rm.produce_purgatory.waiting() == 0  # the expired wait was forgotten


def test_fsync_failure_and_replication_timeout_in_one_request(rm: ReplicaManager) -> None:
    """Two waits for one partition (the high watermark, then the fsync): the timeout
    answers first; the failed fsync's exception is consumed, not left unretrieved."""
    lead(rm, 0, (ME, 2), NO_CACHE)

    def broken_sync(offset: int) -> None:
        raise OSError(5, "Input/output error")

    rm.get_partition("t", 0).log.sync = broken_sync  # type: ignore[method-assign]
    (r,) = asyncio.run(rm.append_records([("t", 0, batch())], -1, AppendOrigin.CLIENT, 300))
    assert r.error == ErrorCode.request_timed_out
    assert rm.produce_purgatory.waiting() == 0


@pytest.mark.parametrize("failure", [OSError(5, "Input/output error"),
                                     asyncio.CancelledError()])
def test_a_failed_fsync_job_is_a_storage_error(rm: ReplicaManager,
                                               failure: BaseException) -> None:
    """An fsync job that raised, even CancelledError (a job cancelled under the io
    threads), fails the wait on it: the request answers KAFKA_STORAGE_ERROR at once, it
    is not cancelled and does not wait for its timeout."""
    lead(rm, 0, (ME,), NO_CACHE)

    def broken_sync(offset: int) -> None:
        raise failure

    rm.get_partition("t", 0).log.sync = broken_sync  # type: ignore[method-assign]

    async def run() -> tuple[int, float]:
        started = time.monotonic()
        (r,) = await rm.append_records([("t", 0, batch())], -1, AppendOrigin.CLIENT, 30_000)
        return r.error, time.monotonic() - started

    error, took = asyncio.run(run())
    assert error == ErrorCode.kafka_storage_error
    assert took < 10


def test_the_requests_own_cancellation_goes_through(rm: ReplicaManager) -> None:
    """A request whose connection closed is cancelled while it waits: the cancellation
    propagates (it is not read as a failed wait) and nothing stays parked as pending."""
    lead(rm, 0, (ME, 2))

    async def run() -> bool:
        task = asyncio.ensure_future(rm.append_records(
            [("t", 0, batch())], -1, AppendOrigin.CLIENT, 30_000))
        await asyncio.sleep(0.05)
        assert rm.produce_purgatory.waiting() == 1
        task.cancel()
        try:
            await asyncio.wait_for(task, 5)
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(run())
    assert rm.produce_purgatory.waiting() == 0
