"""Partition balancing (issue 23): a plan of a few moves that evens replicas across brokers.

Why: placement (`placement.py`) only decides where *new* partitions go, so a broker added
later never receives a partition, and a cluster that lost and regained brokers stays
lopsided. Kafka leaves this to Cruise Control; Redpanda's continuous balancing does it in
the controller. This module is the planning half, pure (no I/O, no clock), so it is
tested by properties; `yak cluster rebalance` (`yak/cli/rebalance.py`) and the
controller's autobalancer (`autobalancer.py`) feed it the image and submit its moves as
ordinary KIP-455 reassignments.

What a plan is: new replica lists for some partitions. Phases 0-2 are one greedy walk:
each step is taken from the first phase that has one, until none has (so a plan,
applied, plans nothing more); phase 3 then reorders:

0. Racks (when every broker has one). A partition with two replicas in one rack while
   some usable broker's rack is unused by it has one of the doubled replicas (the last
   in its list, so a follower where it can) moved to the broker of an unused rack that
   holds the fewest replicas: Kafka's rule, no two replicas in one rack while racks
   allow, restored for partitions placed before the racks were set.
1. Replicas. While some broker holds at least two replicas more than another, one
   replica of the fullest broker (most replicas; ties: the higher load score, then the
   higher id) is replaced *in place* by the emptiest broker (fewest; ties: the lower
   score, then the lower id), trying the other pairs in that order when no partition
   fits. A partition fits when the emptiest broker is not already one of its replicas
   and, when every broker has a rack, its number of distinct racks does not fall (never
   two replicas in one rack where racks allow: Kafka's rack rule). Among fitting
   partitions: one where the broker is a follower (the leader stays), then the smallest
   (`sizes`, bytes to copy), then by key. Every step lowers the sum of squared counts, so
   the walk ends, and it moves only the replicas that evening needs: without racks the
   spread (max - min) ends at most 1.
2. Bytes (only with `byte_gap`, the largest difference in bytes between two brokers
   that is left alone). While the broker holding the most bytes (the sum of `sizes` over
   its replicas) holds more than `byte_gap` more than the one holding the fewest, one
   step narrows their gap without widening the replica counts: either a *swap* (a
   replica of partition p moves from the fuller to the emptier broker and one of a
   smaller partition q the other way, counts unchanged), or, when the fuller broker
   holds more replicas, a single move of p (the counts' spread does not widen). The pair (p, q) whose difference in size
   comes nearest to half the gap is taken; the same rack rule holds for both
   partitions, and a swap or move must shrink the gap (the size difference is strictly
   between 0 and the gap), so every step lowers the sum of squared bytes without
   raising that of the counts, and the walk ends (phase 0 lowers the partitions' missing
   racks, which no phase raises; phase 1 the squared counts). Pairs of brokers are tried fullest against emptiest first.
3. Preferred leaders (first replicas). While some broker is the first replica of at
   least two partitions more than another, a partition of the first whose replicas
   include the second has the two swapped in its list: a reorder, which copies no data
   (the move completes when written, and the preferred-leader election hands leadership
   over once the new first replica is in the ISR).

Only `brokers` (registered, usable) count; `cordoned` ones (KIP-1066 `cordoned.log.dirs`,
`yak cluster decommission`) are never a target and are left out of the evening (the
decommission drains them). A partition with a replica on a broker not in `brokers` (down)
or listed in `fixed` (already moving) is counted but never changed. `max_moves` bounds the
steps (replica moves and reorders, each one step): applying a bounded plan and planning
again continues where it stopped; an unbounded plan, applied, plans nothing more.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

__all__ = ["Plan", "plan_moves", "spread"]

K = TypeVar("K", bound=Hashable)


class Plan(Generic[K]):
    """The result: `moves` (key -> new replica list, only for partitions that change),
    with how many replica moves (data copied) and reorders (leadership only) it holds."""

    def __init__(self, moves: dict[K, list[int]], replica_moves: int, reorders: int) -> None:
        self.moves = moves
        self.replica_moves = replica_moves
        self.reorders = reorders

    def __bool__(self) -> bool:
        return bool(self.moves)


def spread(counts: Mapping[int, int], brokers: Collection[int]) -> int:
    """max - min of `counts` over `brokers` (0 for none)."""
    values = [counts.get(b, 0) for b in brokers]
    return max(values) - min(values) if values else 0


def _racks(brokers: Mapping[int, str | None]) -> Mapping[int, str | None] | None:
    """Racks are used only when every broker has one (Kafka's rule)."""
    if brokers and all(r is not None for r in brokers.values()):
        return brokers
    return None


def plan_moves(assignments: Mapping[K, Sequence[int]], brokers: Mapping[int, str | None], *,
               cordoned: Collection[int] = (), loads: Mapping[int, float] | None = None,
               sizes: Mapping[K, int] | None = None, fixed: Collection[K] = (),
               max_moves: int | None = None, byte_gap: int | None = None) -> Plan[K]:
    """The plan for `assignments` (key -> replica list, a moving partition's target) over
    `brokers` (node id -> rack, the usable ones); see the module docstring."""
    loads = loads or {}
    sizes = sizes or {}
    racks = _racks(brokers)
    members = sorted(b for b in brokers if b not in set(cordoned))
    current: dict[K, list[int]] = {k: list(v) for k, v in assignments.items()}
    fixed_set = set(fixed)
    movable = sorted((k for k, reps in current.items()
                      if k not in fixed_set and reps and all(r in brokers for r in reps)),
                     key=repr)
    changed: set[K] = set()
    budget = max_moves if max_moves is not None else -1
    replica_moves = reorders = 0

    names = {k: repr(k) for k in movable}  # the ranks' last key, made once

    def lowers_racks(reps: Sequence[int], src: int, dst: int) -> bool:
        """Whether replacing `src` by `dst` lowers the partition's number of racks: `src`
        alone in its rack, and `dst`'s rack already held by another replica."""
        if racks is None or racks[src] == racks[dst]:
            return False
        others = [racks[r] for r in reps if r != src]
        return racks[src] not in others and racks[dst] in others

    # ---- the tallies every phase keeps
    counts: Counter[int] = Counter({b: 0 for b in members})  # replicas per broker
    held: Counter[int] = Counter({b: 0 for b in members})  # bytes per broker
    holders: dict[int, set[K]] = {b: set() for b in members}  # movable partitions per broker
    for k, reps in current.items():
        counts.update(r for r in reps if r in counts)
        held.update({r: sizes.get(k, 0) for r in reps if r in held})
    for k in movable:
        for r in current[k]:
            if r in holders:
                holders[r].add(k)

    def move(k: K, src: int, dst: int) -> None:
        """`src`'s replica of `k` replaced in place by `dst`, the tallies kept."""
        current[k] = [dst if r == src else r for r in current[k]]
        for b, sign in ((src, -1), (dst, 1)):
            if b in counts:
                counts[b] += sign
                held[b] += sign * sizes.get(k, 0)
        holders.get(src, set()).discard(k)
        holders[dst].add(k)
        changed.add(k)

    # ---- phase 1: replica counts

    def step_replicas() -> bool:
        by_full = sorted(members, key=lambda b: (-counts[b], -loads.get(b, 0.0), -b))
        by_empty = sorted(members, key=lambda b: (counts[b], loads.get(b, 0.0), b))
        for src in by_full:
            for dst in by_empty:
                if counts[src] - counts[dst] < 2:
                    break
                best: tuple[tuple[int, int, str], K] | None = None
                for k in holders[src]:  # ranked by a unique key: the order is free
                    reps = current[k]
                    if dst in reps:
                        continue
                    rank = (1 if reps[0] == src else 0, sizes.get(k, 0), names[k])
                    if best is not None and rank >= best[0]:
                        continue
                    if not lowers_racks(reps, src, dst):
                        best = (rank, k)
                if best is not None:
                    k = best[1]
                    move(k, src, dst)
                    return True
        return False

    # Phase 0's work list, found once: no phase lowers a partition's racks, and a partition
    # short of racks always has a member of an unused rack to take a replica.
    member_racks = {racks[b] for b in members} if racks is not None else set()
    short_of_racks = [k for k in movable if racks is not None and len(
        {racks[r] for r in current[k]}) < min(len(current[k]), len(member_racks))]

    def step_racks() -> bool:
        """Phase 0: a partition with two replicas in one rack while a member's rack it
        does not use is left gets one of them moved there (a follower first)."""
        assert racks is not None
        while short_of_racks:
            k = short_of_racks.pop(0)
            reps = current[k]
            used = [racks[r] for r in reps]
            if len(set(used)) >= min(len(reps), len(member_racks)):
                continue
            free = [b for b in members if racks[b] not in used]
            dst = min(free, key=lambda b: (counts[b], loads.get(b, 0.0), b))
            src = next(r for i, r in reversed(list(enumerate(reps)))
                       if used.count(used[i]) > 1)
            move(k, src, dst)
            short_of_racks.insert(0, k)  # RF 3 in one rack needs two steps
            return True
        return False

    # ---- phase 2: bytes, by swaps (or a single move where the counts allow one)
    def fits(k: K, src: int, dst: int) -> bool:
        reps = current[k]
        return src in reps and dst not in reps and not lowers_racks(reps, src, dst)

    def step_bytes(swaps: bool) -> int:
        assert byte_gap is not None
        by_full = sorted(members, key=lambda b: (-held[b], b))
        for src in by_full:
            for dst in reversed(by_full):
                gap = held[src] - held[dst]
                if gap <= byte_gap:
                    break
                outs = [k for k in holders[src] if fits(k, src, dst)]
                if not outs:
                    continue
                half = gap / 2
                best: tuple[tuple[float, int, str, str], K, K | None] | None = None
                if counts[src] > counts[dst]:  # a single move keeps the counts' spread
                    for p in outs:
                        d = sizes.get(p, 0)
                        if 0 < d < gap:
                            rank = (abs(d - half), 0, names[p], "")
                            if best is None or rank < best[0]:
                                best = (rank, p, None)
                ins = sorted(((sizes.get(k, 0), names[k], k) for k in holders[dst]
                              if swaps and fits(k, dst, src)), key=lambda t: t[:2])
                in_sizes = [t[0] for t in ins]
                for p in outs:
                    # the q nearest half the gap below p's size: its neighbours by size
                    at = bisect_left(in_sizes, sizes.get(p, 0) - half)
                    for size_q, name_q, q in ins[max(0, at - 1):at + 1]:
                        d = sizes.get(p, 0) - size_q
                        if 0 < d < gap:
                            rank = (abs(d - half), 1, names[p], name_q)
                            if best is None or rank < best[0]:
                                best = (rank, p, q)
                if best is None:
                    continue
                _rank, p, q = best
                move(p, src, dst)
                if q is None:
                    return 1
                move(q, dst, src)
                return 2
        return 0

    # ---- phases 0-1, then 2: each step goes back to the first phase that has one
    while budget != 0:
        if (racks is not None and step_racks()) or step_replicas():
            replica_moves += 1
            budget -= 1
            continue
        n = step_bytes(swaps=budget != 1) if byte_gap is not None else 0
        if not n:  # a swap is two steps of the budget
            break
        replica_moves += n
        budget -= n if budget > 0 else 0

    # ---- phase 3: preferred leaders (first replicas), by reorders
    leaders: Counter[int] = Counter({b: 0 for b in members})
    leaders.update(reps[0] for reps in current.values() if reps and reps[0] in leaders)

    def step_leaders() -> bool:
        by_full = sorted(members, key=lambda b: (-leaders[b], -loads.get(b, 0.0), -b))
        by_empty = sorted(members, key=lambda b: (leaders[b], loads.get(b, 0.0), b))
        for src in by_full:
            for dst in by_empty:
                if leaders[src] - leaders[dst] < 2:
                    break
                for k in movable:
                    reps = current[k]
                    if reps[0] == src and dst in reps:
                        i = reps.index(dst)
                        reps[0], reps[i] = dst, src
                        leaders[src] -= 1
                        leaders[dst] += 1
                        changed.add(k)
                        return True
        return False

    while budget != 0 and step_leaders():
        reorders += 1
        budget -= 1

    moves = {k: current[k] for k in sorted(changed, key=repr)
             if current[k] != list(assignments[k])}
    return Plan(moves, replica_moves, reorders)
