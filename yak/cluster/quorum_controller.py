"""The controller: leader election, ISR clean-up, controlled shutdown and preferred leaders.

One broker at a time is the controller (whoever holds the controller key, see
`controller.py`). It watches the same metadata image every broker has (`etcd_store.py`)
and, whenever a broker registers, leaves, re-registers or starts a controlled shutdown,
or a partition record changes, brings every affected partition to the state the rules
below give, writing each change with its `FencedWriter`: an etcd transaction that compares
the controller key's create_revision (a deposed controller's late write is refused by
etcd) and the partition key's mod_revision (a concurrent ISR change by the leader, or an
admin's election, is never overwritten).

The rules (Kafka's `PartitionChangeBuilder` and `ReplicationControlManager`, per partition):

- A broker is *usable* while it is registered, not fenced and not in controlled shutdown.
- A replica whose data dir came back with another `directory.id` (it was wiped) leaves the
  ISR, even as its last member: it has none of the data, so it must never be elected.
- ISR members that are not usable, or that registered again after the record was written
  (a restarted or re-registered broker must catch up again), leave the ISR, except the
  last one: an ISR never becomes empty this way, and the member that stays (the leader
  if it is one of them) is the one most likely to have everything.
- The leader stays while it is usable, in the ISR and registered before the record was
  written. Otherwise the first usable ISR member in replica order (the preferred
  replica first) is elected; with none, the partition has no leader (-1), unless unclean
  leader election is enabled for the topic: then the first usable replica leads with
  an ISR of itself (LeaderRecoveryState RECOVERING).
- Every leader change (to -1 included) bumps the leader epoch and the partition epoch;
  any other change bumps the partition epoch only.

Preferred leaders (`auto.leader.rebalance.enable`): every
`leader.imbalance.check.interval.seconds`, a broker whose share of the partitions it
prefers but does not lead is above `leader.imbalance.per.broker.percentage` gets them
back, where it is usable and in the ISR (so never while it is still catching up).
`elect_leaders` is ElectLeaders (API 43), preferred or unclean, for any broker to call.

Partition reassignment (KIP-455, `reassignment.py`): after the rules above, a moving
partition whose target replicas are all in the ISR is completed in the same write.

Balancing (`autobalancer.py`, `partition.autobalancing.mode`): the composition hands the
controller an `AutoBalancer`, which runs only during this broker's terms.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from yak.cluster.controller import ControllerElection, FencedWriter, NotControllerError
from yak.cluster.etcd import Compare, EtcdError, Op
from yak.cluster.etcd_store import BrokerInfo, EtcdMetadataStore, MetadataDelta
from yak.cluster.reassignment import complete as complete_reassignment
from yak.cluster.records import LEADER_RECOVERING, PartitionRecord, encode
from yak.errors import ErrorCode
from yak.partition.state import NO_LEADER

if TYPE_CHECKING:
    from yak.cluster.autobalancer import AutoBalancer

__all__ = [
    "PREFERRED",
    "UNCLEAN",
    "ElectionOutcome",
    "QuorumController",
    "elect",
    "reconcile",
]

log = logging.getLogger(__name__)

PREFERRED = 0  # ElectLeaders election types
UNCLEAN = 1
WRITE_BATCH = 50  # partition changes per etcd transaction (etcd allows 128 ops)


def usable(brokers: dict[int, BrokerInfo], node_id: int) -> bool:
    b = brokers.get(node_id)
    return b is not None and not b.fenced and not b.in_controlled_shutdown


def _directory_lost(record: PartitionRecord, brokers: dict[int, BrokerInfo]) -> dict[int, str]:
    """Replicas registered with a directory.id other than the one recorded for them:
    node id -> the new directory id."""
    out: dict[int, str] = {}
    for i, r in enumerate(record.replicas):
        recorded = record.directories[i] if i < len(record.directories) else ""
        b = brokers.get(r)
        if recorded and b is not None and b.directory and b.directory != recorded:
            out[r] = b.directory
    return out


def reconcile(record: PartitionRecord, mod_revision: int, brokers: dict[int, BrokerInfo],
              unclean: bool = False) -> PartitionRecord | None:
    """The record the rules (module docstring) give for this partition, or None if it is
    already so."""
    lost = _directory_lost(record, brokers)
    dirs = record.directories
    if lost:
        dirs = tuple(lost.get(r, dirs[i] if i < len(dirs) else "")
                     for i, r in enumerate(record.replicas))
    isr = [r for r in record.isr if r not in lost]

    def stale(r: int) -> bool:
        b = brokers.get(r)
        return b is None or not usable(brokers, r) or b.epoch > mod_revision

    leaving = [r for r in isr if stale(r)]
    if leaving and len(leaving) == len(isr):
        # Keep one: the leader if it is among them, else the first.
        keep = record.leader if record.leader in leaving else leaving[0]
        leaving = [r for r in leaving if r != keep]
    isr = [r for r in isr if r not in leaving]

    leader = record.leader
    recovery = record.leader_recovery_state
    leader_ok = (leader != NO_LEADER and leader in isr and not stale(leader))
    new_leader = leader
    if not leader_ok:
        candidates = [r for r in record.replicas if r in isr and usable(brokers, r)]
        if candidates:
            new_leader = candidates[0]
        else:
            fallback = [r for r in record.replicas if usable(brokers, r) and r not in lost]
            if unclean and fallback:
                new_leader = fallback[0]
                isr = [new_leader]
                recovery = LEADER_RECOVERING
                log.warning("unclean leader election: partition %s/%d led by %d, which was"
                            " not in the ISR %s (acknowledged records may be lost)",
                            record.topic_id, record.partition_id, new_leader,
                            list(record.isr))
            else:
                new_leader = NO_LEADER
    return _changed(record, new_leader, not leader_ok and new_leader != NO_LEADER
                    or new_leader != leader, tuple(isr), recovery, dirs)


def _changed(record: PartitionRecord, leader: int, leader_changed: bool, isr: tuple[int, ...],
             recovery: int, dirs: tuple[str, ...]) -> PartitionRecord | None:
    if (not leader_changed and isr == record.isr and recovery == record.leader_recovery_state
            and dirs == record.directories):
        return None
    return replace(
        record,
        leader=leader,
        isr=isr,
        leader_epoch=record.leader_epoch + 1 if leader_changed else record.leader_epoch,
        partition_epoch=record.partition_epoch + 1,
        leader_recovery_state=recovery,
        directories=dirs,
    )


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    """One partition's ElectLeaders answer: the new record to write, or the error code."""

    error: ErrorCode
    record: PartitionRecord | None = None
    message: str | None = None


