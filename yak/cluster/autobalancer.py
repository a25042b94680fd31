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

Bytes (`partition.autobalancing.disk.imbalance.threshold.percent`, after Redpanda's
`partition_autobalancing_max_disk_usage_percent`): a step also evens bytes when the
brokers' partition logs differ by more than that percent of the fullest one's, read from
their load reports (`log_bytes`, no I/O; the logs' bytes rather than the file system's
use, since brokers sharing one file system would all report the same use), and the
fullest holds at least `DISK_MIN_BYTES`. Then each usable broker is asked for its
partitions' sizes (DescribeLogDirs over the inter-broker client, so the plan uses fresh
sizes, never a report from before the last moves) and the plan's bytes phase narrows the
gap to within that percent (`balancer.py`). In continuous mode every tick checks it.

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
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from yak.cluster.balancer import plan_moves
from yak.cluster.controller import NotControllerError
from yak.cluster.etcd import EtcdError
from yak.cluster.etcd_store import EtcdMetadataStore, MetadataDelta
from yak.cluster.reassignment import PartitionReassignments, reassigning, target_replicas
from yak.errors import KafkaError
from yak.protocol import kio_compat

if TYPE_CHECKING:
    from yak.cluster.cluster_topics import ClusterTopicManager
    from yak.cluster.quorum_controller import QuorumController

__all__ = ["BATCH_MOVES", "DISK_MIN_BYTES", "AutoBalancer", "disk_imbalance"]

log = logging.getLogger(__name__)

BATCH_MOVES = 16  # steps (replica moves and reorders) submitted at a time
POLL_S = 1.0  # while balancing: how often to look whether the last batch finished
# Logs smaller than this are never evened by bytes: moving a few KiB is all cost.
DISK_MIN_BYTES = 1 << 20

Request = Callable[[int, Any], Awaitable[Any]]  # InterBrokerClient.request


def disk_imbalance(log_bytes: Mapping[int, int]) -> float:
    """How much the brokers' log bytes differ: (max - min) as a percent of max (0 when
    the fullest holds less than DISK_MIN_BYTES)."""
    if not log_bytes:
        return 0.0
    top = max(log_bytes.values())
    if top < DISK_MIN_BYTES:
        return 0.0
    return 100.0 * (top - min(log_bytes.values())) / top


class AutoBalancer:
    """See module docstring. `mode()` and `tick_ms()` read the live settings."""

    def __init__(self, store: EtcdMetadataStore, topics: ClusterTopicManager,
                 mode: Callable[[], str], tick_ms: Callable[[], int],
                 controller: QuorumController | None = None, *,
                 disk_threshold: Callable[[], int] = lambda: 100,
                 request: Request | None = None) -> None:
        self.store = store
        self.disk_threshold = disk_threshold  # percent; 100: bytes are never evened
        self.request = request  # DescribeLogDirs to each broker; None: bytes not evened
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
                async with asyncio.timeout(wait):  # not wait_for: 3.11's drops a cancel
                    await self._wake.wait()
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
        reports = self.topics.broker_loads()
        loads = {b: load.score for b, load in reports.items()}
        cordoned = self.topics.cordoned_brokers()
        sizes, gap = await self._bytes(assignments, brokers, cordoned, reports)
        plan = plan_moves(assignments, brokers, cordoned=cordoned, loads=loads,
                          sizes=sizes, byte_gap=gap, max_moves=BATCH_MOVES)
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

    async def _bytes(self, assignments: Mapping[tuple[str, int], tuple[int, ...]],
                     brokers: Mapping[int, str | None], cordoned: set[int],
                     reports: Mapping[int, Any]
                     ) -> tuple[dict[tuple[str, int], int], int | None]:
        """Partition sizes and the byte gap to leave, or ({}, None) when bytes are not to
        be evened now (module docstring)."""
        threshold = self.disk_threshold()
        members = [b for b in brokers if b not in cordoned]
        if self.request is None or threshold >= 100 or len(members) < 2:
            return {}, None
        if any(b not in reports for b in members):
            return {}, None  # a broker without a report yet: its bytes are unknown
        if disk_imbalance({b: reports[b].log_bytes for b in members}) <= threshold:
            return {}, None
        sizes = await self.partition_sizes(members)
        held = dict.fromkeys(members, 0)
        for key, reps in assignments.items():
            for r in reps:
                if r in held:
                    held[r] += sizes.get(key, 0)
        gap = max(held.values()) * threshold // 100
        # debug: in continuous mode an imbalance whole partitions cannot narrow is seen
        # every tick; the plan's moves, if any, are logged at info by `step`
        log.debug("autobalance: brokers' log bytes differ by more than %d%% (%s); evening"
                  " bytes to within %d", threshold, held, gap)
        return sizes, gap

    async def partition_sizes(self, brokers: list[int]) -> dict[tuple[str, int], int]:
        """Each partition's bytes (the largest replica's), from DescribeLogDirs to each of
        `brokers`; a broker that does not answer is left out (its partitions count with
        the other replicas' sizes)."""
        assert self.request is not None
        mod = kio_compat.schema_module("describe_log_dirs", 4, "request")
        req = kio_compat.build(mod.DescribeLogDirsRequest, topics=None)

        async def ask(b: int) -> Any:
            assert self.request is not None
            try:
                return await self.request(b, req)
            except (OSError, TimeoutError, KafkaError) as e:  # InterBrokerError: OSError
                log.info("autobalance: no log dir sizes from broker %d (%s)", b, e)
                return None

        sizes: dict[tuple[str, int], int] = {}
        for resp in await asyncio.gather(*(ask(b) for b in brokers)):
            if resp is None or resp.error_code:
                continue
            for d in resp.results:
                for t in d.topics:
                    for part in t.partitions:
                        key = (str(t.name), int(part.partition_index))
                        sizes[key] = max(sizes.get(key, 0), int(part.partition_size))
        return sizes
