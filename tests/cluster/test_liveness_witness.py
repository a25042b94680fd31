"""The frozen verdict's local witness (yak/cluster/liveness_witness.py; issue 27, run G's two
false positives): a suspect whose fetch arrived at a partition the prober leads within the
bound is alive, and its silence is no verdict.

The verdict logic with a stubbed witness and stated times (no processes); the witness's
reading of a real ReplicaManager's follower state on real logs; and the probe on real
sockets with real etcd, where a silent broker that fetches is not fenced and, once its
fetches stop, is.

The same on three real brokers, with the probe's link cut one way while the suspect's
fetches go on: test_liveness_witness_cluster.py (slow).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.test_liveness_judge import _answering, _Brokers, _register
from yak.cluster.liveness import BrokerLiveness, _Second
from yak.cluster.liveness_pings import FreezeJudge
from yak.cluster.liveness_quorum import suspects_prefix
from yak.cluster.liveness_witness import LeaderFetches, fetched_within

BOUND_S = 2.0


def test_only_a_fetch_that_arrived_within_the_bound_is_a_witness() -> None:
    now = 1000.0
    assert fetched_within(int((now - 0.4) * 1000), now, BOUND_S) is not None
    assert fetched_within(int((now - BOUND_S) * 1000), now, BOUND_S) is not None  # at it
    assert fetched_within(int((now - BOUND_S - 0.01) * 1000), now, BOUND_S) is None
    assert fetched_within(None, now, BOUND_S) is None  # follows nothing led here


class _Fetches:
    """A stubbed witness: the last arrival of each follower's fetch, in ms."""

    def __init__(self) -> None:
        self.at: dict[int, int] = {}

    def __call__(self, node: int) -> int | None:
        return self.at.get(node)


def _controller(fetches: _Fetches | None) -> BrokerLiveness:
    """Broker 1, controller of 3, probing 2 and 3; broker 3 answered just now."""
    image = _Brokers({1: 10, 2: 20, 3: 30}, {2: 9002, 3: 9003}, (1, 99))
    lv = BrokerLiveness(image, None, None, 1,  # type: ignore[arg-type]
                        lambda n: ("127.0.0.1", 9000 + n), unresponsive_ms=int(BOUND_S * 1000))
    lv._active = True
    lv._probes = {2: (20, None), 3: (30, None)}  # type: ignore[dict-item]
    lv.last_fetch_ms = fetches
    return lv


def _silent_judge(now: float) -> FreezeJudge:
    judge = FreezeJudge(BOUND_S, now - 3.0)
    judge.heard(now - 2.5)  # answered once, then nothing for 2.5 s
    assert judge.frozen(now)
    return judge


def test_a_suspect_that_fetched_within_the_bound_is_not_judged(caplog) -> None:  # type: ignore[no-untyped-def]
    """The controller's rule (2 of 3 agree) would judge broker 2; a fetch of broker 2 that
    arrived 0.5 s ago withholds it, logged and counted once for the suspicion however
    often it is asked. An older fetch, or none, and the verdict stands as before."""
    now = 5000.0
    fetches = _Fetches()
    lv = _controller(fetches)
    lv.hearing.heard(3, now - 0.1)
    second = _Second(lv, 2, 20)
    fetches.at[2] = int((now - 0.5) * 1000)
    judge = _silent_judge(now)

    async def main() -> None:
        with caplog.at_level(logging.INFO, logger="yak.cluster.liveness"):
            assert not await second.agrees(judge, now)
            assert not await second.agrees(judge, now + 0.25)
        assert lv.withheld == 1
        lines = [r.getMessage() for r in caplog.records if "withheld" in r.getMessage()]
        assert len(lines) == 1 and "broker 2 (epoch 20)" in lines[0], lines
        assert "fetched from this broker" in second.evidence
        # Its fetches stop: 2.1 s after the last one the silence is judged.
        lv.hearing.heard(3, now + 1.5)
        assert await second.agrees(judge, now + 1.6)
        assert "2 of 3 brokers agree" in second.evidence
        # A new suspicion of a broker that follows nothing led here: judged as before.
        bare = _controller(_Fetches())
        bare.hearing.heard(3, now - 0.1)
        assert await _Second(bare, 2, 20).agrees(judge, now)
        # And a broker with no witness wired (a node built in code): as before.
        lone = _controller(None)
        lone.hearing.heard(3, now - 0.1)
        assert await _Second(lone, 2, 20).agrees(judge, now)

    asyncio.run(main())


