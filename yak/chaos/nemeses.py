"""The elastic nemeses: partition moves, broker decommissions and rebalances during a run.

Kafka's safety claims must hold while the cluster changes shape, not only while its
processes die: a reassignment adds replicas that catch up, grows the ISR, hands leadership
over and deletes the removed replicas' data, and a kill or a pause can land in the middle
of any of these. Jepsen's Redpanda analysis ran membership changes beside process faults
for the same reason. These nemeses act as an operator would, over the wire:

    reassign      one partition of a workload topic to a random valid replica set of the
                  same replication factor over the live brokers (AlterPartitionReassign-
                  ments, API 45), waited for up to MOVE_BOUND_S, cancelled past it; half
                  the completed moves are then moved back the same way
    decommission  `yak cluster decommission N` on a live broker, when the other live
                  brokers can hold the replication factor; its replicas are waited off for
                  up to DECOMMISSION_BOUND_S, then `--cancel` recommissions it (whatever is
                  still moving off it is cancelled), so later faults have it back
    rebalance     `yak cluster rebalance`, its moves waited for up to MOVE_BOUND_S and
                  cancelled past it

Why a thread of their own (`ElasticNemesis`) beside the process and network faults'
nemesis: a move lasts seconds and the point is that a kill, a pause or a cut lands in the
middle of one. The faults' nemesis holds one fault at a time; these overlap with it. They
do not count as "in force" for the crash watcher (they kill nothing), so a broker that
dies during a move is still caught as a crash.

Each operation is a nemesis start/stop pair in the history, like a fault, with the stop
carrying its `outcome` ("completed", "moved back", "cancelled after 60 s", "drained in
7 s; recommissioned", "exit 2: ..." for a command that failed, "refused: ..." for a
refused move), and `during`: the faults in force at some moment of it. The report's
per-fault table shows both. The replica comparison after healing reads the
final replica sets from Metadata, not the initial ones (runner.py).

The choices are pure functions (`replica_set_choices`, `choose_move`,
`decommission_candidates`), tested in tests/chaos/test_nemeses.py.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import permutations
from typing import Any

from yak.chaos.env import ChaosCluster
from yak.chaos.history import Recorder
from yak.client.reassign_wire import ClusterView, ReassignClient, TopicPartition

__all__ = ["ELASTIC", "ElasticNemesis", "choose_move", "decommission_candidates",
           "elastic_unsupported", "planned_moves", "replica_set_choices"]

log = logging.getLogger(__name__)

ELASTIC = ("reassign", "decommission", "rebalance")

MOVE_BOUND_S = 60.0
"""How long a reassignment (or a rebalance's moves) may take before it is cancelled."""

DECOMMISSION_BOUND_S = 90.0
"""How long a decommission may drain before the broker is recommissioned anyway."""

CALL_TIMEOUT_S = 5.0
"""One request's bound (a paused broker answers nothing: the next one is tried)."""

CLI_TIMEOUT_S = 60.0
"""One `yak cluster ...` command's bound."""

POLL_S = 1.0


# ---------------------------------------------------------------------- choices (pure)

def replica_set_choices(current: Sequence[int], live: Sequence[int], rf: int
                        ) -> list[tuple[int, ...]]:
    """Every ordered replica set of `rf` distinct live brokers other than `current`, the
    ones that change the set of brokers first (those move data; a reordering only changes
    the preferred leader). Empty when fewer than `rf` brokers are live."""
    live = sorted(set(live))
    if rf < 1 or len(live) < rf:
        return []
    cur = tuple(current)
    moving = [p for p in permutations(live, rf) if set(p) != set(cur)]
    reorder = [p for p in permutations(live, rf) if set(p) == set(cur) and p != cur]
    return moving + reorder


def choose_move(rng: random.Random, partitions: Mapping[TopicPartition, Sequence[int]],
                live: Sequence[int], moving: set[TopicPartition], rf: int
                ) -> tuple[TopicPartition, tuple[int, ...]] | None:
    """A random partition not already moving, with its replication factor `rf`, and a
    random new replica set for it over the live brokers: one that moves data when the
    live brokers allow it, else a reordering. None if there is no such partition."""
    candidates = sorted(tp for tp, r in partitions.items() if tp not in moving and len(r) == rf)
    rng.shuffle(candidates)
    for tp in candidates:
        sets = replica_set_choices(partitions[tp], live, rf)
        if not sets:
            continue
        data = [s for s in sets if set(s) != set(partitions[tp])]
        return tp, rng.choice(data or sets)
    return None


def decommission_candidates(view: ClusterView, live: Sequence[int], rf: int) -> list[int]:
    """Live brokers that can be drained: the other live brokers can hold `rf` replicas of
    every partition, and every partition on the broker has another in-sync replica."""
    out = []
    for b in sorted(set(live) & set(view.brokers)):
        others = set(live) - {b}
        if len(others) < rf:
            continue
        if all(set(s.isr) - {b} for s in view.partitions.values() if b in s.replicas):
            out.append(b)
    return out


def elastic_unsupported(name: str, brokers: int, rf: int) -> str | None:
    if brokers == 1:
        return f"{name} moves replicas between brokers: it needs 3 or 5 brokers"
    if name == "decommission" and brokers <= rf:
        return (f"decommission needs more brokers than the replication factor ({rf}):"
                f" run with 5 brokers")
    return None


# ---------------------------------------------------------------------- the nemesis

class ElasticNemesis:
    """Runs the elastic operations, at random in its own thread (`start`) or one by one
    (`run_one`, for a schedule). `next_id` numbers operations with the faults' nemesis;
    `in_force(since)` names the faults in force at some moment since a time of the run
    (each operation's `during`: a kill that came and went while a command ran counts)."""

    def __init__(self, cluster: ChaosCluster, rec: Recorder, names: Sequence[str], *,
                 seed: int, interval: tuple[float, float], topic_prefix: str,
                 next_id: Callable[[], int], in_force: Callable[[float | None], list[str]],
                 stop_event: threading.Event,
                 progress: Callable[[str], None] | None = None) -> None:
        self.cluster = cluster
        self.rec = rec
        self.names = list(names)
        self.rng = random.Random(seed * 7919 + 1)
        self.interval = interval
        self.topic_prefix = topic_prefix
        self.next_id = next_id
        self.in_force = in_force
        self.stop_event = stop_event
        self.progress = progress or (lambda _m: None)
        self.injected: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._submitted: set[TopicPartition] = set()  # moves of ours maybe still going
        self._cordoned: set[int] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def rf(self) -> int:
        return self.cluster.spec.replication_factor

    # -------------------------------------------------------------- loop

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="chaos-elastic", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        bag: list[str] = []
        while not self.stop_event.wait(self.rng.uniform(*self.interval)):
            if not bag:
                bag = self.names[:]
                self.rng.shuffle(bag)
            self.run_one(bag.pop())

    def run_one(self, name: str) -> None:
        try:
            {"reassign": self._reassign, "decommission": self._decommission,
             "rebalance": self._rebalance}[name]()
        except Exception as e:
            msg = f"{name}: {type(e).__name__}: {e}"
            log.warning(msg)
            self.errors.append(msg)
            self.rec.add({"op": "nemesis", "fault": name, "phase": "error", "detail": msg})

    # -------------------------------------------------------------- the wire

    def _bootstrap(self) -> str:
        c = self.cluster
        nodes = [n for n in c.node_ids if c.alive(n)] or c.node_ids
        nodes = nodes[:]
        self.rng.shuffle(nodes)
        return ",".join(f"{c.host(n)}:{c.kafka_port(n)}" for n in nodes)

    def _call(self, fn: Callable[[ReassignClient], Any], bound_s: float = 30.0) -> Any:
        """fn(client) on a fresh connection, retried (another broker first) until bound_s."""
        deadline = time.monotonic() + bound_s
        while True:
            client: ReassignClient | None = None
            try:
                client = ReassignClient(self._bootstrap(), CALL_TIMEOUT_S, None)
                return fn(client)
            except Exception as e:
                if time.monotonic() >= deadline:
                    raise
                log.info("elastic nemesis call failed (retrying): %s", e)
                time.sleep(POLL_S)
            finally:
                if client is not None:
                    with contextlib.suppress(Exception):
                        client.close()

    def _cli(self, *args: str) -> tuple[int, str, list[str]]:
        """`yak cluster ARGS` as an operator runs it: (exit status, its last output line,
        all its lines)."""
        argv = [sys.executable, "-m", "yak.cli.main", "cluster", *args,
                "--bootstrap", self._bootstrap(), "--timeout", str(CALL_TIMEOUT_S * 2)]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return 124, f"yak cluster {' '.join(args)}: no answer in {CLI_TIMEOUT_S:g} s", []
        lines = (p.stdout + p.stderr).strip().splitlines()
        return p.returncode, lines[-1].strip() if lines else "", lines

    def _live(self) -> list[int]:
        return [n for n in self.cluster.node_ids if self.cluster.alive(n)]

    def _workload_partitions(self, view: ClusterView) -> dict[TopicPartition, tuple[int, ...]]:
        return {tp: s.replicas for tp, s in view.partitions.items()
                if tp[0].startswith(self.topic_prefix)}

    # -------------------------------------------------------------- operations

    def _begin(self, name: str, target: str, **info: Any) -> tuple[int, dict[str, Any],
                                                                      set[str]]:
        key = self.next_id()
        op = self.rec.add({"op": "nemesis", "fault": name, "phase": "start", "id": key,
                           "target": target, **info})
        self.progress(f"fault {key}: {name} {target}")
        return key, op, set()

    def _end(self, name: str, key: int, start: dict[str, Any], during: set[str],
             outcome: str, **info: Any) -> None:
        during.update(self.in_force(float(start["time"])))
        stop = self.rec.add({"op": "nemesis", "fault": name, "phase": "stop", "id": key,
                             "target": start.get("target"), "outcome": outcome,
                             "during": sorted(during), **info})
        self.progress(f"fault {key}: {name} {outcome}"
                      + (f" (during {', '.join(sorted(during))})" if during else ""))
        self.injected.append({"fault": name, "target": start.get("target"),
                              "start": start["time"], "stop": stop["time"],
                              "outcome": outcome, "during": sorted(during)})

    def _wait_moves(self, tps: set[TopicPartition], targets: Mapping[TopicPartition,
                    Sequence[int]] | None, bound_s: float, stoppable: bool = True
                    ) -> set[TopicPartition]:
        """Until none of `tps` is moving any more (and, given targets, each has its target
        as its replicas): the ones still moving at the bound (or at stop, if `stoppable`:
        a cancellation is waited for even at the run's end)."""
        deadline = time.monotonic() + bound_s
        left = set(tps)
        while left:
            with contextlib.suppress(Exception):
                ongoing, view = self._call(lambda c: (c.ongoing(), c.cluster()), 10.0)
                busy = {(o.topic, o.partition) for o in ongoing}
                left = {tp for tp in left if tp in busy or (
                    targets is not None and tp in view.partitions
                    and tuple(view.partitions[tp].replicas) != tuple(targets[tp]))}
            if not left or time.monotonic() >= deadline:
                break
            if stoppable:
                if self.stop_event.wait(POLL_S):
                    break
            else:
                time.sleep(POLL_S)
        return left

    def _cancel(self, tps: set[TopicPartition]) -> str:
        """Cancel moves (a cancellation reverts them), and wait until they are gone."""
        if not tps:
            return ""
        res = self._call(lambda c: c.alter(dict.fromkeys(tps)))
        bad = {tp: e for tp, e in res.items() if e[0] and e[0] != 85}  # 85: none in progress
        left = self._wait_moves(tps, None, MOVE_BOUND_S, stoppable=False)
        with self._lock:
            self._submitted -= tps - left
        if bad or left:
            return f"; cancel left {len(left)} moving, errors {sorted(set(bad.values()))}"
        return ""

    def _reassign(self) -> None:
        view = self._call(lambda c: c.cluster())
        moving = {(o.topic, o.partition) for o in self._call(lambda c: c.ongoing())}
        live = [n for n in self._live() if n in view.brokers]
        parts = self._workload_partitions(view)
        choice = choose_move(self.rng, parts, live, moving, self.rf)
        if choice is None:
            self.rec.add({"op": "nemesis", "fault": "reassign", "phase": "info",
                          "detail": f"no partition to move (live brokers {live})"})
            return
        tp, target = choice
        before = tuple(parts[tp])
        key, start, during = self._begin(
            "reassign", f"{tp[0]}/{tp[1]} {_ids(before)}->{_ids(target)}",
            replicas_before=list(before), replicas_after=list(target))
        outcome = self._move(tp, target)
        if outcome == "completed" and self.rng.random() < 0.5 and not self.stop_event.is_set():
            back = self._move(tp, before)
            outcome = "moved back" if back == "completed" else f"completed; back: {back}"
        self._end("reassign", key, start, during, outcome)

    def _move(self, tp: TopicPartition, target: Sequence[int]) -> str:
        t = time.monotonic()
        res = self._call(lambda c: c.alter({tp: list(target)}))
        code, msg = res.get(tp, (0, None))
        if code:
            return f"refused: error {code} {msg or ''}".strip()
        with self._lock:
            self._submitted.add(tp)
        left = self._wait_moves({tp}, {tp: target}, MOVE_BOUND_S)
        if not left:
            with self._lock:
                self._submitted.discard(tp)
            return "completed"
        return f"cancelled after {time.monotonic() - t:.0f} s" + self._cancel(left)

    def _decommission(self) -> None:
        view = self._call(lambda c: c.cluster())
        choices = decommission_candidates(view, self._live(), self.rf)
        if not choices:
            self.rec.add({"op": "nemesis", "fault": "decommission", "phase": "info",
                          "detail": "no broker can be drained now"})
            return
        b = self.rng.choice(choices)
        held = sum(1 for s in view.partitions.values() if b in s.replicas)
        key, start, during = self._begin("decommission", self.cluster.broker_name(b),
                                         replicas_before=held)
        t = time.monotonic()
        rc, line, _ = self._cli("decommission", str(b))
        if rc != 0:
            # A refusal may be partial (the cordon set, some moves accepted: e.g. a target
            # naming a broker that is down): recommission, so nothing is left half done.
            self._end("decommission", key, start, during,
                      f"exit {rc}: {_short(line)}" + self._recommission(b))
            return
        with self._lock:
            self._cordoned.add(b)
        deadline = time.monotonic() + DECOMMISSION_BOUND_S
        left = held
        while not self.stop_event.is_set():
            with contextlib.suppress(Exception):
                v = self._call(lambda c: c.cluster(), 10.0)
                left = sum(1 for s in v.partitions.values() if b in s.replicas)
            if left == 0 or time.monotonic() >= deadline:
                break
            self.stop_event.wait(POLL_S)
        outcome = (f"drained in {time.monotonic() - t:.0f} s" if left == 0 else
                   f"{left} replicas left after {time.monotonic() - t:.0f} s")
        outcome += self._recommission(b)
        self._end("decommission", key, start, during, outcome, replicas_left=left)

    def _recommission(self, b: int) -> str:
        rc, line, _ = self._cli("decommission", str(b), "--cancel")
        if rc != 0:
            return f"; recommission failed: {_short(line)}"
        with self._lock:
            self._cordoned.discard(b)
        return "; recommissioned"

    def _rebalance(self) -> None:
        key, start, during = self._begin("rebalance", "cluster")
        rc, line, lines = self._cli("rebalance")
        if rc != 0:
            self._end("rebalance", key, start, during, f"exit {rc}: {_short(line)}")
            return
        plan = planned_moves(lines)
        started = set(plan)
        with self._lock:
            self._submitted |= started
        left = self._wait_moves(started, plan, MOVE_BOUND_S)
        with self._lock:
            self._submitted -= started - left
        outcome = (f"{len(started)} moves completed" if not left else
                   f"{len(started) - len(left)} of {len(started)} moves completed, rest"
                   f" cancelled" + self._cancel(left)) if started else f"no move: {line}"
        self._end("rebalance", key, start, during, outcome, moves=len(started))

    # -------------------------------------------------------------- healing

    def heal(self) -> None:
        """The run's end: the moves of ours still going cancelled, every broker we
        decommissioned recommissioned (each bounded; failures are errors of the run)."""
        with self._lock:
            tps, brokers = set(self._submitted), set(self._cordoned)
        if tps:
            try:
                with contextlib.suppress(Exception):
                    busy = {(o.topic, o.partition) for o in self._call(lambda c: c.ongoing())}
                    tps &= busy
                note = self._cancel(tps)
                if note:
                    self.errors.append(f"healing the elastic nemesis: {note.lstrip('; ')}")
            except Exception as e:
                self.errors.append(f"healing the elastic nemesis: cancelling moves: {e}")
        for b in sorted(brokers):
            note = self._recommission(b)
            if "failed" in note:
                self.errors.append(f"healing the elastic nemesis: broker {b}{note}")


_PLAN_LINE = re.compile(r"^(\S+)/(\d+): [\d,]+ -> ([\d,]+)$")


def planned_moves(lines: Sequence[str]) -> dict[TopicPartition, tuple[int, ...]]:
    """The moves `yak cluster rebalance` printed ("topic/p: 1,2,3 -> 2,3,4" lines)."""
    out = {}
    for line in lines:
        m = _PLAN_LINE.match(line.strip())
        if m:
            out[(m[1], int(m[2]))] = tuple(int(x) for x in m[3].split(","))
    return out


def _short(line: str, limit: int = 300) -> str:
    return line if len(line) <= limit else line[:limit] + "..."


def _ids(ids: Sequence[int]) -> str:
    return ",".join(map(str, ids))