def elect(record: PartitionRecord, mod_revision: int, brokers: dict[int, BrokerInfo],
          election_type: int) -> ElectionOutcome:
    """ElectLeaders for one partition (Kafka's rules and error codes)."""
    if election_type == PREFERRED:
        preferred = record.replicas[0] if record.replicas else NO_LEADER
        if record.leader == preferred:
            return ElectionOutcome(ErrorCode.election_not_needed)
        if preferred not in record.isr or not usable(brokers, preferred):
            return ElectionOutcome(ErrorCode.preferred_leader_not_available,
                                   message=f"preferred replica {preferred} is not usable"
                                   " or not in the ISR")
        new = _changed(record, preferred, True, record.isr, record.leader_recovery_state,
                       record.directories)
        return ElectionOutcome(ErrorCode.none, new)
    if election_type == UNCLEAN:
        if record.leader != NO_LEADER and usable(brokers, record.leader):
            return ElectionOutcome(ErrorCode.election_not_needed)
        new = reconcile(record, mod_revision, brokers, unclean=True)
        if new is None or new.leader == NO_LEADER:
            return ElectionOutcome(ErrorCode.eligible_leaders_not_available,
                                   message="no usable replica to elect")
        return ElectionOutcome(ErrorCode.none, new)
    return ElectionOutcome(ErrorCode.invalid_request, message=f"election type {election_type}")


