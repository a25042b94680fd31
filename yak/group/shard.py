"""The shard glue: the group coordinator's shards of `__consumer_offsets` on the runtime.

One job: the partitions, not what is in them. A group id hashes to one partition
(`PartitionRouter`, Kafka's own hash, so a group lives where Kafka would put it), and each
partition this broker leads is one shard of the coordinator runtime (`yak.coordinator`):
`GroupShard` is what the runtime's loader replays a partition into (Kafka's
`GroupCoordinatorShard.replay`: group records for `GroupMetadataManager`, offsets and
transactional offsets for `OffsetMetadataManager`), and once the replay reached the log end
`GroupShards` has the two managers build the shard's groups from it.

Each shard owns its groups, as Kafka's `GroupCoordinatorShard` owns its
`GroupMetadataManager`'s: `GroupShard.groups` (classic groups and the `Group` that holds a
group's committed offsets), `consumer_groups` (KIP-848 members) and `txn_groups` (which of
its groups hold a producer's pending transactional offsets). Unloading a shard drops
exactly those maps, with the shard (after answering its waiting members and cancelling
its groups' timers); loading builds exactly them. The managers hold no group state of
their own: they reach a group through `ShardedGroups`, a map keyed by group id that routes
each id to the map of its partition's shard (a group of a partition not loaded here is
absent, and cannot be created).

`route_error` is the check every request passes first: a bad group id, a partition still
loading, or one this broker does not coordinate. On one broker every partition is led
here: they are loaded at start-up or when the topic is created (`ensure_ready`, the first
FindCoordinator or write); in a cluster (`manage_partitions`) the partition layer's
leadership changes load and unload them (`on_election` / `on_resignation`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, MutableMapping
from typing import TypeVar

from yak.coordinator import NO_PRODUCER, CoordinatorRuntime, Record, ShardContext, ShardState
from yak.coordinator.timer import Clock
from yak.errors import ErrorCode, error_for_code
from yak.group import records as rec
from yak.group.consumer_group import CGroup
from yak.group.membership import GroupMetadataManager
from yak.group.offsets import OffsetMetadataManager
from yak.group.state import CommittedOffset, Group

__all__ = ["PartitionRouter", "GroupShard", "GroupShards", "ShardedGroups"]

V = TypeVar("V")

log = logging.getLogger(__name__)

# How long a first write waits for its partition to be loaded after creating the topic
# (otherwise NOT_COORDINATOR, and the client finds the coordinator again).
FIRST_LOAD_WAIT_MS = 3000


class PartitionRouter:
    """A group id's `__consumer_offsets` partition, cached (the same ids come back)."""

    def __init__(self, runtime: CoordinatorRuntime[GroupShard]) -> None:
        self._writer = runtime.writer
        self._partitions: dict[str, int] = {}
        self._count = -1

    def cached(self, group_id: str) -> int | None:
        """`partition_for` as last computed (every request's route check computes it
        first, noticing a new partition count), without asking the writer again."""
        return self._partitions.get(group_id)

    def partition_for(self, group_id: str) -> int:
        n = self._writer.num_partitions
        if n != self._count:  # the topic's own count arrived (a cluster's metadata)
            self._partitions.clear()
            self._count = n
        p = self._partitions.get(group_id)
        if p is None:
            if len(self._partitions) > 100_000:
                self._partitions.clear()
            p = self._partitions[group_id] = rec.partition_for(group_id, n)
        return p


