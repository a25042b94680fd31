"""Faults and the nemesis that injects them, on a schedule or at random with a seed.

A fault has a start (kill, pause, cut...), a hold time, and a stop that undoes it
(restart, resume, heal...). The nemesis runs one fault at a time in its own thread and
logs each phase as a `nemesis` operation of the history (skipped by the checker, drawn by
the report): `{"op": "nemesis", "fault": "kill-leader", "phase": "start", "target":
"broker2", "time": 12.3}`, then `"phase": "stop"` when it is undone (with `"recovered"`:
the seconds until the broker was ready again, for restarts).

Just before it applies a fault, the nemesis reads who leads each partition of the plan's
topic (one Metadata request) and records it on the start operation with the fault's
victims: `"leaders": {"chaos-queue-0": 2, ...}, "victims": [2]` (broker ids; the minority
side of `partition-halves`; none for `etcd-kill`). The report splits each fault's outage,
and the availability during faults, between the partitions the victims led and the others.
If the read fails, both keys are left out and the report says "n/a" for the split.

Fault names (`FAULTS`):

    kill, kill-leader, kill-controller       SIGKILL, restart after the hold
    pause, pause-leader, pause-controller    SIGSTOP for longer than the broker session
                                             (broker.session.timeout.ms), then SIGCONT
    bounce, bounce-leader, bounce-controller SIGTERM (controlled shutdown), restart
    etcd-kill                                SIGKILL an etcd member (the raft leader), restart
    partition                                one broker cut from the other brokers
    partition-leader                         a partition's leader cut from the other
                                             brokers and etcd (clients still reach it:
                                             it must stop acknowledging); netns only
    partition-halves                         brokers split in two groups, etcd with the
                                             larger (netns; with the loopback proxies
                                             every broker keeps etcd)
    slow                                     200 ms latency on one broker (tc netem in
                                             netns, the proxies' delay in loopback)
    disk-full                                the tmpfs data dir of one broker filled
    clock                                    one broker's wall clock jumps by minutes to
                                             hours (libfaketime), then back
    store-down                               the S3 store (--tiered) killed (SIGKILL), started
                                             again on its data after the hold
    store-slow                               the S3 store stopped and resumed in a duty cycle
                                             (SIGSTOP 0.4 s, SIGCONT 0.6 s) for the hold
    store-crash-commit                       a tiered partition's leader SIGKILLed while its
                                             manifest names uploads STARTED (store.py's
                                             kill_mid_round), else after a store stall
                                             (`mid_round` false); restart after the hold
    reassign, decommission, rebalance        the elastic nemeses (yak/chaos/nemeses.py):
                                             partition moves, a broker drained then
                                             recommissioned, `yak cluster rebalance`; they
                                             run in a thread of their own, beside the
                                             faults above (group `elastic`; in `all`)

`unsupported(name, cluster)` says why a fault cannot run here (one line), or None; the
run reports skipped faults with that reason instead of dropping them silently. A fault
whose victim cannot be known in time (no partition leader or etcd leader readable for
`TARGET_WAIT_S`) is skipped that once (`FaultSkipped`, `faults_not_started` in the
summary): choosing a victim is the tool's job, so it is not an error of the run.

Why one module of about 650 lines: the nemesis's apply/undo of every fault kind reads as
one table of starts and stops; the elastic nemeses and the object store's watcher
(yak/chaos/store.py) already live apart.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from yak.chaos.env import ChaosCluster
from yak.chaos.history import Recorder
from yak.chaos.nemeses import ELASTIC, ElasticNemesis, elastic_unsupported
from yak.chaos.netns import ETCD, netem_available
from yak.chaos.queue import partition_name
from yak.chaos.store import (
    SLOW_RUNNING_S,
    SLOW_STOPPED_S,
    DutyCycle,
    kill_mid_round,
    remote_segments,
)
from yak.devcluster.process import ClusterStateError

__all__ = ["FAULTS", "DEFAULT_CI_FAULTS", "Nemesis", "FaultPlan", "unsupported", "parse_faults",
           "partition_groups"]

log = logging.getLogger(__name__)

FAULTS = (
    "kill", "kill-leader", "kill-controller",
    "pause", "pause-leader", "pause-controller",
    "bounce", "bounce-leader", "bounce-controller",
    "etcd-kill",
    "partition", "partition-leader", "partition-halves",
    "slow", "disk-full", "clock",
    "store-down", "store-slow", "store-crash-commit",
    *ELASTIC,
)
DEFAULT_CI_FAULTS = ("kill", "kill-leader", "pause", "pause-leader")
GROUPS = {
    "all": FAULTS,
    "process": ("kill", "kill-leader", "kill-controller", "pause", "pause-leader",
                "pause-controller", "bounce", "bounce-leader", "bounce-controller"),
    "network": ("partition", "partition-leader", "partition-halves", "slow"),
    "elastic": ELASTIC,
    "store": ("store-down", "store-slow", "store-crash-commit"),
}


TARGET_WAIT_S = 30.0
"""How long a fault aimed at the controller, a leader or etcd's leader waits for one to be
known (then a leader's or etcd's is skipped, `FaultSkipped`; the controller's is an error)."""

ETCD_LEADER_ASK_S = 2.0
"""One round of asking every live etcd member for its leader (`LocalEtcd.leader`): each
answer is bounded at 0.5 s, which a saturated machine misses (run F: twice in 5 s)."""


class FaultSkipped(Exception):
    """A fault that could not start because its victim is unknown for now: no partition
    leader or no etcd leader could be read within `TARGET_WAIT_S` (the cluster is between
    leaders, the previous fault's healing is not over, or the machine is too loaded to
    answer). Choosing a victim is the test tool's job, not the system's: the run records
    the fault as skipped (`faults_not_started` in the summary), not as an error. An
    unavailable cluster still shows, in the availability figures and in the checker. (No
    controller for that long stays an error, as since run C: that is the cluster's.)"""

STORE_CRASH_STALL_S = 1.5
"""store-crash-commit: how long the store is stopped before the leader is killed; the
leader's remote log rounds run every 0.5 s (yak/chaos/store.py), so uploads are in flight."""
STORE_CRASH_AFTER_S = 0.05
"""store-crash-commit: from the store's SIGCONT to the leader's SIGKILL, so some uploads
land (or half land) and none of their manifest commits can follow."""

LEADERS_TIMEOUT_S = 2.0
"""The bound on the Metadata read that records who led each partition when a fault began."""


def parse_faults(spec: str) -> list[str]:
    """`kill,pause-leader`, a group (`all`, `process`, `network`), or `none`."""
    out: list[str] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item or item == "none":
            continue
        names = GROUPS.get(item, (item,))
        for n in names:
            if n not in FAULTS:
                raise ValueError(f"unknown fault {n!r} (known: {', '.join(FAULTS)},"
                                 f" or a group: {', '.join(GROUPS)})")
            if n not in out:
                out.append(n)
    return out


def unsupported(name: str, cluster: ChaosCluster) -> str | None:
    spec = cluster.spec
    if name in ELASTIC:
        return elastic_unsupported(name, spec.brokers, spec.replication_factor)
    if name.endswith("-controller") and spec.brokers == 1:
        return None  # the single broker is its own controller
    if name == "etcd-kill" and spec.brokers == 1:
        return "a single broker has no etcd"
    if name.startswith("partition") or name == "slow":
        if spec.brokers == 1:
            return f"{name} acts between brokers: it needs 3 or 5 brokers"
        if spec.network == "netns":
            return netem_available() if name == "slow" else None
        if not spec.proxied_links:
            return f"{name} needs --network netns (root) or proxied replication links"
        if name == "partition-leader":
            return ("cutting a broker from etcd needs --network netns (root); the TCP proxies"
                    " sit on replication links only")
    if name.startswith("store-"):
        if not spec.tiered:
            return f"{name} acts on the object store: it needs --tiered"
        if name == "store-crash-commit" and spec.brokers == 1:
            return None  # the single broker leads everything
    if name == "disk-full" and spec.tmpfs_broker is None:
        return "disk-full needs a tmpfs data dir (root; --disk-full-broker)"
    if name == "clock" and not spec.faketime:
        return "clock jumps need libfaketime (Debian package libfaketime) and --faketime"
    return None


def partition_groups(name: str, nodes: list[str], victim: str | None) -> list[list[str]]:
    """The sides of a network fault (members in no group keep every link):

    - `partition`: the victim cut from the other brokers only; every broker keeps etcd
      (Kafka's classic ISR case). etcd is in no group. It once went in the victim's group,
      which cut the *other* brokers from etcd: a majority of the cluster lost its sessions
      in what the docs call a one-broker fault (docs/reliability.md, finding 10).
    - `partition-leader`: the victim cut from the other brokers and etcd.
    - `partition-halves`: `nodes` (already shuffled) split in two, etcd with the larger.
    """
    if name == "partition":
        assert victim is not None
        return [[victim], [x for x in nodes if x != victim]]
    if name == "partition-leader":
        assert victim is not None
        return [[victim], [x for x in nodes if x != victim] + [ETCD]]
    k = len(nodes) // 2
    return [nodes[:k], nodes[k:] + [ETCD]]


@dataclass
class FaultPlan:
    """When and how: random faults every `interval` (min, max) seconds for `hold`
    (min, max) seconds, each fault once per round in a seeded random order; or a fixed
    `schedule` of {"at", "fault", "hold"?, "target"?} entries (they may overlap)."""

    faults: list[str]
    seed: int = 1
    interval: tuple[float, float] = (6.0, 12.0)
    hold: tuple[float, float] = (3.0, 8.0)
    schedule: list[dict[str, Any]] | None = None
    topic: str = "chaos-queue"  # whose partition leaders the -leader variants target


class Nemesis(threading.Thread):
    def __init__(self, cluster: ChaosCluster, rec: Recorder, plan: FaultPlan,
                 progress: Callable[[str], None] | None = None) -> None:
        super().__init__(name="chaos-nemesis", daemon=True)
        self.progress = progress or (lambda _msg: None)
        self.cluster = cluster
        self.rec = rec
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.stop_event = threading.Event()
        self.injected: list[dict[str, Any]] = []
        self.skipped: dict[str, str] = {}
        self.not_started: list[str] = []  # faults skipped once: no target known in time
        self.errors: list[str] = []
        self._undos: dict[int, Callable[[], dict[str, Any]]] = {}  # faults in force
        self._in_force: dict[int, str] = {}  # their names, for the elastic operations
        self._spans: dict[int, list[Any]] = {}  # id -> [name, start, stop or None]
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._busy = 0  # faults being started, held or undone (brokers may be down)
        self._seq = 0
        for f in plan.faults:
            reason = unsupported(f, cluster)
            if reason:
                self.skipped[f] = reason
        self.usable = [f for f in plan.faults if f not in self.skipped]
        self.elastic = ElasticNemesis(
            cluster, rec, [f for f in self.usable if f in ELASTIC], seed=plan.seed,
            interval=plan.interval, topic_prefix=plan.topic.split("-")[0] + "-",
            next_id=self._next_id, in_force=self.in_force, stop_event=self.stop_event,
            progress=self.progress)

    def _next_id(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def in_force(self, since: float | None = None) -> list[str]:
        """The names of the (non-elastic) faults in force now, or (`since`, a time of the
        run) at any moment from then until now."""
        with self._lock:
            if since is None:
                return sorted(set(self._in_force.values()))
            return sorted({n for n, _start, stop in self._spans.values()
                           if stop is None or stop >= since})

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        try:
            if self.plan.schedule is not None:
                self._scheduled()
            else:
                if self.elastic.names:
                    self.elastic.start()
                self._random()
        finally:
            self.stop_event.set()
            self.elastic.join(180)
            self.heal_all()
            self.injected.extend(self.elastic.injected)
            self.errors.extend(self.elastic.errors)

    def _random(self) -> None:
        faults = [f for f in self.usable if f not in ELASTIC]
        if not faults:
            self.stop_event.wait()  # the elastic nemesis alone, until the run stops it
            return
        bag: list[str] = []
        while not self.stop_event.wait(self.rng.uniform(*self.plan.interval)):
            if not bag:  # every fault once per round, in a seeded random order
                bag = faults[:]
                self.rng.shuffle(bag)
            self.inject(bag.pop(), self.rng.uniform(*self.plan.hold))

    def _scheduled(self) -> None:
        """Each entry starts at its time in its own thread, so scheduled faults can
        overlap (e.g. a follower paused while the other replicas are killed)."""
        threads = []
        try:
            for entry in sorted(self.plan.schedule or [], key=lambda e: float(e["at"])):
                wait = float(entry["at"]) - self.rec.now()
                if wait > 0 and self.stop_event.wait(wait):
                    return
                if self.stop_event.is_set():
                    return
                name = entry["fault"]
                if name in self.skipped or name not in FAULTS:
                    continue
                hold = float(entry.get("hold", self.rng.uniform(*self.plan.hold)))
                if name in ELASTIC:
                    th = threading.Thread(target=self.elastic.run_one, args=(name,),
                                          name=f"chaos-nemesis-{name}", daemon=True)
                else:
                    th = threading.Thread(target=self.inject,
                                          args=(name, hold, entry.get("target")),
                                          name=f"chaos-nemesis-{name}", daemon=True)
                th.start()
                threads.append(th)
            for th in threads:  # the holds run out, or stop() cuts them short
                while th.is_alive():
                    th.join(1.0)
        finally:
            for th in threads:
                th.join(180)

    @property
    def active(self) -> bool:
        return self._busy > 0

    def inject(self, name: str, hold: float, target: Any = None) -> None:
        """Start fault `name` (on `target` if given: a broker like "broker2" or 2, else
        chosen by the fault's kind), hold it (cut short by stop()), undo it."""
        with self._lock:
            self._busy += 1
        try:
            self._inject(name, hold, target)
        finally:
            with self._lock:
                self._busy -= 1

    def _inject(self, name: str, hold: float, target: Any) -> None:
        self._tls.undo = None
        try:
            start = self._start(name, hold, target)
        except FaultSkipped as e:
            msg = f"{name}: not started: {e}"
            log.info(msg)
            self.not_started.append(msg)
            self.rec.add({"op": "nemesis", "fault": name, "phase": "skipped", "detail": msg})
            self.progress(f"fault {name} skipped: {e}")
            return
        except Exception as e:
            msg = f"{name}: could not start: {type(e).__name__}: {e}"
            log.warning(msg)
            self.errors.append(msg)
            self.rec.add({"op": "nemesis", "fault": name, "phase": "error", "detail": msg})
            return
        if start is None:
            return
        with self._lock:
            self._seq += 1
            key = self._seq
            if self._tls.undo is not None:
                self._undos[key] = self._tls.undo
            self._in_force[key] = name
            self._spans[key] = [name, self.rec.now(), None]
        op = self.rec.add({"op": "nemesis", "fault": name, "phase": "start", "id": key,
                           **start})
        self.progress(f"fault {key}: {name} on {start.get('target')}"
                      f" for {start.get('hold', hold):.1f} s")
        self.stop_event.wait(start.get("hold", hold))
        self._finish(name, op, key)

    def _finish(self, name: str, start_op: dict[str, Any], key: int) -> None:
        with self._lock:
            undo = self._undos.pop(key, None)
            self._in_force.pop(key, None)
        if undo is None:
            return
        t = time.monotonic()
        undo_at = round(self.rec.now(), 4)
        try:
            info = undo()
        except Exception as e:
            msg = f"{name}: could not undo: {type(e).__name__}: {e}"
            log.warning(msg)
            self.errors.append(msg)
            info = {"detail": msg}
        stop = self.rec.add({"op": "nemesis", "fault": name, "phase": "stop", "id": key,
                             "target": start_op.get("target"),
                             "undo_at": undo_at, "undo_s": round(time.monotonic() - t, 3),
                             **info})
        with self._lock:
            if key in self._spans:
                self._spans[key][2] = stop["time"]
        self.progress(f"fault {key}: {name} undone in {stop['undo_s']:.1f} s")
        self.injected.append({"fault": name, "target": start_op.get("target"),
                              "start": start_op["time"], "stop": stop["time"],
                              **{k: v for k, v in info.items() if k != "detail"}})

    def stop(self) -> None:
        self.stop_event.set()

    def heal_all(self) -> None:
        """Undo whatever is in force (the run's end, or after an error)."""
        with self._lock:
            self._busy += 1
        try:
            self._heal_all()
        finally:
            with self._lock:
                self._busy -= 1

    def _heal_all(self) -> None:
        with self._lock:
            undos, self._undos = list(self._undos.values()), {}
        for undo in undos:
            with contextlib.suppress(Exception):
                undo()
        c = self.cluster
        with contextlib.suppress(Exception):
            c.heal()
        for n in c.node_ids:
            with contextlib.suppress(Exception):
                c.resume(n)
            if c.spec.faketime:
                with contextlib.suppress(Exception):
                    c.set_clock_offset(n, 0)
            if c.spec.tmpfs_broker == n:
                c.free_disk(n)
        if c.store is not None:  # before the brokers: they check it at start-up
            with contextlib.suppress(Exception):
                c.store.resume()
            with contextlib.suppress(Exception):
                c.restart_store()
        for n in c.node_ids:
            if not c.alive(n):
                with contextlib.suppress(Exception):
                    c.start_broker(n)
        if c.etcd is not None:
            for m in c.etcd.members:
                if not m.is_alive():
                    with contextlib.suppress(Exception):
                        c.etcd.restart_member(m.name)
        self.elastic.heal()  # with every broker back: moves cancelled, brokers recommissioned

    # ------------------------------------------------------------------ targets

    def _pick_target(self, name: str, target: Any = None) -> int:
        c = self.cluster
        if target is not None:
            node = int(str(target).removeprefix("broker").removeprefix("b"))
            if node not in c.node_ids:
                raise ValueError(f"no broker {target!r}")
            return node
        alive = [n for n in c.node_ids if c.alive(n)]
        if name.endswith("-controller") or name.endswith("-leader"):
            # Right after a fault the cluster may be between controllers or leaders (an
            # election is seconds away), and a Metadata read may fail outright (run F:
            # "Broker transport failure", "Timed out"): ask again for a while, then skip.
            deadline = time.monotonic() + TARGET_WAIT_S
            while True:
                if name.endswith("-controller"):
                    ctl = c.controller()
                    if ctl is not None and ctl in alive:
                        return ctl
                    what = "no controller known (DescribeCluster)"
                else:
                    try:
                        led = c.leaders(self.plan.topic).values()
                        what = f"no live leader of {self.plan.topic} known (Metadata)"
                    except Exception as e:  # noqa: BLE001 - asked again until the deadline
                        led, what = (), f"Metadata unreadable ({type(e).__name__}: {e})"
                    leaders = [n for n in led if n in alive]
                    if leaders:
                        return self.rng.choice(leaders)
                if time.monotonic() >= deadline or self.stop_event.wait(1.0):
                    if name.endswith("-controller"):
                        # a cluster without a controller for that long is Yak's failure
                        raise RuntimeError(f"{what} for {TARGET_WAIT_S:g} s")
                    raise FaultSkipped(f"{what} for {TARGET_WAIT_S:g} s")
        return self.rng.choice(alive)

    def _etcd_victim(self) -> Any:
        """etcd's leader, the `etcd-kill` victim. Waits up to `TARGET_WAIT_S` for every
        member to be up (a restart after the previous fault may still be under way: killing
        a second member then would cost etcd its quorum, which is not this fault) and for
        one to answer that it leads; then skips."""
        etcd = self.cluster.etcd
        assert etcd is not None
        if len(etcd.members) == 1:
            return etcd.members[0]
        deadline = time.monotonic() + TARGET_WAIT_S
        while True:
            down = [m.name for m in etcd.members if not m.is_alive()]
            if down:
                what = f"etcd member(s) {', '.join(down)} not running"
            else:
                try:
                    return etcd.leader(timeout=ETCD_LEADER_ASK_S)
                except ClusterStateError:
                    what = "no etcd member answered as leader"
            if time.monotonic() >= deadline or self.stop_event.wait(0.5):
                raise FaultSkipped(f"{what} for {TARGET_WAIT_S:g} s")

    def _start(self, name: str, hold: float, target: Any = None) -> dict[str, Any] | None:
        c = self.cluster
        kind = name.split("-")[0]
        if kind in ("kill", "pause", "bounce"):
            node = self._pick_target(name, target)
            target = c.broker_name(node)
            led = self._leadership([node])
            if kind == "kill":
                c.kill(node)
                self._set_undo(lambda: self._restart(node))
            elif kind == "pause":
                # longer than the broker's session, so the cluster must fence it
                hold = max(hold, c.spec.session_timeout_ms / 1000 * 1.5)
                c.pause(node)
                self._set_undo(lambda: (c.resume(node), {})[1])
            else:
                t = time.monotonic()
                clean = c.terminate(node)
                self._set_undo(lambda: self._restart(node))
                return {"target": target, "hold": hold, "clean_exit": clean,
                        "shutdown_s": round(time.monotonic() - t, 3), **led}
            return {"target": target, "hold": hold, **led}
        if name == "etcd-kill":
            m = self._etcd_victim()
            led = self._leadership([])  # no broker is the victim: every partition is "other"
            m.kill()
            etcd = c.etcd

            def restart_etcd() -> dict[str, Any]:
                t = time.monotonic()
                etcd.restart_member(m.name)
                return {"recovered": round(time.monotonic() - t, 3)}

            self._set_undo(restart_etcd)
            return {"target": m.name, "hold": hold, **led}
        if name.startswith("partition"):
            nodes = [f"b{n}" for n in c.node_ids]
            victim = None
            if name == "partition":
                victim = f"b{self._pick_target('kill', target)}"
            elif name == "partition-leader":
                victim = f"b{self._pick_target('kill-leader', target)}"
            else:
                nodes = nodes[:]
                self.rng.shuffle(nodes)
            groups = partition_groups(name, nodes, victim)
            target = victim or " vs ".join(",".join(g) for g in groups)
            # the victims: the cut broker, or the side of the halves without etcd
            led = self._leadership([int(b[1:]) for b in ([victim] if victim else groups[0])])
            pairs = c.cut(groups)
            self._set_undo(lambda: (c.heal(), {})[1])
            return {"target": target, "hold": hold, "cut": len(pairs), **led}
        if name == "slow":
            node = self._pick_target("kill", target)
            led = self._leadership([node])
            c.delay(node, 200)
            self._set_undo(lambda: (c.heal(), {})[1])
            return {"target": c.broker_name(node), "hold": hold, "delay_ms": 200, **led}
        if name == "disk-full":
            node = c.spec.tmpfs_broker
            assert node is not None
            if not c.alive(node):
                return None
            led = self._leadership([node])
            written = c.fill_disk(node)
            self._set_undo(lambda: (c.free_disk(node), {})[1])
            return {"target": c.broker_name(node), "hold": hold, "ballast_bytes": written,
                    **led}
        if name.startswith("store-"):
            return self._start_store_fault(name, hold, target)
        if name == "clock":
            node = self._pick_target("kill", target)
            jump = self.rng.choice([-1, 1]) * self.rng.choice([300, 3600, 86400])
            led = self._leadership([node])
            c.set_clock_offset(node, jump)
            self._set_undo(lambda: (c.set_clock_offset(node, 0), {})[1])
            return {"target": c.broker_name(node), "hold": hold, "jump_s": jump, **led}
        raise ValueError(f"unknown fault {name!r}")

    def _start_store_fault(self, name: str, hold: float, target: Any) -> dict[str, Any]:
        """The object store's faults (see the module's list). Each start operation also
        records `remote_segments`, the segment objects of the plan's topic in the bucket
        (None if the store does not answer): evidence that data is really tiered."""
        c = self.cluster
        deadline = time.monotonic() + TARGET_WAIT_S
        while c.store is None or not c.store.is_alive():  # a store-down still restarting
            if time.monotonic() >= deadline or self.stop_event.wait(1.0):
                raise RuntimeError(f"the object store is not running for {TARGET_WAIT_S:g} s")
        moved = remote_segments(c.s3_port, self.plan.topic)
        if name == "store-down":
            led = self._leadership([])  # no broker is the victim
            c.kill_store()

            def restart_store() -> dict[str, Any]:
                t = time.monotonic()
                c.restart_store()
                return {"recovered": round(time.monotonic() - t, 3)}

            self._set_undo(restart_store)
            return {"target": "store", "hold": hold, "remote_segments": moved, **led}
        if name == "store-slow":
            led = self._leadership([])
            cycle = DutyCycle(c.store)
            cycle.start()
            self._set_undo(lambda: {"cycles": cycle.stop()})
            return {"target": "store", "hold": hold, "stopped_s": SLOW_STOPPED_S,
                    "running_s": SLOW_RUNNING_S, "remote_segments": moved, **led}
        if name == "store-crash-commit":
            return self._crash_between_upload_and_commit(hold, target, moved)
        raise ValueError(f"unknown fault {name!r}")

    def _crash_between_upload_and_commit(self, hold: float, target: Any,
                                         moved: int | None) -> dict[str, Any]:
        c = self.cluster
        topic = self.plan.topic
        led = self._leadership([])  # before the kill; the victim is set once it is known
        seen = None if target is not None else kill_mid_round(
            c.s3_port, topic, lambda: c.leaders(topic, timeout=LEADERS_TIMEOUT_S), c.kill,
            TARGET_WAIT_S, self.stop_event)
        if seen is not None:
            node, in_flight = seen
            self._set_undo(lambda: self._restart(node))
            return {"target": c.broker_name(node), "hold": hold, "mid_round": True,
                    # partition -> (uploads STARTED, of which landed) at the kill
                    "in_flight": {str(p): list(v) for p, v in in_flight.items()},
                    "remote_segments": moved, **({**led, "victims": [node]} if led else {})}
        node = self._pick_target("kill-leader", target)
        led = self._leadership([node])
        store = c.store
        assert store is not None
        store.pause()
        try:
            self.stop_event.wait(STORE_CRASH_STALL_S)  # uploads start and hang
        finally:
            store.resume()
        time.sleep(STORE_CRASH_AFTER_S)
        c.kill(node)
        self._set_undo(lambda: self._restart(node))
        return {"target": c.broker_name(node), "hold": hold, "mid_round": False,
                "store_stalled_s": STORE_CRASH_STALL_S, "remote_segments": moved, **led}

    def _leadership(self, victims: list[int]) -> dict[str, Any]:
        """Who leads each partition of the plan's topic now, just before the fault is
        applied (a Metadata read), with the fault's victims: the report splits the outage
        between the partitions they led and the others. {} if it cannot be read."""
        topic = self.plan.topic
        try:
            leaders = self.cluster.leaders(topic, timeout=LEADERS_TIMEOUT_S)
        except Exception as e:  # the fault goes ahead; the report shows the split as n/a
            log.info("leaders of %s at fault start unknown: %s", topic, e)
            return {}
        if not leaders:
            return {}
        return {"victims": sorted(victims),
                "leaders": {partition_name(topic, p): int(n) for p, n in sorted(leaders.items())}}

    def _set_undo(self, fn: Callable[[], dict[str, Any]]) -> None:
        self._tls.undo = fn  # picked up by _inject, in this thread

    def _restart(self, node: int) -> dict[str, Any]:
        t = time.monotonic()
        self.cluster.start_broker(node)
        return {"recovered": round(time.monotonic() - t, 3)}
