"""The controller's partition autobalancing (issue 23), as Redpanda's
`partition_autobalancing_mode`, without an extra service.

Why in the controller: only one broker should plan at a time, and the controller already
watches every broker and partition. It runs while this broker is the controller
(`QuorumController.on_elected` starts it, `on_resigned` stops it) and plans with
`balancer.py` from the image (no I/O to plan): the usable brokers and their racks, every
partition's replicas, the cordons (`cordoned.log.dirs`) and the load scores (ties).

`partition.autobalancing.mode` (dynamic, cluster-wide default or per broker: the
controller's own value counts), read at every step:

- `off`: nothing.
- `node_add` (the default): when a broker this controller has not seen registers while
  it holds no replica (a new broker, not a restart of one that holds data), balancing
  runs until a plan comes back empty. At election, a usable broker holding no replica
  while others hold some starts the same, so a failover resumes it.
- `continuous`: also every `partition.autobalancing.tick.interval.ms`.

Each balancing that finds nothing (more) to move ends with the controller's
preferred-leader pass (when `auto.leader.rebalance.enable`), so reordered
partitions get their new preferred leader at once, and in continuous mode leadership
piled up after a full restart is handed back within a tick instead of at the next
`leader.imbalance.check.interval.seconds` (300 s).

One step: nothing while any partition is being reassigned (the batch before is still
copying) or is under-replicated or leaderless (a broker is down or catching up: moving
data then could take the only copy's broker into more work, and the counts are about to
change anyway); otherwise a plan of at most `BATCH_MOVES` steps, submitted as ordinary
KIP-455 reassignments (`PartitionReassignments.alter`, as an admin's would be), so the
moves live in the partition records, survive failovers, are seen by `yak partitions
move-status`, and respect the replication throttles already set. While a balancing is
under way, the step is retried every `POLL_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from yak.cluster.balancer import plan_moves
from yak.cluster.controller import NotControllerError
from yak.cluster.etcd import EtcdError
from yak.cluster.etcd_store import EtcdMetadataStore, MetadataDelta
from yak.cluster.reassignment import PartitionReassignments, reassigning, target_replicas

if TYPE_CHECKING:
    from yak.cluster.cluster_topics import ClusterTopicManager
    from yak.cluster.quorum_controller import QuorumController

__all__ = ["BATCH_MOVES", "AutoBalancer"]

log = logging.getLogger(__name__)

BATCH_MOVES = 16  # steps (replica moves and reorders) submitted at a time
POLL_S = 1.0  # while balancing: how often to look whether the last batch finished


class AutoBalancer:
    """See module docstring. `mode()` and `tick_ms()` read the live settings."""

    def __init__(self, store: EtcdMetadataStore, topics: ClusterTopicManager,
                 mode: Callable[[], str], tick_ms: Callable[[], int],
                 controller: QuorumController | None = None) -> None:
        self.store = store
        self.controller = controller
        self.topics = topics
        self.mode = mode
        self.tick_ms = tick_ms
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._seen: set[int] = set()
        self._pending = False  # a node_add balancing is under way
        self.moves_submitted = 0  # for logs and tests
        store.add_listener(self._on_delta)

    # ------------------------------------------------------------------ term

    def start(self) -> None:
        """This broker became the controller."""
        held = self._holding()
        brokers = self._usable()
        self._seen = set(self.store.brokers()) | held
        self._pending = bool(held) and any(b not in held for b in brokers)
        self._wake.set()
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name="controller-autobalance")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------------ triggers

    def _holding(self) -> set[int]:
        return {r for _t, _p, e in self.store.all_partitions() for r in e.record.replicas}

    def _usable(self) -> dict[int, str | None]:
        from yak.cluster.quorum_controller import usable  # the controller imports us

        brokers = self.store.brokers()
        return {n: b.rack for n, b in brokers.items() if usable(brokers, n)}

    def _on_delta(self, delta: MetadataDelta) -> None:
        if self._task is None or not delta.brokers:
            return
        new = set(self.store.brokers()) - self._seen
        if not new:
            return
        self._seen |= new
        held = self._holding()
        if any(b not in held for b in new):
            log.info("autobalance: broker(s) %s joined holding no replica", sorted(new))
            self._pending = True
            self._wake.set()

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        while True:
            mode = self.mode()
            busy = mode != "off" and (self._pending or mode == "continuous")
            wait = POLL_S if busy else (self.tick_ms() / 1000 if mode == "continuous"
                                        else 5.0)
            if busy:
                try:
                    balanced = await self.step()
                except EtcdError as e:
                    log.warning("autobalance: %s; retrying", e)
                    balanced = False
                if balanced:
                    if self._pending:
                        log.info("autobalance: balanced")
                    self._pending = False
                    if mode == "continuous":
                        wait = self.tick_ms() / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()

    async def _preferred_leaders(self) -> None:
        """Once balanced, hand leadership to the preferred replicas now (the controller's
        preferred-leader pass, with its threshold) rather than at its next check: the
        plan's reorders, and in continuous mode a cluster whose leaders piled up on the
        brokers that came back first after a full restart, are evened within a tick."""
        c = self.controller
        if c is None or not c.auto_rebalance:
            return
        with contextlib.suppress(NotControllerError):
            moved = await c.rebalance()
            if moved:
                log.info("autobalance: %d leader(s) handed to their preferred replica", moved)

    async def step(self) -> bool:
        """One step (module docstring); True when nothing is left to move."""
        assignments: dict[tuple[str, int], tuple[int, ...]] = {}
        for topic_id, p, entry in self.store.all_partitions():
            rec = entry.record
            name = self.store.topic_name(topic_id)
            if name is None:
                continue
            if reassigning(rec) or rec.leader < 0 or len(rec.isr) < len(rec.replicas):
                return False  # wait: a move is copying, or a replica is out of sync
            assignments[(name, p)] = target_replicas(rec)
        brokers = self._usable()
        if not assignments or not brokers:
            return True
        loads = {b: load.score for b, load in self.topics.broker_loads().items()}
        plan = plan_moves(assignments, brokers, cordoned=self.topics.cordoned_brokers(),
                          loads=loads, max_moves=BATCH_MOVES)
        if not plan:
            await self._preferred_leaders()
            return True
        log.info("autobalance: %d replica move(s), %d leader reorder(s): %s",
                 plan.replica_moves, plan.reorders,
                 ", ".join(f"{t}-{p} -> {r}" for (t, p), r in plan.moves.items()))
        results = await PartitionReassignments(self.store).alter(
            [(t, p, r) for (t, p), r in plan.moves.items()])
        refused = {k: v for k, v in results.items() if v[0]}
        if refused:
            log.warning("autobalance: moves refused: %s", refused)
        self.moves_submitted += len(results) - len(refused)
        # All refused: the image will change (a broker went, a topic was deleted) and a
        # later trigger plans again; retrying the same plan every second would not help.
        return len(refused) == len(results)
