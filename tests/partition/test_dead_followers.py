"""Issue 27 at the partition layer: a follower that stopped fetching leaves the ISR after
`replica.fetch.dead.ms`, not after `replica.lag.time.max.ms`; the flapping guard.

Three ReplicaManagers on real logs and a manual clock (no sleeps): the lag bound is
Kafka's 30 s, the dead bound 1200 ms, so a shrink within seconds can only be the new rule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.partition.test_replication import (
    Controller,
    T,
    batch,
    produce,
    produce_bg,
    replicate_once,
    run,
    start,
    until,
)
from yak.partition import FetchIsolation, FetchParams, FetchPartition, ReplicaManager
from yak.partition.follower_state import FLAP_HOLD_MS, FLAP_SHRINKS
from yak.storage import LogConfig, LogManager

DEAD_MS = 1200


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Controller, dict[int, ReplicaManager]]]:
    ctl = Controller(LogConfig.from_props({"min.insync.replicas": "2"}))
    managers: dict[int, ReplicaManager] = {}
    logs = []
    for node in (1, 2, 3):
        lm = LogManager(str(tmp_path / f"b{node}"), LogConfig(), start_cleaner=False)
        lm.startup()
        logs.append(lm)
        managers[node] = ReplicaManager(node, lm, replica_lag_time_max_ms=30_000,
                                        alter_partition=ctl, clock=ctl.clock,
                                        replica_fetch_dead_ms=DEAD_MS)
    ctl.brokers = managers
    yield ctl, managers
    for rm in managers.values():
        rm.io_pool.shutdown(wait=True)
    for lm in logs:
        lm.shutdown()


def test_a_follower_that_stopped_fetching_leaves_the_isr_and_acks_resume(cluster) -> None:  # noqa: ANN001
    ctl, rms = cluster
    start(ctl, rms)
    p = rms[1].get_partition(T, 0)

    async def body() -> None:
        for f in (2, 3):
            await replicate_once(rms[1], rms[f])
        # 3 is killed now; 2 goes on fetching. Before the bound nothing changes...
        ctl.clock.advance(DEAD_MS)
        await replicate_once(rms[1], rms[2])
        assert not p.maybe_shrink_isr() and p.state.isr == (1, 2, 3)
        task = await produce_bg(rms[1], -1)
        await replicate_once(rms[1], rms[2])
        await replicate_once(rms[1], rms[2])
        assert not task.done()  # acks=all waits for 3
        # ...past it, 3 leaves (the lag bound, 30 s, is far away) and the ack completes.
        ctl.clock.advance(10)
        assert p.maybe_shrink_isr()
        await until(lambda: p.state.isr == (1, 2), "3 shrunk out")
        assert (await asyncio.wait_for(task, 5)).error == 0
        assert rms[1].dead_follower_shrinks == 1
        # 3 comes back: it catches up and rejoins as before.
        await replicate_once(rms[1], rms[3])
        await replicate_once(rms[1], rms[3])
        await until(lambda: p.state.isr == (1, 2, 3), "3 rejoins")

    run(body())


def test_a_follower_long_polling_is_alive_however_long_it_waits(cluster) -> None:  # noqa: ANN001
    """A fetch parked at the leader is the follower waiting, not silence: a frozen
    follower is judged from when its last fetch was answered."""
    ctl, rms = cluster
    start(ctl, rms)
    p = rms[1].get_partition(T, 0)

    async def body() -> None:
        for f in (2, 3):
            await replicate_once(rms[1], rms[f])
        f3 = rms[3].get_partition(T, 0)
        want = FetchPartition(T, 0, f3.log_end_offset, 1 << 20, f3.leader_epoch,
                              f3.latest_epoch, f3.log_start_offset)
        params = FetchParams(3000, 1, 1 << 20, FetchIsolation.LOG_END, replica_id=3,
                             replica_epoch=103)
        poll = asyncio.ensure_future(rms[1].fetch_messages(params, [want]))
        await until(lambda: p.follower(3).fetching == 1, "3's fetch parked")
        ctl.clock.advance(5 * DEAD_MS)
        await replicate_once(rms[1], rms[2])
        assert p.out_of_sync_replicas() == []  # 3 is waiting on us, not silent
        poll.cancel()  # its connection closes (kill -9): silence starts now
        await until(lambda: p.follower(3).fetching == 0, "3's fetch dropped")
        assert p.out_of_sync_replicas() == []
        ctl.clock.advance(DEAD_MS + 1)
        await replicate_once(rms[1], rms[2])  # 2 is alive throughout
        assert p.out_of_sync_replicas() == [3]

    run(body())


def test_a_follower_that_never_fetched_is_judged_by_lag_alone(cluster) -> None:  # noqa: ANN001
    """After a leader change a follower may still be finding the new leader."""
    ctl, rms = cluster
    start(ctl, rms)
    p = rms[1].get_partition(T, 0)
    ctl.clock.advance(10 * DEAD_MS)
    assert p.out_of_sync_replicas() == []
    ctl.clock.advance(30_001)
    assert sorted(p.out_of_sync_replicas()) == [2, 3]


def test_the_flapping_guard_holds_a_follower_that_keeps_dying(cluster) -> None:  # noqa: ANN001
    ctl, rms = cluster
    start(ctl, rms)
    p = rms[1].get_partition(T, 0)

    async def die_and_return() -> None:
        await replicate_once(rms[1], rms[3])  # alive (and rejoins if it may)
        ctl.clock.advance(DEAD_MS + 1)
        await replicate_once(rms[1], rms[2])
        assert p.maybe_shrink_isr()
        await until(lambda: 3 not in p.state.isr, "3 shrunk out")
        await replicate_once(rms[1], rms[3])

    async def body() -> None:
        assert (await produce(rms[1], 1, batch(1))).error == 0
        await replicate_once(rms[1], rms[2])
        for _ in range(FLAP_SHRINKS - 1):
            await die_and_return()
            await until(lambda: 3 in p.state.isr, "3 rejoins")
        await die_and_return()  # the third shrink in the window
        await replicate_once(rms[1], rms[3])
        assert 3 not in p.state.isr and rms[1].isr_expansions_held == 1
        ctl.clock.advance(FLAP_HOLD_MS // 2)
        await replicate_once(rms[1], rms[3])
        assert 3 not in p.state.isr  # still held
        ctl.clock.advance(FLAP_HOLD_MS // 2 + 1)
        await replicate_once(rms[1], rms[3])
        await until(lambda: 3 in p.state.isr, "3 rejoins after the hold")

    run(body())


def test_the_check_runs_often_enough_for_the_dead_bound(cluster) -> None:  # noqa: ANN001
    _, rms = cluster
    assert rms[1].isr_check_interval_s() == DEAD_MS / 4000