class GroupShard:
    """One `__consumer_offsets` partition's groups (`groups`, `consumer_groups`,
    `txn_groups`: producer id -> ids of this shard's groups with offsets pending for it).
    While it loads, the replay puts committed offsets straight into `groups` and keeps
    the last group record per group and transactional offset commits per producer for
    the end of the load.

    A transaction's records count from its COMMIT marker on (dropped at an ABORT); those
    with no marker yet at the log end stay pending (the transaction coordinator sends the
    marker again). A later plain commit of a key wins over a transaction that commits
    after it (log order, as Kafka compares offsets)."""

    def __init__(self, partition: int, epoch: int) -> None:
        self.partition = partition
        self.epoch = epoch
        self.group_values: dict[str, rec.GroupValue | None] = {}
        self.open_transactions: dict[int, list[Record]] = {}
        self.groups: dict[str, Group] = {}
        self.consumer_groups: dict[str, CGroup] = {}
        self.txn_groups: dict[int, set[str]] = {}
        # share groups' records (KIP-932, key versions 10-15), the last live value per
        # key, for the share layer at the end of the load (`GroupShards.on_share_loaded`)
        self.share_records: dict[bytes, bytes] = {}

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes,
               value: bytes | None) -> None:
        if producer_id != NO_PRODUCER:
            self.open_transactions.setdefault(producer_id, []).append((key, value))
            return
        if self.open_transactions:
            for pid, held in self.open_transactions.items():
                self.open_transactions[pid] = [kv for kv in held if kv[0] != key]
        self._apply(key, value)

    def replay_end_transaction(self, producer_id: int, producer_epoch: int,
                               commit: bool) -> None:
        held = self.open_transactions.pop(producer_id, [])
        if commit:
            for key, value in held:
                self._apply(key, value)

    def _apply(self, key: bytes, value: bytes | None) -> None:
        """One record that counts, in log order. Offsets go straight into the shard's
        groups (the bulk of a partition: no second pass over them when the load ends);
        a group's record waits for the end, where only its last one is built into the
        group, with its members' timers."""
        if rec.is_share_group_key(key):
            if value is None:
                self.share_records.pop(key, None)
            else:
                self.share_records[key] = value
            return
        try:
            k = rec.decode_key(key)
            if isinstance(k, rec.OffsetKey):
                tp = (k.topic, k.partition)
                group = self.groups.get(k.group)
                if value is None:
                    if group is not None:
                        group.offsets.pop(tp, None)
                        if not group.offsets and not group.pending_txn_offsets:
                            del self.groups[k.group]  # nothing left (DeleteGroups)
                    return
                ov = rec.decode_offset_value(value)
                if group is None:
                    group = self.groups[k.group] = Group(k.group)
                group.offsets[tp] = CommittedOffset(
                    ov.offset, ov.leader_epoch, ov.metadata, ov.commit_timestamp)
            elif isinstance(k, rec.GroupKey):
                self.group_values[k.group] = (
                    None if value is None else rec.decode_group_value(value))
        except (ValueError, UnicodeDecodeError) as e:
            log.warning("skipping unreadable __consumer_offsets record: %s", e)


class ShardedGroups(MutableMapping[str, V]):
    """The groups of every shard loaded here, as one map keyed by group id: each id is
    routed to its partition's shard (`field` picks which of the shard's maps). Reads of a
    group whose shard is not active here (absent, or still loading) find nothing;
    creating one raises NOT_COORDINATOR.
    Iteration visits the shards loaded here, one after another."""

    def __init__(self, runtime: CoordinatorRuntime[GroupShard], router: PartitionRouter,
                 field: Callable[[GroupShard], dict[str, V]]) -> None:
        self._runtime = runtime
        # bound once: `get` is on every group request's path, several times
        self._cached = router.cached
        self._partition_for = router.partition_for
        self._active = runtime.active
        self._field = field
        # the last id looked up, its shard and map: one request asks for the same group
        # several times; valid while that shard is active (an unloaded one is CLOSED)
        self._last: tuple[str, ShardContext[GroupShard], dict[str, V]] | None = None

    def _owner(self, group_id: str) -> dict[str, V] | None:
        last = self._last
        if last is not None and last[0] == group_id and last[1].state is ShardState.ACTIVE:
            return last[2]
        p = self._cached(group_id)
        ctx = self._active(self._partition_for(group_id) if p is None else p)
        if ctx is None:
            return None
        owner = self._field(ctx.shard)
        self._last = (group_id, ctx, owner)
        return owner

    def get(self, group_id: str, default: V | None = None) -> V | None:  # type: ignore[override]
        owner = self._owner(group_id)
        return default if owner is None else owner.get(group_id, default)

    def __contains__(self, group_id: object) -> bool:
        owner = self._owner(group_id) if isinstance(group_id, str) else None
        return owner is not None and group_id in owner

    def __getitem__(self, group_id: str) -> V:
        owner = self._owner(group_id)
        if owner is None:
            raise KeyError(group_id)
        return owner[group_id]

    def __setitem__(self, group_id: str, value: V) -> None:
        owner = self._owner(group_id)
        if owner is None:
            raise error_for_code(ErrorCode.not_coordinator,
                                 f"group {group_id!r}: its partition is not loaded here")
        owner[group_id] = value

    def __delitem__(self, group_id: str) -> None:
        owner = self._owner(group_id)
        if owner is None:
            raise KeyError(group_id)
        del owner[group_id]

    def _maps(self) -> list[dict[str, V]]:
        return [self._field(c.shard) for c in self._runtime.contexts()
                if c.state is ShardState.ACTIVE]

    def __iter__(self) -> Iterator[str]:
        for m in self._maps():
            yield from list(m)

    def values(self) -> list[V]:  # type: ignore[override]
        return [v for m in self._maps() for v in m.values()]

    def items(self) -> list[tuple[str, V]]:  # type: ignore[override]
        return [kv for m in self._maps() for kv in m.items()]

    def __len__(self) -> int:
        return sum(len(m) for m in self._maps())


