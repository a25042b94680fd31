"""The leader's parked follower fetches and the high watermark (issue 28).

A follower's fetch that parks in the fetch purgatory read nothing because it is at the log
end of its partitions; a high watermark move caused by another follower's fetch appends
nothing, so it wakes the consumers parked on the partition (they read up to the high
watermark) and not that follower, which used to wake, read nothing and park again. New
data still wakes it, and its answer is the one a fetch made at that moment gets. A
follower the leader's replication throttle holds back (KIP-73) may have parked with data
left to read, so a high watermark move still wakes it, as before.

On real logs, the leader a ReplicaManager of tests/partition/test_replication.py's
cluster (the followers' fetches are made by hand, as the replica fetcher sends them); the
leader partition's `read` is counted by wrapping it (it still does the work)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from tests.partition.test_replication import (  # noqa: F401 (the fixture)
    T,
    batch,
    cluster,
    produce,
    run,
    settle,
    start,
    until,
)
from yak.cluster.replication_throttle import RateQuota, ReplicationThrottle
from yak.partition import FetchIsolation, FetchParams, FetchPartition, ReplicaManager


def _follower_fetch(rm: ReplicaManager, replica: int, offset: int,
                    max_wait_ms: int) -> Any:
    want = FetchPartition(T, 0, offset, 1 << 20, 0, 0 if offset else -1, 0)
    params = FetchParams(max_wait_ms, 1, 10 << 20, FetchIsolation.LOG_END,
                         replica_id=replica, replica_epoch=100 + replica)
    return rm.fetch_messages(params, [want])


def _consumer_fetch(rm: ReplicaManager, offset: int, max_wait_ms: int) -> Any:
    want = FetchPartition(T, 0, offset, 1 << 20, 0)
    return rm.fetch_messages(FetchParams(max_wait_ms, 1, 10 << 20), [want])


def count_reads(rm: ReplicaManager) -> list[tuple[int, FetchIsolation]]:
    """Every `Partition.read` of the test partition from now on: (offset, isolation)."""
    p = rm.get_partition(T, 0)
    calls: list[tuple[int, FetchIsolation]] = []
    real = p.read

    def spy(offset: int, *args: Any) -> Any:
        calls.append((offset, args[1]))
        return real(offset, *args)

    p.read = spy  # type: ignore[method-assign]
    return calls


def throttle_all_replicas(leader: ReplicaManager) -> tuple[ReplicationThrottle, list[float]]:
    """The leader throttles every replica's replication (`leader.replication.throttled.
    replicas=*`, 1000 B/s) that is out of the ISR: (the throttle, its quota's clock, a
    one-item list of seconds for a test to move)."""
    now = [0.0]
    throttle = ReplicationThrottle.side(
        "leader", SimpleNamespace(node_id=1, leader_replication_throttled_rate=1000),
        lambda name: SimpleNamespace(configs={"leader.replication.throttled.replicas": "*"}))
    throttle.quota = RateQuota(lambda: 1000, clock=lambda: now[0])
    leader.leader_throttle = throttle
    return throttle, now


def _answer(r: Any) -> tuple[Any, ...]:
    return (r.error, r.high_watermark, r.last_stable_offset, r.log_start_offset, r.size,
            b"".join(bytes(b) for b in r.buffers), r.diverging_epoch, r.current_leader)


def test_a_high_watermark_move_wakes_consumers_not_parked_followers(cluster) -> None:  # noqa: ANN001, F811
    ctl, rms = cluster
    start(ctl, rms)  # ISR (1, 2, 3), min.insync.replicas=2
    leader = rms[1]

    async def body() -> None:
        assert (await produce(leader, 1)).error == 0  # offset 0; the HW waits at 0
        reads = count_reads(leader)
        follower = asyncio.ensure_future(_follower_fetch(leader, 2, 1, 10_000))
        consumer = asyncio.ensure_future(_consumer_fetch(leader, 0, 10_000))
        await until(lambda: leader.fetch_purgatory.waiting() == 2, "both parked")
        # The follower's first pass answers its log end without a read (fetch.py).
        at_log_end = reads.count((1, FetchIsolation.LOG_END))
        # Follower 3 fetches at the log end: the high watermark moves to 1.
        (r3,) = await _follower_fetch(leader, 3, 1, 0)
        assert r3.error == 0 and r3.high_watermark == 1
        await until(consumer.done, "the consumer answered")
        (c,) = consumer.result()
        assert c.error == 0 and c.size > 0 and c.high_watermark == 1
        await settle()
        assert not follower.done()
        # Follower 2 was not woken to read nothing again (it was before: one more read at
        # its log end).
        assert reads.count((1, FetchIsolation.LOG_END)) == at_log_end, reads
        assert leader.fetch_purgatory.waiting() == 1
        # New data wakes it; it answers as a fetch made now does.
        assert (await produce(leader, 1, batch(2))).error == 0
        await until(follower.done, "the follower answered")
        (r2,) = follower.result()
        assert r2.error == 0 and r2.size > 0 and r2.high_watermark == 1
        (again,) = await _follower_fetch(leader, 2, 1, 0)
        assert _answer(again) == _answer(r2)
        assert leader.fetch_purgatory.waiting() == 0

    run(body())


def test_a_throttled_follower_is_still_woken_by_a_high_watermark_move(cluster) -> None:  # noqa: ANN001, F811
    ctl, rms = cluster
    start(ctl, rms, isr=(1, 2))  # 3 is out of the ISR: the throttle applies to it
    leader = rms[1]
    throttle, now = throttle_all_replicas(leader)

    async def body() -> None:
        for _ in range(2):
            assert (await produce(leader, 1)).error == 0
        (r2,) = await _follower_fetch(leader, 2, 2, 0)  # HW 2: 3 is below it, stays out
        assert r2.high_watermark == 2
        assert (await produce(leader, 1)).error == 0  # offset 2; HW 2
        throttle.quota.record(10_000)  # spent: ten seconds of 1000 B/s
        follower = asyncio.ensure_future(_follower_fetch(leader, 3, 0, 10_000))
        await until(lambda: leader.fetch_purgatory.waiting() == 1, "throttled, parked")
        assert not follower.done()
        now[0] += 60.0  # the quota refilled; nothing told the parked fetch
        # Follower 2 reaches the log end: the high watermark moves (3, no append).
        (r2,) = await _follower_fetch(leader, 2, 3, 0)
        assert r2.high_watermark == 3
        # The throttled follower is woken and reads what the quota now allows, long
        # before its 10 s wait is over (it would wait it out if it were not woken).
        await until(follower.done, "the throttled follower answered")
        (r3,) = follower.result()
        assert r3.error == 0 and r3.size > 0 and r3.high_watermark == 3

    run(body())


def test_a_follower_parked_at_the_log_end_answers_a_leadership_change(cluster) -> None:  # noqa: ANN001, F811
    """A change of the partition (here: the leadership moves) still wakes it, and it
    answers with the error a fetch made then gets."""
    ctl, rms = cluster
    start(ctl, rms)
    leader = rms[1]

    async def body() -> None:
        assert (await produce(leader, 1)).error == 0
        follower = asyncio.ensure_future(_follower_fetch(leader, 2, 1, 10_000))
        await until(lambda: leader.fetch_purgatory.waiting() == 1, "parked")
        start(ctl, rms, leader=3, epoch=1)
        await until(follower.done, "the follower answered")
        (r,) = follower.result()
        (again,) = await _follower_fetch(leader, 2, 1, 0)
        assert r.error != 0 and _answer(r) == _answer(again)

    run(body())