def test_a_new_suspicion_is_counted_again() -> None:
    """Once the suspect answers (the suspicion withdrawn), its next silence that a fetch
    withholds is another episode: logged and counted again."""
    now = 5000.0
    fetches = _Fetches()
    lv = _controller(fetches)
    lv.hearing.heard(3, now)
    second = _Second(lv, 2, 20)
    fetches.at[2] = int(now * 1000)
    judge = _silent_judge(now)

    async def main() -> None:
        assert not await second.agrees(judge, now)
        await second.withdraw(True)
        assert not await second.agrees(judge, now + 0.1)

    asyncio.run(main())
    assert lv.withheld == 2


@pytest.fixture
def rm(tmp_path: Path) -> Iterator[object]:
    from yak.clock import ManualClock
    from yak.partition import ReplicaManager
    from yak.storage import LogConfig, LogManager

    logs = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
    logs.startup()
    manager = ReplicaManager(1, logs, clock=ManualClock(1_000_000))
    yield manager
    manager.io_pool.shutdown(wait=True)
    logs.shutdown()


def test_the_witness_reads_the_newest_fetch_arrival_across_led_partitions(rm) -> None:  # type: ignore[no-untyped-def]
    """Broker 1 leads t-0 and t-1 (followed by 2) and follows t-2 (led by 2). Broker 2's
    newest fetch arrival at a partition 1 leads is the witness, on time.monotonic()'s
    clock whatever the ReplicaManager's clock is; broker 3 follows nothing here; a
    partition 1 only follows gives no witness."""
    from yak.partition import PartitionState
    from yak.storage import LogConfig

    for i, state in enumerate((PartitionState((1, 2), (1, 2), 1, 1, 1),
                               PartitionState((1, 2), (1, 2), 1, 1, 1),
                               PartitionState((2, 1), (2, 1), 2, 1, 1))):
        rm.apply_partition_state("t", i, uuid.uuid4(), state, LogConfig())
    witness = LeaderFetches(rm)
    assert witness(2) is None  # led, but not fetched in this leader epoch yet
    clock = rm.clock
    rm.get_partition("t", 0).update_follower_fetch_state(2, 0, now_ms=clock.now - 1500)
    rm.get_partition("t", 1).update_follower_fetch_state(2, 0, now_ms=clock.now - 300)
    got = witness(2)
    assert got is not None
    age_ms = time.monotonic_ns() // 1_000_000 - got
    assert 300 <= age_ms < 300 + 200, age_ms
    assert fetched_within(got, time.monotonic(), BOUND_S) is not None
    assert witness(3) is None


def test_a_fetching_controller_is_not_suspected_in_etcd(etcd, keys) -> None:  # type: ignore[no-untyped-def]
    """Broker 2 probes only the controller (1), which stops answering. While broker 1's
    fetches keep arriving at broker 2, broker 2 records no suspicion in etcd (and a third
    broker's suspicion alone fences nothing); once they stop, it suspects, and with
    broker 3's suspicion the controller is fenced."""
    from tests.cluster.conftest import run
    from yak.cluster.etcd import EtcdClient
    from yak.cluster.liveness_quorum import Suspicions

    async def main() -> None:
        async with EtcdClient(etcd.endpoints) as client:
            regs = await _register(client, keys, [1, 2, 3])
            answers, servers, ports = await _answering([1])
            image = _Brokers({n: e for n, (e, _l) in regs.items()}, ports, (1, 99))
            lv = BrokerLiveness(image, client, keys, 2,  # type: ignore[arg-type]
                                lambda n: ("127.0.0.1", ports[n]) if n in ports else None,
                                unresponsive_ms=800)
            fetching = True
            lv.last_fetch_ms = lambda n: (time.monotonic_ns() // 1_000_000 - 100
                                          if n == 1 and fetching else None)
            other = Suspicions(client, keys, 3, 0.8)
            lv.open()
            await asyncio.sleep(1.0)
            answers[1].clear()
            for _ in range(25):  # 2.5 s: three bounds of silence, broker 3 suspecting
                await other.agree(1, regs[1][0], [1, 2, 3], time.monotonic())
                await asyncio.sleep(0.1)
            assert await client.get(suspects_prefix(keys, 1) + "2") is None
            assert await client.get(keys.broker(1)) is not None
            assert lv.frozen == 0 and lv.withheld == 1
            fetching = False  # frozen for real now
            for _ in range(40):
                if await client.get(keys.broker(1)) is None:
                    break
                await other.agree(1, regs[1][0], [1, 2, 3], time.monotonic())
                await asyncio.sleep(0.1)
            assert await client.get(keys.broker(1)) is None, "the controller was not fenced"
            assert lv.frozen == 1
            await lv.aclose()
            await other.withdraw(1)
            for s in servers:
                s.close()
    run(main())
