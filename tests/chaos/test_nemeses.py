"""The elastic nemeses' choices (yak/chaos/nemeses.py): only valid replica sets, only
brokers that can be drained. Pure functions, no cluster: the real moves are exercised by
`yak chaos run --faults reassign,decommission,rebalance` (docs/reliability.md)."""

from __future__ import annotations

import random

import pytest

from yak.chaos.faults import GROUPS, parse_faults
from yak.chaos.nemeses import (
    ELASTIC,
    choose_move,
    decommission_candidates,
    elastic_unsupported,
    planned_moves,
    replica_set_choices,
)
from yak.client.reassign_wire import ClusterView, PartitionState


def _valid(target: tuple[int, ...], live: list[int], rf: int) -> bool:
    return len(target) == rf and len(set(target)) == rf and set(target) <= set(live)


@pytest.mark.parametrize("live", [[1, 2, 3], [1, 2, 3, 4, 5], [1, 3, 4, 5], [2, 4, 5]])
def test_every_replica_set_offered_is_valid_and_new(live: list[int]) -> None:
    current = (1, 2, 3)
    sets = replica_set_choices(current, live, 3)
    assert sets, "some other order or set of 3 live brokers always exists here"
    assert all(_valid(s, live, 3) for s in sets)
    assert current not in sets
    assert len(set(sets)) == len(sets)
    # the ones that move data first, reorderings (same brokers) after
    kinds = [set(s) == set(current) for s in sets]
    assert kinds == sorted(kinds)


def test_no_replica_set_when_too_few_brokers_are_live() -> None:
    assert replica_set_choices((1, 2, 3), [1, 2], 3) == []
    assert replica_set_choices((1, 2, 3), [], 3) == []


def test_choose_move_moves_data_when_it_can_and_never_picks_a_moving_partition() -> None:
    parts = {("chaos-queue", p): (1 + p % 5, 1 + (p + 1) % 5, 1 + (p + 2) % 5)
             for p in range(4)}
    parts[("chaos-other-rf", 0)] = (1, 2)  # another replication factor: never chosen
    moving = {("chaos-queue", 0)}
    live = [1, 2, 4, 5]  # broker 3 down
    seen = set()
    for seed in range(200):
        tp, target = choose_move(random.Random(seed), parts, live, moving, 3)  # type: ignore[misc]
        assert tp in parts and tp not in moving and len(parts[tp]) == 3
        assert _valid(target, live, 3)
        assert set(target) != set(parts[tp])  # 4 live brokers: a move that copies data
        seen.add(tp)
    assert seen == {("chaos-queue", 1), ("chaos-queue", 2), ("chaos-queue", 3)}


def test_on_three_brokers_a_move_is_a_reordering() -> None:
    parts = {("chaos-queue", 0): (1, 2, 3)}
    for seed in range(50):
        tp, target = choose_move(random.Random(seed), parts, [1, 2, 3], set(), 3)  # type: ignore[misc]
        assert sorted(target) == [1, 2, 3] and target != (1, 2, 3)
    assert choose_move(random.Random(1), parts, [1, 2], set(), 3) is None
    assert choose_move(random.Random(1), parts, [1, 2, 3], {("chaos-queue", 0)}, 3) is None


def _view(brokers: list[int], parts: dict[tuple[str, int], tuple[tuple[int, ...],
          tuple[int, ...]]]) -> ClusterView:
    return ClusterView({b: None for b in brokers},
                       {tp: PartitionState(r, isr, r[0]) for tp, (r, isr) in parts.items()})


def test_decommission_only_brokers_the_others_can_replace() -> None:
    parts = {("t", 0): ((1, 2, 3), (1, 2, 3)), ("t", 1): ((3, 4, 5), (3,))}
    view = _view([1, 2, 3, 4, 5], parts)
    # broker 3 is the only in-sync copy of t/1: never drained
    assert decommission_candidates(view, [1, 2, 3, 4, 5], 3) == [1, 2, 4, 5]
    # broker 5 down: not a candidate, and with 4 live brokers each other still is
    assert decommission_candidates(view, [1, 2, 3, 4], 3) == [1, 2, 4]
    # 3 live brokers for RF 3: nobody can leave
    assert decommission_candidates(view, [1, 2, 4], 3) == []
    assert decommission_candidates(_view([1, 2, 3], {}), [1, 2, 3], 3) == []


def test_elastic_faults_are_selectable_and_say_when_they_cannot_run() -> None:
    assert parse_faults("elastic") == list(ELASTIC)
    assert set(ELASTIC) <= set(GROUPS["all"])
    assert parse_faults("reassign,kill") == ["reassign", "kill"]
    assert elastic_unsupported("decommission", 3, 3) is not None
    assert elastic_unsupported("decommission", 5, 3) is None
    assert elastic_unsupported("reassign", 3, 3) is None
    assert elastic_unsupported("rebalance", 1, 1) is not None


def test_the_rebalance_plan_is_read_from_the_commands_output() -> None:
    lines = ["plan: 2 replica move(s), 0 leader reorder(s) in 2 partition(s)",
             "chaos-queue/0: 1,2,3 -> 1,2,4", "chaos-eos-out/3: 2,3,5 -> 4,3,5",
             "broker 1: replicas 5 -> 4, preferred leaders 2 -> 2",
             "2 partition(s) submitted (yak partitions move-status shows them)"]
    assert planned_moves(lines) == {("chaos-queue", 0): (1, 2, 4),
                                    ("chaos-eos-out", 3): (4, 3, 5)}
    assert planned_moves(["balanced: no move needed over brokers [1, 2, 3]"]) == {}
