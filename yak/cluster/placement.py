"""Replica placement for new partitions: Kafka's round robin (`AdminUtils.assignReplicasToBrokers`).

Why Kafka's algorithm: operators know what it produces, and it spreads both leaders (the
first replica of each partition walks round the brokers from a random start) and
followers (the second replica's distance from the first shifts once per round, so a
broker's partitions are not all followed by the same neighbour). With every broker in a
rack (`broker.rack`), Kafka's rack-aware variant is used: brokers are ordered alternating
between racks, and a partition's replicas go to distinct racks while racks without one
remain. Brokers are placed by node id, so the same inputs give the same result.

Load (issue 23): the caller may pass `preferred`, the brokers least loaded first
(`broker_load.preference`). The round robin then walks that order from its first broker
instead of node-id order from a random start, so the first replicas (the leaders) and any
remainder of partitions past a multiple of the broker count go to the least-loaded
brokers, and every other property of the round robin (spread of leaders and followers,
racks) is kept. The topic manager passes it only when the reports differ; brokers that
are all about idle are placed exactly as before.

Draining a broker (`drain_plan`, `yak cluster decommission`, issue 23) keeps every other
replica where it is and gives each of the leaving broker's replicas to the least-loaded
broker (fewest replicas, counting those the plan has already given) that is not already a
replica, preferring one in a rack the partition's other replicas do not use, by the same
rack rule; ties go to the lower node id, so a plan is reproducible. `drain` does the same
when some brokers cannot take a replica now (down, or cordoned: KIP-1066): only `usable`
brokers are targets, and a partition that cannot move now is *deferred* with the reason
rather than planned onto a broker the reassignment would refuse (INVALID_REPLICA_
ASSIGNMENT names an unregistered broker): one with another replica on a down broker (the
target would still name it), or one with no usable broker outside its replicas (too few
live brokers for its replication factor). Only a partition that the cluster's brokers
could never hold, down ones counted, is refused.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from yak.errors import InvalidReplicationFactorError

__all__ = ["Drain", "assign_replicas", "drain", "drain_plan"]

K = TypeVar("K", bound=Hashable)


def assign_replicas(
    partitions: int,
    replication_factor: int,
    brokers: Mapping[int, str | None] | Sequence[int],
    *,
    start_partition: int = 0,
    fixed_start_index: int = -1,
    rng: random.Random | None = None,
    preferred: Sequence[int] | None = None,
) -> list[list[int]]:
    """Replica lists for `partitions` new partitions (numbered from `start_partition`).

    `brokers`: node ids, or node id -> rack. INVALID_REPLICATION_FACTOR when there are
    fewer brokers than `replication_factor`. `fixed_start_index` >= 0 makes the result
    deterministic (Kafka uses it when adding partitions, and in its tests). `preferred`:
    the brokers least loaded first (others after them by id); the walk starts at its
    first broker (`fixed_start_index` is then ignored).
    """
    racks: dict[int, str | None] = (dict(brokers) if isinstance(brokers, Mapping)
                                    else {b: None for b in brokers})
    if replication_factor < 1:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(racks):
        raise InvalidReplicationFactorError(
            f"Unable to replicate the partition {replication_factor} time(s): The target"
            f" replication factor of {replication_factor} cannot be reached because only"
            f" {len(racks)} broker(s) are registered.")
    if partitions <= 0:
        return []
    rng = rng or random.Random()
    order = sorted(racks)
    if preferred is not None:
        rank = {b: i for i, b in enumerate(preferred)}
        order.sort(key=lambda b: (rank.get(b, len(rank)), b))
        fixed_start_index = 0
    if racks and all(r is not None for r in racks.values()):
        return _rack_aware(partitions, replication_factor, racks,  # type: ignore[arg-type]
                           fixed_start_index, start_partition, rng,
                           order if preferred is not None else None)
    return _rack_unaware(partitions, replication_factor, order, fixed_start_index,
                         start_partition, rng)


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_unaware(n_partitions: int, rf: int, brokers: list[int], fixed_start: int,
                  start_partition: int, rng: random.Random) -> list[list[int]]:
    n = len(brokers)
    start = fixed_start if fixed_start >= 0 else rng.randrange(n)
    shift = fixed_start if fixed_start >= 0 else rng.randrange(n)
    out: list[list[int]] = []
    pid = max(0, start_partition)
    for _ in range(n_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        replicas = [brokers[first]]
        for j in range(rf - 1):
            replicas.append(brokers[_replica_index(first, shift, j, n)])
        out.append(replicas)
        pid += 1
    return out


def _rack_alternated(racks: Mapping[int, str], order: Sequence[int] | None = None
                     ) -> list[int]:
    """Brokers alternating between racks; `order` (default: by id) orders each rack's
    brokers and the racks (by their first broker in it)."""
    by_rack: dict[str, list[int]] = {}
    for b in order if order is not None else sorted(racks):
        by_rack.setdefault(racks[b], []).append(b)
    names = list(by_rack) if order is not None else sorted(by_rack)
    iters = {r: iter(by_rack[r]) for r in names}
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        b = next(iters[names[i]], None)
        if b is not None:
            out.append(b)
        i = (i + 1) % len(names)
    return out


def _rack_aware(n_partitions: int, rf: int, racks: Mapping[int, str], fixed_start: int,
                start_partition: int, rng: random.Random,
                order: Sequence[int] | None = None) -> list[list[int]]:
    arranged = _rack_alternated(racks, order)
    n = len(arranged)
    n_racks = len(set(racks.values()))
    start = fixed_start if fixed_start >= 0 else rng.randrange(n)
    shift = fixed_start if fixed_start >= 0 else rng.randrange(n)
    out: list[list[int]] = []
    pid = max(0, start_partition)
    for _ in range(n_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        leader = arranged[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        used = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                b = arranged[_replica_index(first, shift * n_racks, k, n)]
                k += 1
                rack = racks[b]
                if ((rack not in used_racks or len(used_racks) == n_racks)
                        and (b not in used or len(used) == n)):
                    replicas.append(b)
                    used_racks.add(rack)
                    used.add(b)
                    break
        out.append(replicas)
        pid += 1
    return out


@dataclass
class Drain(Generic[K]):
    """`drain`'s answer: the moves to submit now, and the partitions left for later, each
    with the reason in one line."""

    moves: dict[K, list[int]] = field(default_factory=dict)
    deferred: dict[K, str] = field(default_factory=dict)


def drain(assignments: Mapping[K, Sequence[int]], leaving: int,
          brokers: Mapping[int, str | None], *, live: Collection[int] | None = None,
          cordoned: Collection[int] = ()) -> Drain[K]:
    """Moves off `leaving` over `brokers` (node id -> rack: every broker of the cluster,
    down ones included), each replica going to a `live` (registered; default: all of
    `brokers`) broker that is not `cordoned`; see the module docstring. `leaving` itself
    may be down.

    INVALID_REPLICATION_FACTOR when some partition has more replicas than the brokers
    other than `leaving` could ever hold.
    """
    others = {b: r for b, r in brokers.items() if b != leaving}
    up = set(others if live is None else live) - {leaving}
    targets = up - set(cordoned)
    load: Counter[int] = Counter(r for reps in assignments.values() for r in reps)
    out: Drain[K] = Drain()
    for key, replicas in sorted(assignments.items(), key=lambda kv: repr(kv[0])):
        if leaving not in replicas:
            continue
        if len(replicas) > len(others):
            raise InvalidReplicationFactorError(
                f"{key} has {len(replicas)} replicas and only {len(others)} broker(s) other"
                f" than {leaving} remain")
        down = [r for r in replicas if r != leaving and r not in up]
        if down:
            out.deferred[key] = (f"its replica on broker {down[0]} is down (a target naming"
                                 " it would be refused)")
            continue
        candidates = [b for b in sorted(targets) if b not in replicas]
        if not candidates:
            out.deferred[key] = ("no live, uncordoned broker outside its replicas"
                                 f" {','.join(map(str, replicas))}")
            continue
        used_racks = {others.get(r) for r in replicas if r != leaving} - {None}
        new = min(candidates, key=lambda b: (others.get(b) in used_racks, load[b], b))
        load[new] += 1
        load[leaving] -= 1
        out.moves[key] = [new if r == leaving else r for r in replicas]
    return out


def drain_plan(assignments: Mapping[K, Sequence[int]], leaving: int,
               brokers: Mapping[int, str | None]) -> dict[K, list[int]]:
    """New replica lists for every partition in `assignments` that has `leaving` among its
    replicas, every broker of `brokers` (node id -> rack) live and uncordoned: `leaving`
    replaced in place (so a partition's preferred leader changes only where it was
    `leaving`) by the least-loaded broker not already a replica, preferring a rack the
    other replicas lack (`drain` with nothing deferred).

    INVALID_REPLICATION_FACTOR when some partition has more replicas than the brokers
    other than `leaving` can hold.
    """
    return drain(assignments, leaving, brokers).moves
