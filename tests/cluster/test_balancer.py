"""The balancer's planning (yak/cluster/balancer.py): examples and properties.

Properties (hypothesis) over random clusters: a plan never lowers a partition's rack
spread, never targets a cordoned or unknown broker, never touches a fixed partition or
one with a replica on a down broker, keeps every replica list free of duplicates and of
the same size, converges (applied, a second plan is empty), and without racks leaves the
replica counts within 1 of each other.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from yak.cluster.balancer import plan_moves, spread
from yak.cluster.placement import assign_replicas


def counts(assignments: dict, brokers) -> Counter:
    c: Counter = Counter({b: 0 for b in brokers})
    for reps in assignments.values():
        c.update(r for r in reps if r in c)
    return c


def leaders(assignments: dict, brokers) -> Counter:
    c: Counter = Counter({b: 0 for b in brokers})
    c.update(reps[0] for reps in assignments.values() if reps[0] in c)
    return c


def applied(assignments: dict, moves: dict) -> dict:
    return {k: list(moves.get(k, v)) for k, v in assignments.items()}


def test_a_new_broker_receives_its_share() -> None:
    # 12 partitions RF 2 on brokers 1-3, then broker 4 joins: 24 replicas, 6 each.
    before = {("t", p): r for p, r in enumerate(
        assign_replicas(12, 2, [1, 2, 3], fixed_start_index=0))}
    brokers = {1: None, 2: None, 3: None, 4: None}
    plan = plan_moves(before, brokers)
    after = applied(before, plan.moves)
    assert counts(after, brokers) == {1: 6, 2: 6, 3: 6, 4: 6}
    assert plan.replica_moves == 6  # exactly the replicas broker 4 is owed, no more
    assert spread(leaders(after, brokers), brokers) <= 1
    assert not plan_moves(after, brokers)


def test_balanced_cluster_plans_nothing() -> None:
    before = {p: r for p, r in enumerate(assign_replicas(12, 3, [1, 2, 3, 4],
                                                         fixed_start_index=0))}
    assert not plan_moves(before, {1: None, 2: None, 3: None, 4: None})


def test_cordoned_broker_is_never_a_target() -> None:
    before = {p: [1, 2] for p in range(6)}
    plan = plan_moves(before, {1: None, 2: None, 3: None, 4: None}, cordoned={3})
    targets = {r for reps in plan.moves.values() for r in reps}
    assert 3 not in targets and 4 in targets


def test_racks_are_kept_and_rack_rule_limits_the_evening() -> None:
    # Rack a has one broker, rack b three: with RF 2 spread over both racks, broker 1
    # must stay in every partition.
    brokers = {1: "a", 2: "b", 3: "b", 4: "b"}
    before = {p: [1, 2] for p in range(6)}
    after = applied(before, plan_moves(before, brokers).moves)
    assert all(len({brokers[r] for r in reps}) == 2 for reps in after.values())
    assert counts(after, brokers)[1] == 6
    assert sorted(counts(after, brokers)[b] for b in (2, 3, 4)) == [2, 2, 2]


def test_followers_move_before_leaders_and_small_before_large() -> None:
    before = {"big": [2, 1], "small": [3, 1], "led": [1, 3]}
    plan = plan_moves(before, {1: None, 2: None, 3: None, 4: None},
                      sizes={"big": 10**9, "small": 10, "led": 1}, max_moves=1)
    assert plan.moves == {"small": [3, 4]}


def test_max_moves_bounds_and_replanning_continues() -> None:
    before = {p: [1, 2] for p in range(10)}
    brokers = {1: None, 2: None, 3: None, 4: None}
    state, rounds = before, 0
    while (plan := plan_moves(state, brokers, max_moves=2)):
        assert plan.replica_moves + plan.reorders <= 2
        state = applied(state, plan.moves)
        rounds += 1
        assert rounds < 20
    assert spread(counts(state, brokers), brokers) <= 1
    assert rounds > 1


def test_down_and_fixed_partitions_are_left_alone() -> None:
    before = {"down": [1, 9], "moving": [1, 2], **{p: [1, 2] for p in range(4)}}
    plan = plan_moves(before, {1: None, 2: None, 3: None}, fixed={"moving"})
    assert "down" not in plan.moves and "moving" not in plan.moves


@st.composite
def clusters(draw):
    n = draw(st.integers(1, 7))
    ids = draw(st.lists(st.integers(0, 20), min_size=n, max_size=n, unique=True))
    use_racks = draw(st.booleans())
    rack_names = draw(st.lists(st.sampled_from("abcd"), min_size=n, max_size=n))
    brokers = {b: (rack_names[i] if use_racks else None) for i, b in enumerate(ids)}
    # Replicas may sit on brokers not registered now (down): ids 21-23.
    pool = ids + draw(st.lists(st.integers(21, 23), max_size=2, unique=True))
    n_parts = draw(st.integers(0, 30))
    assignments = {}
    for p in range(n_parts):
        rf = draw(st.integers(1, min(3, len(pool))))
        assignments[p] = draw(st.lists(st.sampled_from(pool), min_size=rf, max_size=rf,
                                       unique=True))
    cordoned = set(draw(st.lists(st.sampled_from(ids), max_size=2)))
    fixed = set(draw(st.lists(st.integers(0, max(0, n_parts - 1)), max_size=3)))
    loads = {b: draw(st.floats(0, 1)) for b in ids if draw(st.booleans())}
    sizes = {p: draw(st.integers(0, 1000)) for p in assignments if draw(st.booleans())}
    return assignments, brokers, cordoned, fixed, loads, sizes


@settings(max_examples=300, deadline=None)
@given(clusters(), st.one_of(st.none(), st.integers(1, 5)),
       st.one_of(st.none(), st.integers(0, 500)))
def test_plan_properties(cluster, max_moves, byte_gap) -> None:
    assignments, brokers, cordoned, fixed, loads, sizes = cluster
    racks = all(r is not None for r in brokers.values()) and bool(brokers)
    plan = plan_moves(assignments, brokers, cordoned=cordoned, fixed=fixed, loads=loads,
                      max_moves=max_moves, sizes=sizes, byte_gap=byte_gap)
    if max_moves is not None:
        assert plan.replica_moves + plan.reorders <= max_moves
    for k, new in plan.moves.items():
        old = assignments[k]
        assert k not in fixed
        assert all(r in brokers for r in old), "a partition with a down replica moved"
        assert len(new) == len(old) and len(set(new)) == len(new)
        for r in set(new) - set(old):
            assert r in brokers and r not in cordoned
        if racks:
            assert len({brokers[r] for r in new}) >= len({brokers[r] for r in old})
    after = applied(assignments, plan.moves)
    if max_moves is None:
        again = plan_moves(after, brokers, cordoned=cordoned, fixed=fixed, loads=loads,
                           sizes=sizes, byte_gap=byte_gap)
        assert not again, again.moves
        members = [b for b in brokers if b not in cordoned]
        if racks:  # Kafka's rule: no two replicas in one rack while racks allow
            member_racks = {brokers[b] for b in members}
            for k, reps in after.items():
                if k not in fixed and all(r in brokers for r in reps):
                    assert len({brokers[r] for r in reps}) >= min(len(reps),
                                                                  len(member_racks))
        if not racks and not fixed and all(r in brokers for reps in assignments.values()
                                           for r in reps):
            assert spread(counts(after, members), members) <= 1


def broker_bytes(assignments: dict, sizes: dict, brokers) -> Counter:
    c: Counter = Counter({b: 0 for b in brokers})
    for k, reps in assignments.items():
        c.update({r: sizes.get(k, 0) for r in reps if r in c})
    return c


def test_bytes_are_evened_by_swaps_that_keep_the_counts() -> None:
    # RF 1, two partitions per broker: counts are even, but broker 1 holds the two big ones.
    before = {"big0": [1], "big1": [1], "a": [2], "b": [2], "c": [3], "d": [3]}
    sizes = {"big0": 100, "big1": 100, "a": 1, "b": 1, "c": 1, "d": 1}
    brokers = {1: None, 2: None, 3: None}
    assert not plan_moves(before, brokers, sizes=sizes)  # counts alone: balanced
    plan = plan_moves(before, brokers, sizes=sizes, byte_gap=10)
    after = applied(before, plan.moves)
    assert counts(after, brokers) == {1: 2, 2: 2, 3: 2}
    assert plan.replica_moves == 2  # one swap
    held = broker_bytes(after, sizes, brokers)
    assert sorted(held.values()) == [2, 101, 101]  # the best whole partitions allow
    assert not plan_moves(after, brokers, sizes=sizes, byte_gap=10)


def test_a_single_move_evens_bytes_where_the_counts_allow() -> None:
    # Broker 1 holds 3 replicas (40 bytes), broker 2 holds 2 (empty): moving the big
    # one (20 of the 40) is a single step that keeps the counts within 1.
    before = {"big": [1], "a": [1], "b": [1], "c": [2], "d": [2]}
    sizes = {"big": 20, "a": 10, "b": 10}
    plan = plan_moves(before, {1: None, 2: None}, sizes=sizes, byte_gap=5)
    assert plan.moves == {"big": [2]} and plan.replica_moves == 1
    # A partition as big as the gap is never moved: the gap would only change sides.
    assert not plan_moves({"big": [1], "a": [1], "c": [2]}, {1: None, 2: None},
                          sizes={"big": 50}, byte_gap=5)


def test_bytes_within_the_gap_are_left_alone() -> None:
    before = {"x": [1], "y": [2]}
    assert not plan_moves(before, {1: None, 2: None}, sizes={"x": 100, "y": 60},
                          byte_gap=50)


def test_bytes_keep_the_rack_rule() -> None:
    # RF 2 over racks a (1, 2) and b (3, 4): a swap between brokers of different racks
    # would put two replicas in one rack, so bytes move only within a rack.
    brokers = {1: "a", 2: "a", 3: "b", 4: "b"}
    before = {"big": [1, 3], "s1": [2, 4], "s2": [1, 4], "s3": [2, 3]}
    sizes = {"big": 1000, "s1": 1, "s2": 1, "s3": 1}
    plan = plan_moves(before, brokers, sizes=sizes, byte_gap=0)
    after = applied(before, plan.moves)
    assert all(len({brokers[r] for r in reps}) == 2 for reps in after.values())


def test_two_replicas_in_one_rack_are_spread() -> None:
    # Placed before racks were set: both replicas in rack a while rack b has brokers.
    brokers = {1: "a", 2: "a", 3: "b", 4: "b"}
    before = {0: [1, 2], 1: [3, 4], 2: [1, 3], 3: [2, 4]}
    after = applied(before, plan_moves(before, brokers).moves)
    assert all(len({brokers[r] for r in reps}) == 2 for reps in after.values())
    assert 1 in after[0] and 3 in after[1]  # the followers moved, not the leaders


def test_rebalance_command_bad_input_is_one_line() -> None:
    from tests.cli.test_cli import one_line_error, yak

    r = yak("cluster", "rebalance", "--max-moves", "0")
    one_line_error(r, "--max-moves")
    assert r.returncode == 2
    r = yak("cluster", "rebalance", "--bootstrap", "127.0.0.1:1", "--timeout", "2")
    one_line_error(r, "cannot rebalance", "127.0.0.1:1")


def test_disk_imbalance_is_the_spread_of_log_bytes_as_a_percent_of_the_fullest() -> None:
    from yak.cluster.autobalancer import DISK_MIN_BYTES, disk_imbalance

    mib = 1 << 20
    assert disk_imbalance({1: 10 * mib, 2: 8 * mib, 3: 10 * mib}) == 20.0
    assert disk_imbalance({1: 4 * mib, 2: 0}) == 100.0
    # Small logs never count: moving a few KiB is all cost.
    assert disk_imbalance({1: DISK_MIN_BYTES - 1, 2: 0}) == 0.0
    assert disk_imbalance({}) == 0.0
