"""The partition layer on real logs: leadership, epochs, the high watermark, purgatories.

No broker and no sockets: a real LogManager in a tmp dir under a ReplicaManager, driven the
way handlers and the controller drive it. (The same paths are exercised over the wire with
real clients by tests/broker and tests/group.)
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from yak.clock import ManualClock
from yak.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from yak.partition import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    AppendOrigin,
    FetchIsolation,
    FetchParams,
    FetchPartition,
    PartitionState,
    ReplicaManager,
)
from yak.protocol.records import Record, build_batch, read_header
from yak.storage import LogConfig, LogManager

ME = 1
TID = uuid.uuid4()


def batch(n: int = 1, ts: int | None = None) -> memoryview:
    now = int(time.time() * 1000) if ts is None else ts
    return memoryview(build_batch([Record(b"k", b"v%d" % i, now) for i in range(n)]))


@pytest.fixture
def rm(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
    logs.startup()
    manager = ReplicaManager(ME, logs)
    yield manager
    manager.io_pool.shutdown(wait=True)
    logs.shutdown()


async def until(cond: Callable[[], bool], what: str, rounds: int = 1000) -> None:
    """Let the event loop run until `cond()` holds: synchronisation on the condition
    itself, never on a wall-clock sleep."""
    for _ in range(rounds):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


def lead(rm: ReplicaManager, topic: str = "t", partition: int = 0, epoch: int = 0,
         replicas: tuple[int, ...] = (ME,), isr: tuple[int, ...] | None = None,
         config: LogConfig | None = None) -> None:
    state = PartitionState(replicas, isr if isr is not None else replicas, ME, epoch, epoch)
    rm.apply_partition_state(topic, partition, TID, state, config or LogConfig())


def append(rm: ReplicaManager, acks: int = 1, topic: str = "t", n: int = 1,
           timeout_ms: int = 5000, origin: AppendOrigin = AppendOrigin.CLIENT,
           ts: int | None = None) -> object:
    (r,) = asyncio.run(rm.append_records([(topic, 0, batch(n, ts))], acks, origin, timeout_ms))
    return r


def fetch(rm: ReplicaManager, offset: int = 0, epoch: int = -1, max_wait_ms: int = 0,
          min_bytes: int = 0, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
          topic: str = "t") -> object:
    params = FetchParams(max_wait_ms, min_bytes, 1 << 20, isolation)
    (r,) = asyncio.run(rm.fetch_messages(params, [FetchPartition(topic, 0, offset, 1 << 20,
                                                                 epoch)]))
    return r


def test_leader_appends_stamp_its_epoch_and_move_the_high_watermark(rm: ReplicaManager) -> None:
    lead(rm, epoch=3)
    r = append(rm, n=4)
    assert (r.error, r.info.base_offset, r.info.last_offset, r.info.record_count) == (0, 0, 3, 4)
    p = rm.get_partition("t", 0)
    assert p.high_watermark == p.log_end_offset == 4  # one broker: the ISR is the leader
    got = fetch(rm)
    assert got.error == 0 and got.high_watermark == 4
    data = b"".join(bytes(b) for b in got.buffers)
    assert read_header(data).partition_leader_epoch == 3


def test_current_leader_epoch_is_checked_in_one_place(rm: ReplicaManager) -> None:
    lead(rm, epoch=5)
    append(rm)
    assert fetch(rm, epoch=4).error == ErrorCode.fenced_leader_epoch
    assert fetch(rm, epoch=6).error == ErrorCode.unknown_leader_epoch
    assert fetch(rm, epoch=5).error == 0 and fetch(rm, epoch=-1).error == 0
    with pytest.raises(FencedLeaderEpochError):
        rm.fetch_offset_for_timestamp("t", 0, LATEST_TIMESTAMP, FetchIsolation.HIGH_WATERMARK, 4)
    with pytest.raises(UnknownLeaderEpochError):
        rm.fetch_offset_for_timestamp("t", 0, LATEST_TIMESTAMP, FetchIsolation.HIGH_WATERMARK, 9)


def test_a_follower_refuses_what_only_a_leader_serves(rm: ReplicaManager) -> None:
    rm.apply_partition_state("t", 0, TID, PartitionState((2, ME), (2, ME), 2, 1, 1), LogConfig())
    assert append(rm).error == ErrorCode.not_leader_or_follower
    assert fetch(rm).error == ErrorCode.not_leader_or_follower
    with pytest.raises(NotLeaderOrFollowerError):
        rm.delete_records("t", 0, 0)
    # Then it becomes leader with a newer epoch, and serves.
    lead(rm, epoch=2, replicas=(2, ME), isr=(ME,))
    assert append(rm).error == 0


def test_older_partition_states_are_ignored(rm: ReplicaManager) -> None:
    lead(rm, epoch=5)
    rm.apply_partition_state("t", 0, TID, PartitionState((2,), (2,), 2, 4, 4), LogConfig())
    p = rm.get_partition("t", 0)
    assert p.is_leader and p.leader_epoch == 5


def test_acks_all_waits_for_the_isr_then_completes(rm: ReplicaManager) -> None:
    """HW = min LEO over the ISR: with a follower in the ISR, acks=all waits in the
    produce purgatory until the follower has the records; acks=1 does not wait."""
    lead(rm, replicas=(ME, 2))
    assert append(rm, acks=1).error == 0
    p = rm.get_partition("t", 0)
    assert p.high_watermark == 0 and p.log_end_offset == 1
    assert append(rm, acks=-1, timeout_ms=200).error == ErrorCode.request_timed_out

    async def produce_then_replicate() -> tuple[int, int]:
        task = asyncio.ensure_future(rm.append_records([("t", 0, batch())], -1,
                                                       AppendOrigin.CLIENT, 30_000))
        await until(lambda: rm.produce_purgatory.waiting() == 1, "the produce is parked")
        assert not task.done()
        p.update_follower_fetch_state(2, p.log_end_offset)  # the follower caught up
        (r,) = await asyncio.wait_for(task, 10)
        return r.error, r.info.base_offset

    assert asyncio.run(produce_then_replicate()) == (0, 2)
    assert p.high_watermark == 3 and rm.produce_purgatory.waiting() == 0


def test_min_insync_replicas_refuses_acks_all_before_writing(rm: ReplicaManager) -> None:
    lead(rm, replicas=(ME, 2), isr=(ME,), config=LogConfig(min_insync_replicas=2))
    r = append(rm, acks=-1)
    assert r.error == ErrorCode.not_enough_replicas
    assert rm.get_partition("t", 0).log_end_offset == 0  # nothing was written
    assert append(rm, acks=1).error == 0


def test_clients_may_not_append_to_internal_topics(rm: ReplicaManager) -> None:
    lead(rm, topic="__consumer_offsets")
    r = append(rm, topic="__consumer_offsets")
    assert r.error == ErrorCode.invalid_topic_exception
    assert append(rm, topic="__consumer_offsets", origin=AppendOrigin.COORDINATOR).error == 0


def test_unknown_partitions_and_bad_acks(rm: ReplicaManager) -> None:
    assert append(rm, topic="nope").error == ErrorCode.unknown_topic_or_partition
    assert fetch(rm, topic="nope").error == ErrorCode.unknown_topic_or_partition
    with pytest.raises(UnknownTopicOrPartitionError):
        rm.delete_records("nope", 0, 0)
    lead(rm)
    assert append(rm, acks=2).error == ErrorCode.invalid_required_acks
    assert rm.get_partition("t", 0).log_end_offset == 0


def test_out_of_range_fetch_reports_the_offsets_to_reset_to(rm: ReplicaManager) -> None:
    lead(rm)
    append(rm, n=10)
    r = fetch(rm, offset=1000)
    assert (r.error, r.high_watermark, r.log_start_offset) == (ErrorCode.offset_out_of_range,
                                                               10, 0)


def test_fetch_long_poll_is_woken_by_an_append(rm: ReplicaManager) -> None:
    lead(rm)

    async def run() -> tuple[int, int]:
        params = FetchParams(30_000, 1, 1 << 20)
        task = asyncio.ensure_future(rm.fetch_messages(params, [FetchPartition("t", 0, 0, 1 << 20)]))
        await until(lambda: rm.fetch_purgatory.waiting() == 1, "the fetch is parked")
        assert not task.done()
        await rm.append_records([("t", 0, batch(2))], 1)
        (r,) = await asyncio.wait_for(task, 10)  # far below max_wait: the append woke it
        return r.error, r.size

    error, size = asyncio.run(run())
    assert error == 0 and size > 0


def test_list_offsets_and_their_epochs(rm: ReplicaManager) -> None:
    lead(rm, epoch=0)
    append(rm, n=2)  # offsets 0-1 in epoch 0
    lead(rm, epoch=1)
    ts = int(time.time() * 1000) + 60_000
    asyncio.run(rm.append_records([("t", 0, batch(3, ts=ts))], 1))  # offsets 2-4, epoch 1
    hw = FetchIsolation.HIGH_WATERMARK
    assert rm.fetch_offset_for_timestamp("t", 0, LATEST_TIMESTAMP, hw) == (5, -1, 1)
    assert rm.fetch_offset_for_timestamp("t", 0, EARLIEST_TIMESTAMP, hw) == (0, -1, 0)
    assert rm.fetch_offset_for_timestamp("t", 0, ts, hw) == (2, ts, 1)
    assert rm.fetch_offset_for_timestamp("t", 0, ts + 1, hw) == (-1, -1, -1)


def test_delete_records_only_below_the_high_watermark(rm: ReplicaManager) -> None:
    lead(rm, replicas=(ME, 2))
    append(rm, n=5)
    p = rm.get_partition("t", 0)
    p.update_follower_fetch_state(2, 3)
    assert p.high_watermark == 3
    with pytest.raises(OffsetOutOfRangeError):
        rm.delete_records("t", 0, 4)
    assert rm.delete_records("t", 0, -1) == 3  # -1: up to the high watermark
    assert p.log_start_offset == 3


def test_stopping_a_partition_deletes_its_log(rm: ReplicaManager) -> None:
    lead(rm)
    append(rm)
    assert rm.has_local_log("t", 0)
    rm.stop_partition("t", 0, delete=True)
    assert rm.get_partition("t", 0) is None and not rm.has_local_log("t", 0)
    assert rm.delete_stray_logs(set()) == []


def test_describe_log_dirs_sizes_hosted_partitions(rm: ReplicaManager) -> None:
    lead(rm)
    append(rm, n=3)
    d = rm.describe_log_dirs(None)
    assert d.topics["t"][0][0] == 0 and d.topics["t"][0][1] > 0
    assert d.total_bytes > 0 and rm.describe_log_dirs({"other": [0]}).topics == {}


def test_replication_appends_go_to_followers_with_the_leaders_offsets(rm: ReplicaManager) -> None:
    rm.apply_partition_state("t", 0, TID, PartitionState((2, ME), (2, ME), 2, 3, 3), LogConfig())
    copied = memoryview(build_batch([Record(b"k", b"v")], base_offset=0, partition_leader_epoch=3))

    async def replicate() -> object:
        (r,) = await rm.append_records([("t", 0, copied)], -1, AppendOrigin.REPLICATION)
        return r

    r = asyncio.run(replicate())
    assert r.error == 0 and (r.info.base_offset, r.info.record_count) == (0, 1)
    p = rm.get_partition("t", 0)
    assert p.log_end_offset == 1 and p.high_watermark == 0  # a follower's HW is the fetcher's
    lead(rm, epoch=4, replicas=(2, ME), isr=(ME,))
    assert asyncio.run(replicate()).error == ErrorCode.not_leader_or_follower


def test_log_maintenance_runs_at_the_wall_clock_it_is_given(tmp_path: Path) -> None:
    """Retention and time-based rolls are judged at the ReplicaManager's `wall_clock`,
    not at the system's: with a manual clock, nothing expires until the test moves it."""
    logs = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
    logs.startup()
    start = int(time.time() * 1000)
    wall = ManualClock(start)
    manager = ReplicaManager(ME, logs, wall_clock=wall)
    hour = 3_600_000
    lead(manager, config=LogConfig(segment_ms=hour, retention_ms=hour))
    try:
        assert append(manager, n=3, ts=start).error == 0
        p = manager.get_partition("t", 0)
        asyncio.run(manager.maintenance_pass())
        assert p.log_start_offset == 0  # an hour has not passed on the given clock
        wall.advance(2 * hour)
        asyncio.run(manager.maintenance_pass())  # rolls the segment, then retention drops it
        assert p.log_start_offset == 3 and p.log_end_offset == 3
    finally:
        manager.io_pool.shutdown(wait=True)
        logs.shutdown()
