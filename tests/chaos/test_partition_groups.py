"""Which links each network fault cuts: etcd's side per fault (a pure function; the netns
cut itself is exercised by the chaos runs in CI)."""

from __future__ import annotations

from yak.chaos.faults import partition_groups
from yak.chaos.netns import ETCD


def _cut_pairs(groups: list[list[str]]) -> set[frozenset[str]]:
    """The links NetNs.partition cuts: between members of different groups (members in
    no group keep all theirs)."""
    where = {m: i for i, g in enumerate(groups) for m in g}
    return {frozenset((a, b)) for a in where for b in where if where[a] != where[b]}


def test_partition_cuts_one_broker_from_its_peers_and_nobody_from_etcd() -> None:
    groups = partition_groups("partition", ["b1", "b2", "b3"], "b2")
    cut = _cut_pairs(groups)
    assert cut == {frozenset(("b2", "b1")), frozenset(("b2", "b3"))}
    assert not any(ETCD in pair for pair in cut)  # every broker keeps its session


def test_partition_leader_cuts_the_victim_from_peers_and_etcd() -> None:
    cut = _cut_pairs(partition_groups("partition-leader", ["b1", "b2", "b3"], "b3"))
    assert cut == {frozenset(("b3", "b1")), frozenset(("b3", "b2")), frozenset(("b3", ETCD))}


def test_partition_halves_leaves_etcd_with_the_larger_side() -> None:
    groups = partition_groups("partition-halves", ["b2", "b3", "b1"], None)
    assert groups == [["b2"], ["b3", "b1", ETCD]]
    cut = _cut_pairs(groups)
    assert frozenset(("b2", ETCD)) in cut and frozenset(("b1", ETCD)) not in cut
