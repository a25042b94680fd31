"""`yak.client.load_aware.LoadAwarePartitioner` alone, on a manual clock: sticky draws,
a stalled leader left out, a slow leader chosen less and tried again once its latency is
old news, the published load taken into account; then the commands' option on a real
broker."""

from __future__ import annotations

import random
from collections import Counter

from yak.client.load_aware import LoadAwarePartitioner

LEADERS = {0: 1, 1: 2, 2: 3, 3: 1, 4: 2, 5: 3}  # partition -> leader


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def run(pa: LoadAwarePartitioner, clock: Clock, n: int, latency: dict[int, float],
        stalled: frozenset[int] = frozenset()) -> Counter[int]:
    """n records of 1 KiB, each acknowledged 1 ms later (with `latency` per leader)
    unless its leader is stalled; returns records per leader."""
    got: Counter[int] = Counter()
    for _ in range(n):
        p = pa.partition("t", LEADERS, 1024)
        leader = LEADERS[p]
        got[leader] += 1
        clock.t += 0.001
        if leader not in stalled:
            pa.acked(leader, latency.get(leader, 0.002))
    return got


def test_sticks_to_a_partition_for_a_batch() -> None:
    clock = Clock()
    pa = LoadAwarePartitioner(sticky_bytes=16384, rng=random.Random(1), clock=clock)
    first = [pa.partition("t", LEADERS, 1024) for _ in range(16)]
    assert len(set(first)) == 1  # 16 KiB of records on one partition
    for _ in range(16):
        pa.acked(LEADERS[first[0]], 0.002)
    draws = {pa.partition("t", LEADERS, 1024) for _ in range(16 * 40)}
    assert len(draws) > 1


def test_draws_again_after_sticky_s_however_small_the_records() -> None:
    """Small records from a few waiting callers must not stay on one partition."""
    clock = Clock()
    pa = LoadAwarePartitioner(sticky_bytes=16384, sticky_s=0.01, rng=random.Random(7),
                              clock=clock)
    within = set()
    for _ in range(50):
        within.add(pa.partition("t", LEADERS, 3))
        clock.t += 0.0001
    assert len(within) == 1  # 5 ms, 150 bytes: one batch
    later = set()
    for _ in range(50):
        clock.t += 0.02
        p = pa.partition("t", LEADERS, 3)
        later.add(p)
        pa.acked(LEADERS[p], 0.002)
    assert len(later) > 2, later


def test_even_when_all_leaders_are_alike() -> None:
    clock = Clock()
    pa = LoadAwarePartitioner(sticky_bytes=1024, rng=random.Random(2), clock=clock)
    got = run(pa, clock, 3000, {})
    assert all(800 < got[b] < 1200 for b in (1, 2, 3)), got


def test_a_stalled_leader_gets_nothing_new_then_is_tried_again() -> None:
    clock = Clock()
    pa = LoadAwarePartitioner(sticky_bytes=1024, availability_timeout_s=0.5,
                              rng=random.Random(3), clock=clock)
    run(pa, clock, 300, {})
    stalled = run(pa, clock, 3000, {}, stalled=frozenset({3}))
    # Broker 3 stops acknowledging: once its oldest record waited 0.5 s it is left out.
    assert stalled[3] < 0.1 * stalled[1], stalled
    assert pa.snapshot()[3]["in_flight"] == stalled[3]
    # It resumes: its records are acknowledged (late), and it is used again.
    for _ in range(stalled[3]):
        pa.acked(3, 2.0)
    clock.t += 3.0  # a 2 s latency is old news after a few half-lives
    after = run(pa, clock, 3000, {})
    assert after[3] > 0.5 * after[1], after


def test_a_slow_leader_is_chosen_less() -> None:
    clock = Clock()
    pa = LoadAwarePartitioner(sticky_bytes=1024, rng=random.Random(4), clock=clock)
    got = run(pa, clock, 6000, {2: 0.050})
    assert got[2] < 0.3 * got[1] and got[2] < 0.3 * got[3], got


def test_published_load_counts() -> None:
    clock = Clock()
    pa = LoadAwarePartitioner(lambda: {1: 0.9, 2: 0.0, 3: 0.0}, sticky_bytes=1024,
                              rng=random.Random(5), clock=clock)
    got = run(pa, clock, 6000, {})
    assert got[1] < 0.6 * got[2], got


def test_leaderless_partitions_are_avoided_and_failures_release() -> None:
    clock = Clock()
    pa = LoadAwarePartitioner(sticky_bytes=1, rng=random.Random(6), clock=clock)
    leaders = {0: -1, 1: 2}
    assert {pa.partition("u", leaders) for _ in range(50)} == {1}
    for _ in range(50):
        pa.failed(2)
    assert pa.snapshot()[2]["in_flight"] == 0


def test_the_commands_take_load_aware_and_refuse_other_names(broker_factory) -> None:
    """`yak produce --partitioner load_aware` against a real broker: every keyless line
    acknowledged, spread over the partitions; a keyed line still goes by its key. Unknown
    partitioner names are one line with exit 2 for yak produce, yak gateway, yak serve."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.cli.test_cli import ok, one_line_error, yak

    b = broker_factory()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("la", 4, 1)])["la"].result(30)
    # 200 KB: the partitioner sticks to one partition per 16 KiB (KIP-794's batch.size) or
    # 10 ms, so 2000 short lines produced within 10 ms on a quiet machine all went to one.
    lines = "".join(f"v{i:099d}\n" for i in range(2000))
    r = yak("produce", "la", "--partitioner", "load_aware", "--bootstrap", b.bootstrap,
            stdin=lines)
    assert r.returncode == 0 and "produced 2000 messages to la" in r.stderr, r.stderr
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "la-check"})
    per_partition = {}
    for p in range(4):
        _low, high = c.get_watermark_offsets(TopicPartition("la", p), timeout=30)
        per_partition[p] = high
    c.close()
    assert sum(per_partition.values()) == 2000, per_partition
    assert sum(1 for n in per_partition.values() if n) >= 2, per_partition
    ok("produce", "la", "-K", ":", "--partitioner", "load_aware", "--bootstrap", b.bootstrap,
       stdin="k:1\nk:2\n")

    for cmd in (["produce", "la", "--partitioner", "bogus", "--bootstrap", b.bootstrap],
                ["gateway", "--partitioner", "bogus", "--bootstrap", b.bootstrap],
                ["serve", "--gateway-partitioner", "bogus"]):
        r = yak(*cmd, stdin="x\n")
        one_line_error(r, "bogus")
        assert r.returncode == 2, (cmd, r.stderr)
