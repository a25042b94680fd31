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

Bytes: each partition's size is the largest of its replicas' sizes in DescribeLogDirs
(sent to every registered broker, as `yak cluster logdirs` does; a broker that does not
answer is named and its partitions count with what the others report). The plan evens
bytes too while the fullest broker holds more than `--disk-threshold` percent of its
bytes more than the emptiest (the same rule as the controller's
`partition.autobalancing.disk.imbalance.threshold.percent`; 100 leaves bytes alone), and
the plan prints each broker's bytes before -> after.

Bad input or a refused move: one line, exit 2. Exit 0 with "balanced" when no move is
needed.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from yak.cli.common import (
    DEFAULT_BOOTSTRAP,
    MOVE_TIMEOUT_S,
    Bootstrap,
    Timeout,
    client_security,
    secured,
)
from yak.cli.decommission import cordoned_brokers, targets
from yak.cli.partitions import call, report
from yak.client.reassign_wire import ClusterView, TopicPartition, reassign_client
from yak.cluster.balancer import Plan, plan_moves

out = Console(highlight=False, soft_wrap=True)


def partition_sizes(bootstrap: str, timeout: float) -> dict[TopicPartition, int]:
    """Each partition's bytes: the largest of its replicas' sizes in DescribeLogDirs,
    asked of every registered broker."""
    from yak.cli.cluster import _describe_log_dirs  # `yak cluster logdirs`' request
    from yak.cli.common import connect_admin

    _admin, md = connect_admin(bootstrap, timeout)
    sizes: dict[TopicPartition, int] = {}
    for bid in sorted(md.brokers):
        b = md.brokers[bid]
        try:
            dirs = _describe_log_dirs(b.host, b.port, timeout)
        except Exception as e:  # noqa: BLE001 - one broker's answer must not stop the plan
            out.print(f"broker {bid}: sizes unknown ({str(e) or type(e).__name__}); its"
                      " partitions count with the other replicas' sizes")
            continue
        for d in dirs:
            for part in d["partitions"]:
                tp = (part["topic"], part["partition"])
                sizes[tp] = max(sizes.get(tp, 0), part["size"])
    return sizes


def byte_gap(current: dict[TopicPartition, list[int]], sizes: dict[TopicPartition, int],
             members: list[int], percent: int) -> int | None:
    """The byte gap left alone: `percent` of the fullest member's bytes (None at 100)."""
    if percent >= 100 or not members:
        return None
    held = {b: 0 for b in members}
    for tp, reps in current.items():
        for r in reps:
            if r in held:
                held[r] += sizes.get(tp, 0)
    return max(held.values()) * percent // 100


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def print_plan(view: ClusterView, plan: Plan[TopicPartition], current:
               dict[TopicPartition, list[int]], members: list[int],
               sizes: dict[TopicPartition, int]) -> None:
    """Each move (from -> to), then replicas, preferred leaders and bytes per broker
    before and after."""
    for (t, p), new in plan.moves.items():
        old = current[(t, p)]
        out.print(f"{t}/{p}: {','.join(map(str, old))} -> {','.join(map(str, new))}")
    after = {**current, **plan.moves}

    def n(a: dict[TopicPartition, list[int]], b: int, first: bool = False) -> int:
        return sum(1 for reps in a.values() if b in (reps[:1] if first else reps))

    def held(a: dict[TopicPartition, list[int]], b: int) -> str:
        return _size(sum(sizes.get(tp, 0) for tp, reps in a.items() if b in reps))

    for b in members:
        rack = view.brokers.get(b)
        out.print(f"broker {b}{f' (rack {rack})' if rack else ''}: replicas"
                  f" {n(current, b)} -> {n(after, b)}, preferred leaders"
                  f" {n(current, b, True)} -> {n(after, b, True)}, bytes"
                  f" {held(current, b)} -> {held(after, b)}")


@secured
def rebalance(
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the plan and move nothing.")] = False,
    max_moves: Annotated[int | None, typer.Option(
        "--max-moves", min=1, help="At most this many steps (replica moves and"
        " leader reorders); run again to go on.")] = None,
    disk_threshold: Annotated[int, typer.Option(
        "--disk-threshold", min=0, max=100, help="Even bytes while the fullest broker"
        " holds more than this percent of its bytes more than the emptiest (100: replica"
        " counts only).")] = 20,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = MOVE_TIMEOUT_S,
) -> None:
    """Even replicas, bytes and preferred leaders across brokers and racks (partition
    reassignments).

    Prints the plan (each partition's replicas before -> after, then the replicas,
    preferred leaders and bytes per broker), then submits it unless --dry-run. Returns once the moves are submitted;
    `yak partitions move-status` follows them.
    """
    with reassign_client(bootstrap, timeout, client_security()) as c:
        view = call("cannot rebalance", c.cluster)
        moving = call("cannot rebalance", c.ongoing)
        current = targets(view, moving)
        cordoned = call("cannot rebalance",
                        lambda: cordoned_brokers(view.brokers, bootstrap, timeout))
        members = sorted(b for b in view.brokers if b not in cordoned)
        sizes = partition_sizes(bootstrap, timeout) if disk_threshold < 100 else {}
        plan = plan_moves(current, view.brokers, cordoned=cordoned,
                          fixed={(o.topic, o.partition) for o in moving},
                          max_moves=max_moves, sizes=sizes,
                          byte_gap=byte_gap(current, sizes, members, disk_threshold))
        if not plan:
            out.print(f"balanced: no move needed over brokers {members}"
                      + (f" ({len(moving)} partition(s) still moving)" if moving else ""))
            return
        out.print(f"plan: {plan.replica_moves} replica move(s), {plan.reorders} leader"
                  f" reorder(s) in {len(plan.moves)} partition(s)"
                  + (f"; cordoned: {sorted(cordoned)}" if cordoned else ""))
        print_plan(view, plan, current, members, sizes)
        if dry_run:
            out.print("dry run: nothing submitted")
            return
        results = call("cannot rebalance", lambda: c.alter(plan.moves))
    report("cannot rebalance", results,
           lambda tp: f"moving to replicas {','.join(map(str, plan.moves[tp]))}")
    out.print(f"{len(plan.moves)} partition(s) submitted (yak partitions move-status shows"
              " them)")
