"""The share coordinator (KIP-932, Kafka's ShareCoordinatorService/Shard): the durable
state of every share partition, in `__share_group_state`, on the coordinator runtime.

The runtime's third user, after the group and transaction coordinators: each partition
of `__share_group_state` this broker leads is one shard (`ShareStateShard`, what the
runtime's loader replays the partition into: the last ShareSnapshot per key with the
ShareUpdates after it laid over it). The share-partition leader (`ShareManager`) reads a
share partition's state on first use and writes every change (acquisitions with their
delivery counts, acknowledgements, archiving) through `SharePersister`
(`persister.py`), here directly or through the state RPCs 83-87 from another broker.

A write is one record, a write operation of the key's shard: appended at once, answered
once the in-sync replicas have it (acks=all, `share.coordinator.write.timeout.ms`), then
applied, in submission order per shard (the runtime's ordering invariant). It is a
ShareUpdate, or every `share.coordinator.snapshot.update.records.per.snapshot` updates a
ShareSnapshot of the merged state (only when no other write of that key is in flight,
so the snapshot holds everything before it). A write from a leader epoch older than the
one stored is FENCED_LEADER_EPOCH: a deposed partition leader's late write never lands;
one from a state epoch older than the stored one is FENCED_STATE_EPOCH: the state was
reset (AlterShareGroupOffsets writes a snapshot at the next state epoch) since that
leader read it, and it must read it again.

Pruning (Kafka's ShareCoordinatorShard offsets manager): the topic is
`cleanup.policy=delete` with `retention.ms=-1`, so nothing goes by itself. Each shard
knows the offset of every key's latest snapshot (from the replay, and for a live write
the partition's log end when its operation runs: the runtime appends the one-record
batch right after the operation, nothing in between); every
`share.coordinator.state.topic.prune.interval.ms` the records below the lowest of them
are deleted (DeleteRecords on the leader, never past the high watermark), and the keys
holding that lowest snapshot get a fresh one, so an idle share partition does not hold
the topic's start back for long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from yak.clock import Clock
from yak.coordinator import (
    CoordinatorLoader,
    CoordinatorResult,
    CoordinatorRuntime,
    PartitionWriter,
)
from yak.errors import ErrorCode, KafkaError, error_for_code
from yak.share import records as rec
from yak.share.records import ShareKey, ShareState, StateBatch

__all__ = ["ShareCoordinator", "ShareStateShard", "share_state_topic_configs", "unread_by"]

log = logging.getLogger(__name__)

# How long a first read waits for its partition to load after the topic's creation.
FIRST_LOAD_WAIT_MS = 3000
# A deleted key no share-partition leader has read since (`ShareStateShard.deleted`).
NO_READ = 2**31 - 1


def share_state_topic_configs(min_isr: int) -> dict[str, str]:
    """Kafka's `__share_group_state`: delete policy, kept forever (the coordinator, not
    retention, decides what may go), acks=all through min.insync.replicas."""
    return {"cleanup.policy": "delete", "retention.ms": "-1",
            "min.insync.replicas": str(min_isr)}


def unread_by(st: ShareState, leader_epoch: int) -> bool:
    """Whether a write from a share-partition leader at `leader_epoch` comes from a
    window that never read this state: the state was initialized with no start chosen
    (start -1, InitializeShareGroupState after a group delete) and no leader read it at
    that epoch (a leader's read raises the stored leader epoch before it answers). A
    leader always reads before it writes, so only a window of the deleted incarnation
    writes so: it gets FENCED_STATE_EPOCH and reads the state again, instead of
    writing the old group's progress into the new one. Writes without a leader epoch
    (-1: resets, pruning) are not leaders' and pass."""
    return st.start_offset < 0 <= leader_epoch and st.leader_epoch < leader_epoch


class ShareStateShard:
    """One `__share_group_state` partition's states, by key, as replayed and applied."""

    def __init__(self, partition: int, epoch: int) -> None:
        self.partition = partition
        self.epoch = epoch
        self.states: dict[ShareKey, ShareState] = {}
        self.in_flight: dict[ShareKey, int] = {}  # writes submitted, not yet completed
        self.snapshot_offsets: dict[ShareKey, int] = {}  # each key's latest snapshot
        # Deleted keys (DeleteShareGroupState, or a tombstone replayed) -> the lowest
        # leader epoch that may create their state again by a write: NO_READ until a
        # share-partition leader reads the key, then that leader's epoch. A window of
        # the deleted group on its leader never read the key since, so its write cannot
        # bring the deleted state back (`ShareCoordinator.write`). Kept until the key is
        # created again; not durable beyond the tombstones' replay.
        self.deleted: dict[ShareKey, int] = {}

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes,
               value: bytes | None) -> None:
        try:
            version, k = rec.decode_key(key)
            if value is None:
                self.states.pop(k, None)
                self.snapshot_offsets.pop(k, None)
                self.deleted[k] = NO_READ
                return
            v = rec.decode_value(version, value)
        except (ValueError, UnicodeDecodeError) as e:
            log.warning("skipping unreadable %s record: %s", rec.SHARE_STATE_TOPIC, e)
            return
        if version == rec.SNAPSHOT:
            self.states[k] = v
            self.snapshot_offsets[k] = offset
            self.deleted.pop(k, None)
        else:
            self._update(k, v.leader_epoch, v.start_offset, v.batches)

    def replay_end_transaction(self, producer_id: int, producer_epoch: int,
                               commit: bool) -> None:
        pass  # the share coordinator writes no transactions

    def _update(self, key: ShareKey, leader_epoch: int, start_offset: int,
                batches: Sequence[StateBatch]) -> None:
        st = self.states.get(key)
        if st is None:
            return  # an update needs its snapshot (a deleted state's late update)
        start = st.start_offset if start_offset < 0 else start_offset
        st.batches = rec.overlay(st.batches, batches, start)
        st.start_offset = start
        st.leader_epoch = max(st.leader_epoch, leader_epoch)
        st.updates += 1