class QuorumController:
    """Runs while this broker holds the controller key (see module docstring).

    `unclean_enabled(topic_name)`: the topic's unclean.leader.election.enable.
    `on_election(count, unclean)`: metrics hook, called for every leader the controller
    elected (not for a partition left without one).
    """

    def __init__(self, store: EtcdMetadataStore, election: ControllerElection, *,
                 unclean_enabled: Callable[[str], bool] = lambda _t: False,
                 auto_rebalance: bool = True,
                 imbalance_check_interval_s: float = 300.0,
                 imbalance_percentage: int = 10,
                 on_election: Callable[[int, bool], None] | None = None) -> None:
        self.store = store
        self.election = election
        self.unclean_enabled = unclean_enabled
        self.auto_rebalance = auto_rebalance
        self.imbalance_check_interval_s = imbalance_check_interval_s
        self.imbalance_percentage = imbalance_percentage
        self._on_election = on_election
        self._writer: FencedWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._dirty_all = False
        self._dirty: set[tuple[str, int]] = set()
        self.idle = asyncio.Event()  # set when nothing is left to do (tests, shutdown)
        self._write_failing = False  # logged once per spell of failing writes
        self.autobalancer: AutoBalancer | None = None  # set by the composition (issue 23)
        store.add_listener(self._on_delta)

    @property
    def active(self) -> bool:
        return self._writer is not None

    # ------------------------------------------------------------------ term

    def on_elected(self, epoch: int) -> None:
        """This broker won the controller key: take over every partition."""
        self._writer = self.election.writer()
        self._dirty_all = True
        self.idle.clear()
        self._wake.set()
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name="controller")
        # Always started: `auto_rebalance` is a dynamic config (issue 23), read each round.
        self._rebalance_task = loop.create_task(self._rebalance_loop(),
                                                name="controller-rebalance")
        if self.autobalancer is not None:
            self.autobalancer.start()
        log.info("controller (epoch %d) active", epoch)

    def on_resigned(self, epoch: int) -> None:
        self._writer = None
        for t in (self._task, self._rebalance_task):
            if t is not None:
                t.cancel()
        self._task = self._rebalance_task = None
        if self.autobalancer is not None:
            self.autobalancer.stop()
        self.idle.set()

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._rebalance_task) if t is not None]
        if self.autobalancer is not None:
            await self.autobalancer.aclose()
        self.on_resigned(-1)
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    # ------------------------------------------------------------------ changes

    def _on_delta(self, delta: MetadataDelta) -> None:
        if not self.active:
            return
        if delta.brokers or delta.snapshot or delta.controller:
            self._dirty_all = True
        self._dirty |= delta.partitions
        if self._dirty_all or self._dirty:
            self.idle.clear()
            self._wake.set()

    async def _run(self) -> None:
        backoff = 0.05
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._dirty_all:
                keys = {(t, p) for t, p, _ in self.store.all_partitions()}
                self._dirty_all = False
                self._dirty.clear()
            else:
                keys, self._dirty = self._dirty, set()
            try:
                await self._reconcile(keys)
                backoff = 0.05
                if self._write_failing:
                    log.info("controller writes go through again")
                    self._write_failing = False
            except NotControllerError as e:
                w = self._writer
                if w is not None and self.election.epoch == w.epoch:
                    # Refused locally (our lease lapsed: etcd unreachable) or by etcd while
                    # the election has not yet seen a successor: keep the work and retry;
                    # a real loss of the term ends this task through on_resigned.
                    if not self._write_failing:
                        log.warning("controller write refused (%s); retrying", e)
                        self._write_failing = True
                    self._dirty |= keys
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                    self._wake.set()
                    continue
                log.warning("controller deposed: %s", e)
                self._writer = None
                self.idle.set()
                return
            except EtcdError as e:
                if not self._write_failing:
                    log.warning("controller: etcd write failed (%s); retrying", e)
                    self._write_failing = True
                self._dirty |= keys
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                self._wake.set()
                continue
            if not self._dirty and not self._dirty_all:
                self.idle.set()

    async def _reconcile(self, keys: Iterable[tuple[str, int]]) -> None:
        brokers = self.store.brokers()
        changes: list[tuple[PartitionRecord, int]] = []
        for topic_id, p in sorted(keys):
            entry = self.store.partition_entry(topic_id, p)
            name = self.store.topic_name(topic_id)
            if entry is None or name is None:
                continue
            new = reconcile(entry.record, entry.mod_revision, brokers,
                            unclean=self.unclean_enabled(name))
            # A reassignment whose target replicas are all in sync completes (KIP-455).
            done = complete_reassignment(new or entry.record, brokers)
            if done is not None:
                log.info("%s-%d: completing the reassignment: replicas %s, leader %d", name, p,
                         list(done.replicas), done.leader)
                new = done
            if new is not None:
                changes.append((new, entry.mod_revision))
        await self.write(changes)

    async def write(self, changes: Sequence[tuple[PartitionRecord, int]],
                    writer: FencedWriter | None = None) -> list[bool]:
        """Write partition records, each only if its key is still at the mod_revision
        given, in batches; returns per change whether it was written. A batch whose
        compares do not all hold is retried change by change."""
        w = writer or self._writer
        if w is None:
            raise NotControllerError("not the controller")
        # What each partition was, for the log and the election counts (the watch may
        # deliver the new record while a write is in flight).
        olds = [self.store.partition_entry(rec.topic_id, rec.partition_id)
                for rec, _ in changes]
        done: list[bool] = []
        revision = 0
        for i in range(0, len(changes), WRITE_BATCH):
            batch = changes[i:i + WRITE_BATCH]
            compares, ops = self._ops(batch)
            r = await w.txn(compares, ops)
            if r.succeeded:
                done += [True] * len(batch)
                revision = max(revision, r.revision)
                continue
            for change in batch:
                c, o = self._ops([change])
                r = await w.txn(c, o)
                done.append(r.succeeded)
                if r.succeeded:
                    revision = max(revision, r.revision)
        for (rec, _), old, ok in zip(changes, olds, done, strict=True):
            if ok:
                self._log_change(rec, old.record if old is not None else None)
        if revision:
            await self.store.wait_for_revision(revision)
        return done

    def _ops(self, batch: Sequence[tuple[PartitionRecord, int]]) -> tuple[list[Compare], list[Op]]:
        compares, ops = [], []
        for rec, mod in batch:
            key = self.store.keys.partition(rec.topic_id, rec.partition_id)
            compares.append(Compare.mod_revision(key, "==", mod))
            ops.append(Op.put(key, encode(rec)))
        return compares, ops

    def _log_change(self, rec: PartitionRecord, old: PartitionRecord | None) -> None:
        name = self.store.topic_name(rec.topic_id) or rec.topic_id
        if old is not None and old.leader_epoch != rec.leader_epoch:
            log.info("%s-%d: leader %d -> %d (epoch %d), isr %s", name, rec.partition_id,
                     old.leader, rec.leader, rec.leader_epoch, list(rec.isr))
            if rec.leader != NO_LEADER and self._on_election is not None:
                self._on_election(1, rec.leader_recovery_state == LEADER_RECOVERING
                                  and old.leader_recovery_state != LEADER_RECOVERING)
        else:
            log.info("%s-%d: isr %s (partition epoch %d)", name, rec.partition_id,
                     list(rec.isr), rec.partition_epoch)

    # ------------------------------------------------------------------ preferred leaders

    async def _rebalance_loop(self) -> None:
        while True:
            await asyncio.sleep(self.imbalance_check_interval_s)
            if not self.auto_rebalance:
                continue
            try:
                await self.rebalance()
            except NotControllerError:
                return
            except EtcdError as e:
                log.warning("preferred leader rebalance failed: %s", e)

    def imbalanced(self) -> list[tuple[PartitionRecord, int]]:
        """Partitions to hand back to their preferred replica: those of every broker whose
        not-led share of preferred partitions is above the threshold."""
        brokers = self.store.brokers()
        preferred: dict[int, list[tuple[PartitionRecord, int]]] = {}
        for _t, _p, e in self.store.all_partitions():
            if e.record.replicas:
                preferred.setdefault(e.record.replicas[0], []).append(
                    (e.record, e.mod_revision))
        out: list[tuple[PartitionRecord, int]] = []
        for node, entries in preferred.items():
            not_led = [(r, m) for r, m in entries if r.leader != node]
            if not not_led or len(not_led) * 100 <= self.imbalance_percentage * len(entries):
                continue
            for rec, mod in not_led:
                outcome = elect(rec, mod, brokers, PREFERRED)
                if outcome.record is not None:
                    out.append((outcome.record, mod))
        return out

    async def rebalance(self) -> int:
        """One preferred-leader pass; returns how many leaders moved."""
        changes = self.imbalanced()
        if not changes:
            return 0
        log.info("moving %d partition(s) back to their preferred leader", len(changes))
        return sum(await self.write(changes))
