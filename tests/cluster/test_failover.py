"""Failover scenarios on a real 3-broker cluster (etcd, `yak serve` processes), each with an
idempotent acks=all producer writing unique values (topic `failover`, 3 partitions,
replication factor 3, min.insync.replicas 2) and ending with the same checks
(tests/cluster/failover.py): no acknowledged write lost, no value read twice, no value
read that was never sent, no offset gaps, and the replicas byte-identical below the high
watermark once healed. Sessions are 3 s, replica.lag.time.max.ms 4 s.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from yak.chaos.queue import ConsumerSpec

from .failover import SESSION_MS, FailoverRun, wait_for

# Slow (a fresh 3-broker cluster each, 20-60 s): `make test-slow` runs them. The plain
# leader and follower kills stay in `make test`, so every CI run fails over a real cluster.
slow = pytest.mark.slow


def test_kill_leader(tmp_path: Path) -> None:
    with FailoverRun(tmp_path) as run:
        run.wait_acked(50)
        leader = run.leader(0)
        run.cluster.kill(leader)
        # The other brokers take over its partitions; writes go on without it.
        wait_for(lambda: run.leaders().get(0, leader) not in (leader, -1), 30,
                 "a new leader for partition 0")
        run.wait_acked(150, 60)
        assert leader not in run.isr(0)
        run.cluster.start_broker(leader)
        run.wait_isr_full(60)
        run.wait_acked(50)
        run.finish()


def test_kill_follower(tmp_path: Path) -> None:
    with FailoverRun(tmp_path) as run:
        run.wait_acked(50)
        leader = run.leader(0)
        follower = next(n for n in (1, 2, 3) if n != leader)
        run.cluster.kill(follower)
        run.wait_acked(150, 60)
        wait_for(lambda: follower not in run.isr(0), 30, "the dead follower out of the ISR")
        run.cluster.start_broker(follower)
        run.wait_isr_full(60)
        run.wait_acked(50)
        run.finish()


@slow
def test_kill_controller(tmp_path: Path) -> None:
    with FailoverRun(tmp_path) as run:
        run.wait_acked(50)
        wait_for(lambda: run.controller() is not None, 30, "a controller")
        controller = run.controller()
        assert controller is not None
        run.cluster.kill(controller)
        wait_for(lambda: run.controller() not in (None, controller), 30,
                 "another controller")
        run.wait_acked(150, 60)
        run.cluster.start_broker(controller)
        run.wait_isr_full(60)
        run.wait_acked(50)
        run.finish()


@slow
def test_five_hard_bounces(tmp_path: Path) -> None:
    rng = random.Random(5)
    with FailoverRun(tmp_path) as run:
        for _ in range(5):
            run.wait_acked(40)
            node = rng.choice(run.cluster.node_ids)
            run.cluster.kill(node)
            run.cluster.start_broker(node)  # at once: a hard bounce
        run.wait_isr_full(90)
        run.wait_acked(50)
        run.finish()


@slow
def test_sigterm_rolling_restart(tmp_path: Path) -> None:
    with FailoverRun(tmp_path) as run:
        for node in run.cluster.node_ids:
            run.wait_acked(40)
            started = time.monotonic()
            assert run.cluster.terminate(node, timeout=40), f"broker {node} ignored SIGTERM"
            assert time.monotonic() - started < 30, "controlled shutdown took over 30 s"
            run.cluster.start_broker(node)
            run.wait_isr_full(60)
        run.wait_acked(50)
        run.finish()


@slow
def test_sigstop_leader_past_its_session(tmp_path: Path) -> None:
    """A leader paused longer than its session is replaced; when it resumes it must not
    acknowledge anything (the checker would see the writes it acknowledged alone lost)."""
    with FailoverRun(tmp_path) as run:
        run.wait_acked(50)
        leader = run.leader(0)
        run.cluster.pause(leader)
        wait_for(lambda: run.leaders().get(0, leader) not in (leader, -1), 30,
                 "a new leader while the old one is paused")
        run.wait_acked(100, 60)
        time.sleep(SESSION_MS / 1000)  # the point: paused a further session past its loss
        run.cluster.resume(leader)
        run.wait_isr_full(60)
        run.wait_acked(50)
        run.finish()


@slow
def test_all_brokers_killed_and_restarted(tmp_path: Path) -> None:
    with FailoverRun(tmp_path) as run:
        run.wait_acked(100)
        for n in run.cluster.node_ids:
            run.cluster.kill(n)
        for n in run.cluster.node_ids:
            run.cluster.start_broker(n)
        run.wait_isr_full(90)
        run.wait_acked(100, 90)
        run.finish()


@slow
def test_two_of_three_down_acknowledges_nothing(tmp_path: Path) -> None:
    with FailoverRun(tmp_path) as run:
        run.wait_acked(50)
        survivor = run.leader(0)
        down = [n for n in run.cluster.node_ids if n != survivor]
        for n in down:
            run.cluster.kill(n)
        killed_at = run.rec.now()
        # Once the survivor's session view has dropped them (and anything in flight at the
        # kill has settled), no acks=all write can be acknowledged: the ISR is below 2.
        # The settling of in-flight writes has no condition to poll: a timed margin.
        time.sleep(SESSION_MS / 1000 + 4)
        window_start = run.rec.now()
        sent_before = run.producer.sent
        time.sleep(6)  # the point: the window in which nothing may be acknowledged
        window_end = run.rec.now()
        assert run.producer.sent > sent_before, "the producer kept trying"
        assert run.acked_between(window_start, window_end) == 0, \
            "a write was acknowledged with two of three brokers down"
        assert window_start - killed_at > SESSION_MS / 1000
        for n in down:
            run.cluster.start_broker(n)
        run.wait_isr_full(90)
        run.wait_acked(100, 90)
        run.finish()


@slow
def test_follower_cut_off_through_a_proxy(tmp_path: Path) -> None:
    """Only the link follower -> leader is cut (clients and every other link work): the
    leader drops the follower from the ISR after replica.lag.time.max.ms, acks=all goes
    on with the other two, and after healing the follower catches up and rejoins."""
    with FailoverRun(tmp_path, links=True) as run:
        run.wait_acked(50)
        leader = run.leader(0)
        follower = next(n for n in (1, 2, 3) if n != leader)
        assert run.isr(0) == [1, 2, 3]
        assert run.links is not None
        run.links.cut(follower, leader)
        wait_for(lambda: follower not in run.isr(0), 30, "the cut follower out of the ISR")
        acked_during = run.wait_acked(100, 30)
        assert acked_during < 30
        assert leader in run.isr(0) and follower in run.cluster.node_ids
        assert run.cluster.alive(follower)
        run.links.heal(follower, leader)
        run.wait_isr_full(60)
        run.wait_acked(50)
        run.finish()


@slow
def test_wiped_follower_rejoins_as_an_empty_follower(tmp_path: Path) -> None:
    import shutil

    with FailoverRun(tmp_path) as run:
        run.wait_acked(100)
        leader = run.leader(0)
        victim = next(n for n in (1, 2, 3) if n != leader)
        run.cluster.kill(victim)
        shutil.rmtree(run.cluster.data_dir(victim))
        run.cluster.data_dir(victim).mkdir(parents=True)
        run.wait_acked(50)
        run.cluster.start_broker(victim)
        # It must never lead with nothing: while it catches up it is not in any ISR.
        run.wait_isr_full(90)
        run.wait_acked(50)
        run.finish()


@slow
def test_consumer_group_continues_after_its_coordinator_dies(tmp_path: Path) -> None:
    with FailoverRun(tmp_path) as run:
        group = "failover-group"
        consumer = run.add_consumer("c", ConsumerSpec("subscribe", group=group))
        wait_for(lambda: consumer.records > 50, 60, "the group consuming")

        def coordinator() -> int:
            admin = run.cluster.admin()
            desc = admin.describe_consumer_groups([group])[group].result(10)
            return int(desc.coordinator.id)

        node = coordinator()
        run.cluster.kill(node)
        before = consumer.records
        wait_for(lambda: coordinator() != node, 60, "a new group coordinator")
        wait_for(lambda: consumer.records > before + 100, 90, "the group consuming again")
        run.cluster.start_broker(node)
        run.finish()
