"""`yak cluster rebalance [--dry-run] [--max-moves N]`: even the partitions across brokers
once (issue 23), as Cruise Control's rebalance or `rpk cluster partitions balance`.

Why a one-shot command beside the controller's autobalancer (`partition.autobalancing.mode`,
docs/cluster.md "Balancing"): an operator wants to see a plan before anything moves, and
to run it on a cluster whose automatic balancing is off.

The plan comes from `yak/cluster/balancer.py` (pure) over what the wire tells: Metadata
(the registered brokers with their racks, every partition's replicas), ListPartition-
Reassignments (a moving partition counts with its target and is never replanned) and
each broker's `cordoned.log.dirs` (DescribeConfigs; a cordoned broker takes nothing).
Partitions with a replica on a broker that is down are left alone. The moves are
submitted as ordinary KIP-455 reassignments, so they live in etcd, survive restarts, are
seen by `yak partitions move-status` and cancelled by `move-cancel`, and any replication
throttle already set (`*.replication.throttled.rate` on brokers and the topics'
`*.replication.throttled.replicas`) applies to them as to any move. Load scores are not
read here (the controller's autobalancer uses them to break ties).

Bad input or a refused move: one line, exit 2. Exit 0 with "balanced" when no move is
needed.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from yak.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    Bootstrap,
    Timeout,
    client_security,
    secured,
)
from yak.cli.config_wire import BROKER, ConfigWireError, config_client
from yak.cli.decommission import CORDON, targets
from yak.cli.partitions import call, report
from yak.cli.reassign_wire import ClusterView, TopicPartition, reassign_client
from yak.cluster.balancer import Plan, plan_moves
from yak.errors import KafkaError

out = Console(highlight=False, soft_wrap=True)


def cordoned_brokers(brokers: dict[int, str | None], bootstrap: str, timeout: float
                     ) -> set[int]:
    """The registered brokers whose own dynamic configs set `cordoned.log.dirs`."""
    found: set[int] = set()
    with config_client(bootstrap, timeout, client_security()) as cc:
        for b in sorted(brokers):
            try:
                entries = cc.describe(BROKER, str(b), [CORDON])
            except (ConfigWireError, KafkaError, OSError) as e:
                out.print(f"broker {b}: cordon unknown ({e}); it is treated as cordoned")
                found.add(b)
                continue
            if any(e.name == CORDON and e.value for e in entries):
                found.add(b)
    return found


def print_plan(view: ClusterView, plan: Plan[TopicPartition], current:
               dict[TopicPartition, list[int]], members: list[int]) -> None:
    """Each move (from -> to), then replicas and preferred leaders per broker before and
    after."""
    for (t, p), new in plan.moves.items():
        old = current[(t, p)]
        out.print(f"{t}/{p}: {','.join(map(str, old))} -> {','.join(map(str, new))}")
    after = {**current, **plan.moves}

    def n(a: dict[TopicPartition, list[int]], b: int, first: bool = False) -> int:
        return sum(1 for reps in a.values() if b in (reps[:1] if first else reps))

    for b in members:
        rack = view.brokers.get(b)
        out.print(f"broker {b}{f' (rack {rack})' if rack else ''}: replicas"
                  f" {n(current, b)} -> {n(after, b)}, preferred leaders"
                  f" {n(current, b, True)} -> {n(after, b, True)}")


@secured
def rebalance(
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the plan and move nothing.")] = False,
    max_moves: Annotated[int | None, typer.Option(
        "--max-moves", min=1, help="At most this many steps (replica moves and"
        " leader reorders); run again to go on.")] = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Even replicas and preferred leaders across brokers (partition reassignments).

    Prints the plan (each partition's replicas before -> after, then the counts per
    broker), then submits it unless --dry-run. Returns once the moves are submitted;
    `yak partitions move-status` follows them.
    """
    with reassign_client(bootstrap, timeout, client_security()) as c:
        view = call("cannot rebalance", c.cluster)
        moving = call("cannot rebalance", c.ongoing)
        current = targets(view, moving)
        cordoned = call("cannot rebalance",
                        lambda: cordoned_brokers(view.brokers, bootstrap, timeout))
        plan = plan_moves(current, view.brokers, cordoned=cordoned,
                          fixed={(o.topic, o.partition) for o in moving},
                          max_moves=max_moves)
        members = sorted(b for b in view.brokers if b not in cordoned)
        if not plan:
            out.print(f"balanced: no move needed over brokers {members}"
                      + (f" ({len(moving)} partition(s) still moving)" if moving else ""))
            return
        out.print(f"plan: {plan.replica_moves} replica move(s), {plan.reorders} leader"
                  f" reorder(s) in {len(plan.moves)} partition(s)"
                  + (f"; cordoned: {sorted(cordoned)}" if cordoned else ""))
        print_plan(view, plan, current, members)
        if dry_run:
            out.print("dry run: nothing submitted")
            return
        results = call("cannot rebalance", lambda: c.alter(plan.moves))
    report("cannot rebalance", results,
           lambda tp: f"moving to replicas {','.join(map(str, plan.moves[tp]))}")
    out.print(f"{len(plan.moves)} partition(s) submitted (yak partitions move-status shows"
              " them)")