class ShareCoordinator:
    def __init__(self, writer: PartitionWriter, loader: CoordinatorLoader, clock: Clock,
                 *, snapshot_every: int = 500,
                 log_end: Callable[[int], int] | None = None,
                 prune: Callable[[int, int], None] | None = None,
                 prune_interval_ms: int = 300_000) -> None:
        self.runtime: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(
            writer, loader, ShareStateShard, clock)
        self.writer = writer
        self.snapshot_every = snapshot_every
        self._managed = False  # a cluster: shards follow the partition layer's leadership
        # The partition layer's, handed in by the composition: a partition's log end
        # offset, and DeleteRecords below an offset (None: no pruning, unit tests).
        self._log_end = log_end
        self._prune = prune
        self.prune_interval_ms = prune_interval_ms
        self._prune_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[object]] = set()

    # ------------------------------------------------------------------ partitions

    def manage_partitions(self) -> None:
        """Cluster mode: load a partition only when this broker leads it."""
        self._managed = True

    async def start(self) -> None:
        if not self._managed:
            self.runtime.load_led_partitions()
        self.runtime.start_timers()
        if self._prune is not None:
            self._prune_task = asyncio.get_running_loop().create_task(self._prune_loop())

    async def stop(self) -> None:
        task, self._prune_task = self._prune_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for t in list(self._background):
            t.cancel()
        await self.runtime.stop()

    async def _prune_loop(self) -> None:
        while True:
            await asyncio.sleep(self.prune_interval_ms / 1000)
            try:
                self.prune_once()
            except Exception:  # noqa: BLE001 - logged; the next round tries again
                log.exception("pruning %s failed", rec.SHARE_STATE_TOPIC)

    def prune_once(self) -> dict[int, int]:
        """Delete, per shard, the records below every key's latest snapshot; then give the
        keys holding that lowest snapshot a fresh one (in the background). Returns
        partition -> the offset pruned to, for the partitions pruned."""
        assert self._prune is not None and self._log_end is not None
        pruned: dict[int, int] = {}
        for ctx in self.runtime.contexts():
            if self.runtime.active(ctx.partition) is None:
                continue
            shard = ctx.shard
            offsets = shard.snapshot_offsets
            if any(k not in offsets for k in shard.states):
                continue  # a key without a known snapshot: keep everything
            live = [offsets[k] for k in shard.states]
            point = min(live) if live else self._log_end(ctx.partition)
            if point <= 0:
                continue  # nothing below it (and -1 would mean the high watermark)
            try:
                self._prune(ctx.partition, point)
            except KafkaError as e:  # above the high watermark for now: next round
                log.debug("pruning %s-%d to %d: %s", rec.SHARE_STATE_TOPIC, ctx.partition,
                          point, e)
                continue
            pruned[ctx.partition] = point
            for k in [k for k in shard.states if offsets[k] == point][:100]:
                st = shard.states[k]
                task = asyncio.get_running_loop().create_task(self.write(
                    k, st.state_epoch, -1, -1, (), snapshot=True))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
        return pruned

    def partition_changed(self, topic: str, partition: int, state: object | None,
                          leads: bool) -> None:
        """The cluster publisher's hook (every topic's changes come through it)."""
        if topic != rec.SHARE_STATE_TOPIC:
            return
        epoch = getattr(state, "leader_epoch", None)
        self.runtime.on_partition_change(partition, epoch, leads)

    def partition_for(self, key: ShareKey) -> int:
        return rec.partition_for(key, self.writer.num_partitions)

    def coordinates(self, key: ShareKey) -> bool:
        return self.runtime.active(self.partition_for(key)) is not None

    async def ensure_ready(self, key: ShareKey) -> ErrorCode | None:
        """Create the topic on first use and, on one broker, load it; then None if the
        key's shard is active here, else why not (NOT_COORDINATOR / LOAD_IN_PROGRESS)."""
        if not self.writer.exists():
            try:
                await self.writer.ensure_topic()
            except KafkaError as e:
                return e.code
            if not self._managed:
                self.runtime.load_led_partitions()
            await self.runtime.wait_loaded(self.partition_for(key), FIRST_LOAD_WAIT_MS)
        elif self.runtime.is_loading(self.partition_for(key)):
            await self.runtime.wait_loaded(self.partition_for(key), FIRST_LOAD_WAIT_MS)
        return self.runtime.shard_error(self.partition_for(key))

    # ------------------------------------------------------------------ the state RPCs

    def read(self, key: ShareKey, leader_epoch: int) -> tuple[ErrorCode, ShareState | None]:
        """The state as applied so far (None: never initialized), with no side effect:
        ReadShareGroupStateSummary, DescribeShareGroupOffsets, a reset's read (leader
        epoch -1). An older leader epoch than the one stored is fenced. A share-partition
        leader loading its state reads with `read_state`, which records a newer epoch."""
        p = self.partition_for(key)
        err = self.runtime.shard_error(p)
        if err is not None:
            return err, None
        st = self.runtime.schedule_read_operation(p, lambda s: s.states.get(key))
        if st is not None and 0 <= leader_epoch < st.leader_epoch:
            return ErrorCode.fenced_leader_epoch, None
        return ErrorCode.none, st

    async def read_state(self, key: ShareKey,
                         leader_epoch: int) -> tuple[ErrorCode, ShareState | None]:
        """ReadShareGroupState by a share-partition leader at `leader_epoch` (Kafka's
        readStateAndMaybeUpdateLeaderEpoch, a write operation there too): the state
        (None: never initialized) once every write of the shard submitted before it has
        completed, so it holds what an older leader wrote up to now. An older leader
        epoch is FENCED_LEADER_EPOCH. A newer one fences the older leaders: at once in
        the shard's memory, so a deposed leader that lives on (paused past its session,
        then resumed) cannot write between this read and the new leader's first write
        (what it wrote, an accept, would be missing from the window read here, and the
        record handed out again: found by the share chaos workload); and durably, by a
        ShareUpdate carrying the epoch and no batches, answered only once committed, so
        a share-coordinator failover after the read still refuses the old leader. A
        read at the epoch stored (or -1) writes nothing."""
        if leader_epoch < 0:
            return self.read(key, leader_epoch)
        p = self.partition_for(key)
        counted: list[ShareStateShard] = []  # the shard whose in_flight this read took

        def op(shard: ShareStateShard) -> CoordinatorResult[ShareState | None]:
            st = shard.states.get(key)

            def apply() -> ShareState | None:
                return shard.states.get(key)

            if st is None and key in shard.deleted:
                was = shard.deleted[key]  # this leader may create the key again
                shard.deleted[key] = leader_epoch if was == NO_READ else max(was,
                                                                             leader_epoch)
            if st is None or leader_epoch == st.leader_epoch:
                return CoordinatorResult([], apply=apply)
            if leader_epoch < st.leader_epoch:
                raise error_for_code(ErrorCode.fenced_leader_epoch,
                                     f"leader epoch {leader_epoch} < {st.leader_epoch}")
            st.leader_epoch = leader_epoch  # the fence, before any later write's check
            shard.in_flight[key] = shard.in_flight.get(key, 0) + 1  # no snapshot meanwhile
            counted.append(shard)
            record = (rec.encode_key(rec.UPDATE, key),
                      rec.encode_update(st.snapshot_epoch, leader_epoch, -1, ()))

            def apply_update() -> ShareState | None:
                shard._update(key, leader_epoch, -1, ())  # as the replay will
                return shard.states.get(key)

            return CoordinatorResult([record], apply=apply_update)

        try:
            return ErrorCode.none, await self.runtime.schedule_write_operation(
                "share-read", p, op)
        except KafkaError as e:
            return e.code, None
        finally:
            for shard in counted:
                n = shard.in_flight.get(key, 0) - 1
                if n > 0:
                    shard.in_flight[key] = n
                else:
                    shard.in_flight.pop(key, None)

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: Sequence[StateBatch],
                    snapshot: bool = False) -> ErrorCode:
        """WriteShareGroupState: one record, durable (acks=all) before it answers. The
        first write of a key (or one at a new state epoch, or `snapshot`: pruning's
        fresh one) is a snapshot."""
        p = self.partition_for(key)

        def op(shard: ShareStateShard) -> CoordinatorResult[ErrorCode]:
            pending = shard.in_flight.get(key, 0)
            shard.in_flight[key] = pending + 1  # taken back when the write completes
            st = shard.states.get(key)
            if st is not None and 0 <= leader_epoch < st.leader_epoch:
                raise error_for_code(ErrorCode.fenced_leader_epoch,
                                     f"leader epoch {leader_epoch} < {st.leader_epoch}")
            if st is not None and state_epoch < st.state_epoch:
                # the state was reset (AlterShareGroupOffsets) since this leader read it
                raise error_for_code(ErrorCode.fenced_state_epoch,
                                     f"state epoch {state_epoch} < {st.state_epoch}")
            if st is not None and unread_by(st, leader_epoch):
                # initialized (InitializeShareGroupState, start -1) after this leader read
                # the key: its window is of a deleted incarnation (a group deleted and
                # created again); it must read the new state (see `unread_by`)
                raise error_for_code(ErrorCode.fenced_state_epoch,
                                     f"state initialized since leader epoch {leader_epoch} "
                                     "read it")
            if snapshot and st is None:
                return CoordinatorResult([], response=ErrorCode.none)  # deleted meanwhile
            if st is None and leader_epoch < shard.deleted.get(key, -1):
                # Kafka's answer to a write of an uninitialized share partition; here:
                # deleted, and this writer did not read it since (a window of the
                # deleted group, or an admin write)
                raise error_for_code(ErrorCode.invalid_request,
                                     "Write operation on uninitialized share partition "
                                     "not allowed")
            whole = (st is None or state_epoch > st.state_epoch
                     or ((snapshot or st.updates >= self.snapshot_every) and pending == 0))
            if whole:
                # -1 keeps the stored start (-1 stays -1: initialized, no start chosen)
                start = start_offset if start_offset >= 0 else (
                    0 if st is None else st.start_offset)
                merged = ShareState(
                    state_epoch if st is None else max(state_epoch, st.state_epoch),
                    leader_epoch if st is None else max(leader_epoch, st.leader_epoch),
                    start,
                    rec.overlay(() if st is None or state_epoch > st.state_epoch
                                else st.batches, batches, start),
                    0 if st is None else st.snapshot_epoch + 1)
                record = (rec.encode_key(rec.SNAPSHOT, key), rec.encode_snapshot(merged))
                # its offset: the runtime appends it right after this operation
                at = self._log_end(p) if self._log_end is not None else None

                def apply() -> ErrorCode:
                    # a newer leader's read since this operation ran raised the fence
                    now = shard.states.get(key)
                    if now is not None:
                        merged.leader_epoch = max(merged.leader_epoch, now.leader_epoch)
                    shard.states[key] = merged
                    shard.deleted.pop(key, None)
                    if at is not None and at >= 0:
                        shard.snapshot_offsets[key] = at
                    return ErrorCode.none
            else:
                assert st is not None
                record = (rec.encode_key(rec.UPDATE, key),
                          rec.encode_update(st.snapshot_epoch, leader_epoch, start_offset,
                                            batches))

                def apply() -> ErrorCode:
                    shard._update(key, leader_epoch, start_offset, batches)
                    return ErrorCode.none
            return CoordinatorResult([record], apply=apply)

        ctx = self.runtime.active(p)
        try:
            return await self.runtime.schedule_write_operation("share-write", p, op)
        except KafkaError as e:
            return e.code
        finally:
            if ctx is not None:
                n = ctx.shard.in_flight.get(key, 0) - 1
                if n > 0:
                    ctx.shard.in_flight[key] = n
                else:
                    ctx.shard.in_flight.pop(key, None)

    async def initialize(self, key: ShareKey, state_epoch: int,
                         start_offset: int) -> ErrorCode:
        """InitializeShareGroupState (Kafka's ShareCoordinatorShard.initializeState): a
        new state at `state_epoch` and `start_offset`, nothing in flight, one
        ShareSnapshot, durable before it answers. A negative partition is
        INVALID_REQUEST; a stored state epoch above `state_epoch` is FENCED_STATE_EPOCH.

        `start_offset` -1 is Kafka's uninitialized start: the share-partition leader
        chooses it by `share.auto.offset.reset` when it first reads the state. The group
        coordinator sends that when a share partition is first assigned
        (`yak/share/initialization.py`), and here it only makes sure a state exists: a
        key that has one (any start) is left as it is and answered NONE, so a member
        joining a live group never wipes the state its leader is writing (Kafka's group
        coordinator knows which partitions it initialized from its own records; Yak's
        asks the share coordinator), whatever its state epoch. A start >= 0 (an explicit
        start) replaces the state, as in Kafka. The stored leader epoch is kept (the fence of deposed leaders); a new
        key's is -1: no leader has read it yet (`unread_by`)."""
        if key.partition < 0:
            return ErrorCode.invalid_request
        p = self.partition_for(key)

        def op(shard: ShareStateShard) -> CoordinatorResult[ErrorCode]:
            st = shard.states.get(key)
            if st is not None and start_offset < 0:
                return CoordinatorResult([], response=ErrorCode.none)  # initialized
            if st is not None and st.state_epoch > state_epoch:
                raise error_for_code(ErrorCode.fenced_state_epoch,
                                     f"state epoch {state_epoch} < {st.state_epoch}")
            state = ShareState(state_epoch, -1 if st is None else st.leader_epoch,
                               max(start_offset, -1), [],
                               0 if st is None else st.snapshot_epoch + 1)
            at = self._log_end(p) if self._log_end is not None else None

            def apply() -> ErrorCode:
                now = shard.states.get(key)  # a read raised the fence meanwhile
                if now is not None:
                    state.leader_epoch = max(state.leader_epoch, now.leader_epoch)
                shard.states[key] = state
                shard.deleted.pop(key, None)
                if at is not None and at >= 0:
                    shard.snapshot_offsets[key] = at
                return ErrorCode.none
            return CoordinatorResult([(rec.encode_key(rec.SNAPSHOT, key),
                                       rec.encode_snapshot(state))], apply=apply)

        try:
            return await self.runtime.schedule_write_operation("share-initialize", p, op)
        except KafkaError as e:
            return e.code

    async def delete(self, key: ShareKey) -> ErrorCode:
        """DeleteShareGroupState: a tombstone for both record types of the key. The
        share-partition leaders of the deleted group may still hold windows of it: the
        first write of one is refused (`ShareStateShard.deleted`, `unread_by`), and the
        leader then reads the key again (`CoordinatorPersister.write`)."""
        p = self.partition_for(key)

        def op(shard: ShareStateShard) -> CoordinatorResult[ErrorCode]:
            def apply() -> ErrorCode:
                shard.states.pop(key, None)
                shard.snapshot_offsets.pop(key, None)
                shard.deleted[key] = NO_READ
                return ErrorCode.none
            return CoordinatorResult([(rec.encode_key(rec.SNAPSHOT, key), None),
                                      (rec.encode_key(rec.UPDATE, key), None)], apply=apply)

        try:
            return await self.runtime.schedule_write_operation("share-delete", p, op)
        except KafkaError as e:
            return e.code
