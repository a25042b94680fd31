"""`yak cluster decommission BROKER_ID [--status]`: move every replica off a broker (issue 23),
as Redpanda's `rpk redpanda admin brokers decommission` and a `kafka-reassign-partitions.sh`
plan without the broker do.

Why under `yak cluster`: it acts on the cluster's shape, beside `info`, `health` and
`logdirs`, and reaches any cluster through `--bootstrap`; the partition moves it submits are
ordinary reassignments, so `yak partitions move-status` and `move-cancel` see them too.

The plan is computed here, from Metadata, ListPartitionReassignments and the brokers'
cordons (DescribeConfigs), by `yak/cluster/placement.py`'s `drain` (each replica on the
broker replaced by the least-loaded live, uncordoned broker not already a replica, racks
spread where they can be). With another broker down, a partition that also has a replica
there cannot move yet (the target would still name the down broker, which the
reassignment refuses as INVALID_REPLICA_ASSIGNMENT), nor can one with no live, uncordoned
broker outside its replicas: those are listed with the reason, the rest are submitted,
and `--wait S` keeps trying them every `RETRY_S` (running the command again does too). For a
partition already moving, its target is drained, and a partition that is only leaving the
broker is left to finish. The targets are written with AlterPartitionReassignments and
live in etcd, so the moves go on across controller and broker restarts; running the
command again submits whatever still has the broker in its target (it is idempotent).

Refused with one line and exit 2: a broker that is neither registered nor holds a replica,
a broker that is down and holds the only in-sync copy of a partition (no other broker has
what it would have to copy; the issue's "removing the only in-sync copy is refused"), and
a cluster whose other brokers cannot hold some partition's replication factor.

The drain is recorded as Kafka's KIP-1066 cordon: `cordoned.log.dirs=*` in the broker's
own dynamic configs (IncrementalAlterConfigs, sent to that broker, stored in etcd), so
the topic manager places no new replica on it while it drains (`cluster_topics.py`), and
`yak config describe --broker N` shows it. `--cancel` is the recommission: it deletes
the cordon and cancels the moves still taking replicas off the broker (ListPartition-
Reassignments' removing set), which Kafka's cancellation reverts. A broker that is down
cannot be reached to be cordoned (a per-broker config goes to that broker, as in Kafka);
it gets no new replica while it is down, and the command says so.
"""

from __future__ import annotations

import json
import time
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
from yak.cli.partitions import call, fail_line, report
from yak.client.config_wire import BROKER, DELETE, SET, ConfigWireError, config_client
from yak.client.reassign_wire import (
    ClusterView,
    Ongoing,
    ReassignClient,
    TopicPartition,
    reassign_client,
)
from yak.cluster.placement import Drain, drain
from yak.errors import InvalidReplicationFactorError, KafkaError

out = Console(highlight=False, soft_wrap=True)

CORDON = "cordoned.log.dirs"  # KIP-1066; yak/cluster/cluster_topics.py reads it
RETRY_S = 2.0  # --wait: how often the partitions that could not move are tried again


def cordoned_brokers(brokers: dict[int, str | None], bootstrap: str, timeout: float
                     ) -> set[int]:
    """The registered brokers whose own dynamic configs set `cordoned.log.dirs` (one that
    cannot be asked is named and treated as cordoned: nothing is placed on it)."""
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


def targets(view: ClusterView, moving: list[Ongoing]) -> dict[TopicPartition, list[int]]:
    """Each partition's replicas as they will be: a moving partition's target."""
    now = {tp: list(s.replicas) for tp, s in view.partitions.items()}
    for o in moving:
        now[(o.topic, o.partition)] = list(o.target)
    return now


def _tp(name: str) -> TopicPartition:
    topic, _, p = name.rpartition("/")
    return topic, int(p)


def remaining(view: ClusterView, broker: int) -> list[TopicPartition]:
    """Partitions that still have a replica on `broker` (target or leaving)."""
    return sorted(tp for tp, s in view.partitions.items() if broker in s.replicas)


