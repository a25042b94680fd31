"""The follower's steady state (issue 28): an answer with no records whose high watermark
and log start are those of the last one taken, on a log that has not moved since, is not
applied again; one that moves either is. Real in-process brokers over real sockets (the
`Cluster` of test_replica_fetcher.py), the follower partition's high watermark update
counted by wrapping it (the broker is not mocked: the wrapped method still does the work)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.cluster.test_replica_fetcher import Cluster, T, log_bytes, produce, run, until
from yak.partition import PartitionState
from yak.protocol.kio_compat import ErrorCode


def _count_applies(c: Cluster, n: int) -> list[tuple[int, int]]:
    """Every time broker `n`'s follower takes a leader high watermark and log start (on
    every append, and on an answer without records): (leader HW, leader log start)."""
    p = c.rm(n).get_partition(T, 0)
    calls: list[tuple[int, int]] = []
    real = p.update_high_watermark_as_follower

    def spy(hw: int, start: int = -1) -> Any:
        calls.append((hw, start))
        return real(hw, start)

    p.update_high_watermark_as_follower = spy
    return calls


def test_idle_answers_are_not_applied_again_and_moves_are(tmp_path: Path) -> None:
    async def body() -> None:
        c = Cluster(tmp_path)
        await c.start(1, 2)
        try:
            await c.create_topic(1)
            c.publish(PartitionState((1, 2), (1, 2), 1, 1, 1))
            assert await produce(c.running[1].port, -1, n=10) == ErrorCode.none
            follower = c.rm(2).get_partition(T, 0)
            await until(lambda: follower.high_watermark == 10, what="follower HW")
            calls = _count_applies(c, 2)
            rounds = c.fetchers[2]._fetchers[(1, 0)].rounds
            # Idle: the leader answers each long poll (200 ms) with nothing new.
            await asyncio.sleep(1.2)
            idle_rounds = c.fetchers[2]._fetchers[(1, 0)].rounds - rounds
            assert idle_rounds >= 3, idle_rounds
            assert calls == [], calls  # fails if every empty answer is applied again
            # A new log start with no new records (DeleteRecords on the leader) is applied.
            assert c.rm(1).delete_records(T, 0, 4) == 4
            await until(lambda: follower.log_start_offset == 4, what="follower log start")
            assert calls and calls[-1] == (10, 4), calls
            # New records and the high watermark that follows them are applied.
            assert await produce(c.running[1].port, -1, n=5) == ErrorCode.none
            await until(lambda: follower.high_watermark == 15, what="follower HW 15")
            assert calls[-1] == (15, 4), calls
            assert log_bytes(c, 1, 15) == log_bytes(c, 2, 15)
            assert c.fetchers[2].max_lag() == 0
        finally:
            await c.stop()

    run(body())