class GroupShards:
    def __init__(
        self,
        runtime: CoordinatorRuntime[GroupShard],
        clock: Clock,
        router: PartitionRouter,
        membership: GroupMetadataManager,
        offsets: OffsetMetadataManager,
    ) -> None:
        self.runtime = runtime
        self.clock = clock
        self._router = router
        self._membership = membership
        self._offsets = offsets
        self.loaded = False
        self.cluster = False  # True: shards follow the partition layer's leadership
        runtime.on_loaded = self._on_loaded
        runtime.on_unloaded = self._on_unloaded
        # The share groups' (yak/share/group.py, which this layer never imports; the
        # composition sets these): a loaded partition's share-group records, and a
        # partition no longer coordinated here.
        self.on_share_loaded: Callable[[int, dict[bytes, bytes]], object] | None = None
        self.on_share_unloaded: Callable[[int], object] | None = None

    def route_error(self, group_id: str | None) -> ErrorCode | None:
        """Empty ids are Kafka's INVALID_GROUP_ID; so are ids too long to be written as a
        key of `__consumer_offsets` (Kafka's int16-length string)."""
        if not group_id or len(group_id.encode()) > rec.MAX_STRING_BYTES:
            return ErrorCode.invalid_group_id
        if not self.loaded:
            return ErrorCode.coordinator_load_in_progress
        if not self.cluster and not self.runtime.writer.exists():
            return None  # one broker, nothing written yet: no group exists
        return self.runtime.shard_error(self._router.partition_for(group_id))

    def needs_topic(self) -> bool:
        """Before `__consumer_offsets` exists a write creates it first."""
        return not self.runtime.writer.exists()

    async def ensure_ready(self, group_id: str | None = None) -> None:
        """Create `__consumer_offsets` if it does not exist yet and load the partitions
        led here (in a cluster, leadership changes load them); after creating it, wait a
        moment for `group_id`'s partition, which the partition layer may be about to hand
        to this broker."""
        created = not self.runtime.writer.exists()
        await self.runtime.writer.ensure_topic()
        if not self.cluster:
            self.runtime.load_led_partitions()
        if created and group_id is not None:
            await self.runtime.wait_loaded(self._router.partition_for(group_id),
                                           FIRST_LOAD_WAIT_MS)

    def load(self) -> None:
        """One broker: load every partition of `__consumer_offsets` led here."""
        self.runtime.load_led_partitions()
        self.loaded = True

    def manage_partitions(self) -> None:
        """Cluster mode: own no partition until this broker leads it (`on_election`)."""
        self.cluster = True
        self.loaded = True

    def owns(self, partition: int) -> bool:
        return self.runtime.active(partition) is not None

    def partition_loading(self, partition: int) -> bool:
        return self.runtime.is_loading(partition)

    def on_election(self, partition: int, epoch: int) -> None:
        """This broker leads `partition` of `__consumer_offsets` at `epoch`: load it."""
        self.runtime.on_partition_change(partition, epoch, leads=True)

    def on_resignation(self, partition: int, epoch: int | None = None) -> None:
        """Another broker leads `partition` now: forget its groups (their members get
        NOT_COORDINATOR and find the new coordinator)."""
        self.runtime.on_partition_change(partition, epoch, leads=False)

    def _on_loaded(self, ctx: ShardContext[GroupShard]) -> None:
        """The replay reached the log end: build the shard's groups from what it found.
        Later records win; tombstones delete. A group with members comes back Stable with
        fresh session timers, so consumers that keep heartbeating across a broker restart
        (or a move of the partition) continue without a rebalance."""
        shard, now = ctx.shard, self.clock.now_ms()
        for group in shard.groups.values():  # made by an offset record: idle since now
            if group.state_timestamp_ms < 0:
                group.state_timestamp_ms = now
        for gid, gv in shard.group_values.items():
            if gv is not None:
                self._membership.replay_group(shard.groups, gid, gv, now)
        self._offsets.load_open_transactions(shard.groups, shard.txn_groups,
                                             shard.open_transactions, now)
        found = len(shard.groups)
        if self.on_share_loaded is not None:
            self.on_share_loaded(ctx.partition, shard.share_records)
        # the groups hold the state from here on
        shard.group_values, shard.open_transactions, shard.share_records = {}, {}, {}
        log.log(logging.INFO if found else logging.DEBUG,
                "group coordinator: loaded __consumer_offsets-%d at epoch %d (%d groups)",
                ctx.partition, ctx.epoch, found)

    def _on_unloaded(self, ctx: ShardContext[GroupShard]) -> None:
        """Exactly this shard's groups go, with the shard."""
        shard = ctx.shard
        if self.on_share_unloaded is not None:
            self.on_share_unloaded(ctx.partition)
        self._membership.unload_groups(shard.groups.values(), shard.consumer_groups.values())
        shard.groups, shard.consumer_groups, shard.txn_groups = {}, {}, {}