@secured
def decommission(
    broker: Annotated[int, typer.Argument(min=0, help="The broker's node id.")],
    status: Annotated[bool, typer.Option(
        "--status", help="Only show how many partitions still have a replica on it.")]
    = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --status: one JSON object.")]
    = False,
    cancel: Annotated[bool, typer.Option(
        "--cancel", help="Recommission: take the cordon off and cancel the moves still"
        " taking replicas off it.")] = False,
    wait: Annotated[float, typer.Option(
        "--wait", min=0, help="Seconds to keep retrying the partitions that cannot move"
        " yet (a replica on a down broker, too few live brokers), every 2 s.")] = 0.0,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = MOVE_TIMEOUT_S,
) -> None:
    """Move every replica off a broker (partition reassignments), so it can be stopped.

    The broker is cordoned first (cordoned.log.dirs=*: no new replica goes to it). Each
    replica on it goes to the least-loaded live, uncordoned broker that is not already a
    replica of that partition. A partition that cannot move yet (another replica on a down
    broker, no such broker left) is listed and retried with --wait; running the command
    again retries it too. Returns once the moves are submitted; --status shows what is
    left (exit 0 either way). Refused (exit 2) when the other brokers cannot hold some
    partition's replication factor, or when the broker is down and holds a partition's
    only in-sync copy.
    """
    what = f"cannot decommission broker {broker}"
    with reassign_client(bootstrap, timeout, client_security()) as c:
        view = call(what, c.cluster)
        moving = call(what, c.ongoing)
        left = remaining(view, broker)
        if status:
            _show_status(broker, left, moving, as_json)
            return
        if cancel:
            _recommission(c, broker, view.brokers, moving, bootstrap, timeout)
            return
        if broker not in view.brokers and not left:
            known = ", ".join(map(str, sorted(view.brokers))) or "none"
            fail_line(f"broker {broker} is not in the cluster and holds no replicas"
                      f" (brokers: {known})", 2)
        stranded = [f"{t}/{p}" for (t, p), st in sorted(view.partitions.items())
                    if broker in st.replicas and not set(st.isr) & (view.brokers.keys() - {broker})]
        if broker not in view.brokers and stranded:
            fail_line(f"cannot decommission broker {broker}: it is down and holds the only"
                      f" in-sync copy of {', '.join(stranded)}; start it again first", 2)
        plan = _plan(broker, view, moving, bootstrap, timeout)
        _cordon(broker, broker in view.brokers, bootstrap, timeout, SET)
        deadline = time.monotonic() + wait
        submitted = 0
        while True:
            if plan.moves:
                results = call(what, lambda moves=plan.moves: c.alter(moves))
                report(what, results, lambda tp, moves=plan.moves:
                       f"moving to replicas {','.join(map(str, moves[tp]))}")
                submitted += len(plan.moves)
            if not plan.deferred or time.monotonic() >= deadline:
                break
            time.sleep(RETRY_S)
            view = call(what, c.cluster)
            moving = call(what, c.ongoing)
            plan = _plan(broker, view, moving, bootstrap, timeout)
    for tp, why in plan.deferred.items():
        out.print(f"{tp[0]}/{tp[1]}: not moved yet: {why}")
    if not submitted and not plan.deferred:
        out.print(f"broker {broker}: no partition is to be moved"
                  + (f" ({len(left)} still leaving it)" if left else
                     "; it holds no replicas and can be stopped"))
        return
    out.print(f"broker {broker}: {submitted} partition(s) moving off it"
              + (f", {len(plan.deferred)} not movable yet (run this again, or with --wait,"
                 " once the brokers named are up)" if plan.deferred else "")
              + f" (yak cluster decommission {broker} --status shows what is left)")


def _plan(broker: int, view: ClusterView, moving: list[Ongoing], bootstrap: str,
          timeout: float) -> Drain[TopicPartition]:
    """The drain over the live, uncordoned brokers; a down broker counts only for what
    the cluster could ever hold (its rack is not known over the wire)."""
    known: dict[int, str | None] = {r: None for st in view.partitions.values()
                                    for r in st.replicas}
    known.update(view.brokers)
    others = {b: r for b, r in view.brokers.items() if b != broker}
    cordoned = call(f"cannot decommission broker {broker}",
                    lambda: cordoned_brokers(others, bootstrap, timeout))
    try:  # keyed "topic/partition", the way the refusal names one
        named = drain({f"{t}/{p}": r for (t, p), r in targets(view, moving).items()},
                      broker, known, live=view.brokers, cordoned=cordoned)
    except InvalidReplicationFactorError as e:
        fail_line(f"cannot decommission broker {broker}: {e.message}", 2)
    return Drain({_tp(k): r for k, r in named.moves.items()},
                 {_tp(k): why for k, why in named.deferred.items()})


def _cordon(broker: int, registered: bool, bootstrap: str, timeout: float, op: int) -> None:
    """Set (SET) or delete (DELETE) the broker's cordon, on the broker itself."""
    if not registered:
        out.print(f"broker {broker} is down: not cordoned (a down broker gets no new"
                  " replicas; run this again once it is up, before it takes any)")
        return
    with config_client(bootstrap, timeout, client_security()) as cc:
        call(f"cannot {'cordon' if op == SET else 'uncordon'} broker {broker}",
             lambda: cc.alter(BROKER, str(broker), [(CORDON, op, "*" if op == SET else None)]))


def _recommission(c: ReassignClient, broker: int, brokers: dict[int, str | None],
                  moving: list[Ongoing], bootstrap: str, timeout: float) -> None:
    """`--cancel`: the cordon off, then the moves taking replicas off it cancelled."""
    _cordon(broker, broker in brokers, bootstrap, timeout, DELETE)
    leaving = {(o.topic, o.partition): None for o in moving if broker in o.removing}
    if leaving:
        results = call(f"cannot recommission broker {broker}",
                       lambda: c.alter(leaving))
        report(f"cannot recommission broker {broker}", results,
               lambda tp: "move off it cancelled")
    out.print(f"broker {broker}: recommissioned ({len(leaving)} move(s) off it cancelled);"
              " it takes new replicas again")


def _show_status(broker: int, left: list[TopicPartition], moving: list[Ongoing],
                 as_json: bool) -> None:
    in_move = {(o.topic, o.partition) for o in moving}
    still_moving = [tp for tp in left if tp in in_move]
    if as_json:
        print(json.dumps({"broker": broker, "remaining": len(left),
                          "moving": len(still_moving),
                          "partitions": [f"{t}/{p}" for t, p in left]}))
    elif not left:
        out.print(f"broker {broker} holds no replicas: it can be stopped")
    else:
        out.print(f"broker {broker}: {len(left)} partition(s) still have a replica on it,"
                  f" {len(still_moving)} of them moving")
