"""The shard glue: which `__consumer_offsets` partitions this broker coordinates, and their loading.

One job: the partitions, not what is in them. A group id hashes to one partition
(`PartitionRouter`, Kafka's own hash, so a group lives where Kafka would put it). On a single
broker every partition is this broker's; in a cluster (`manage_partitions`) only those it
leads: `on_election` replays one to its end into the two managers (group records to
`GroupMetadataManager`, offsets and open transactions to `OffsetMetadataManager`, as Kafka's
`GroupCoordinatorShard.replay` does), `on_resignation` drops its groups. `route_error` is the
check every request passes first: a bad group id, a partition still loading, or one this
broker does not coordinate. Separate from the managers, which only ever see groups this
broker owns, and from the `GroupCoordinator` facade, which only routes and delegates.
"""

from __future__ import annotations

import logging

from yak.coordinator.timer import Clock
from yak.errors import ErrorCode
from yak.group import records as rec
from yak.group.membership import GroupMetadataManager
from yak.group.offsets import OffsetMetadataManager
from yak.group.offsets_log import OffsetsLog

__all__ = ["PartitionRouter", "GroupShards"]

log = logging.getLogger(__name__)


class PartitionRouter:
    """A group id's `__consumer_offsets` partition, cached (the same ids come back)."""

    def __init__(self, offsets_log: OffsetsLog) -> None:
        self._log = offsets_log
        self._partitions: dict[str, int] = {}

    def partition_for(self, group_id: str) -> int:
        p = self._partitions.get(group_id)
        if p is None:
            if len(self._partitions) > 100_000:
                self._partitions.clear()
            p = self._partitions[group_id] = rec.partition_for(group_id, self._log.num_partitions)
        return p


class GroupShards:
    def __init__(
        self,
        offsets_log: OffsetsLog,
        clock: Clock,
        router: PartitionRouter,
        membership: GroupMetadataManager,
        offsets: OffsetMetadataManager,
    ) -> None:
        self.log = offsets_log
        self.clock = clock
        self._router = router
        self._membership = membership
        self._offsets = offsets
        self.loaded = False
        # None: every partition (one broker); else the partitions this broker leads.
        self._owned: set[int] | None = None
        self._loading: set[int] = set()

    def route_error(self, group_id: str | None) -> ErrorCode | None:
        """Empty ids are Kafka's INVALID_GROUP_ID; so are ids too long to be written as a
        key of `__consumer_offsets` (Kafka's int16-length string)."""
        if not group_id or len(group_id.encode()) > rec.MAX_STRING_BYTES:
            return ErrorCode.invalid_group_id
        if not self.loaded:
            return ErrorCode.coordinator_load_in_progress
        if self._owned is not None:
            partition = self._router.partition_for(group_id)
            if partition in self._loading:
                return ErrorCode.coordinator_load_in_progress
            if partition not in self._owned:
                return ErrorCode.not_coordinator
        return None

    def load(self) -> None:
        """Rebuild groups and committed offsets from `__consumer_offsets`.

        Later records win; tombstones delete. A group with members comes back Stable
        with fresh session timers, so consumers that keep heartbeating across a broker
        restart continue without a rebalance and the others are expired as usual.
        """
        now = self.clock.now_ms()
        for partition in range(self.log.num_partitions):
            self._load_partition(partition, now)
        self.loaded = True

    def manage_partitions(self) -> None:
        """Cluster mode: own no partition until this broker leads it (`on_election`)."""
        self._owned = set()
        self.loaded = True

    def owns(self, partition: int) -> bool:
        return self._owned is None or partition in self._owned

    def partition_loading(self, partition: int) -> bool:
        return partition in self._loading

    def on_election(self, partition: int) -> None:
        """This broker leads `partition` of `__consumer_offsets` now: load its groups."""
        if self._owned is None or partition in self._owned:
            return
        self._loading.add(partition)
        try:
            self._drop_groups_of(partition)
            self._load_partition(partition, self.clock.now_ms())
            self._owned.add(partition)
            log.info("group coordinator: loaded __consumer_offsets-%d", partition)
        except Exception:
            log.exception("group coordinator: loading __consumer_offsets-%d failed", partition)
        finally:
            self._loading.discard(partition)

    def on_resignation(self, partition: int) -> None:
        """Another broker leads `partition` now: forget its groups (their members get
        NOT_COORDINATOR and find the new coordinator)."""
        if self._owned is None:
            return
        self._owned.discard(partition)
        self._drop_groups_of(partition)

    def _drop_groups_of(self, partition: int) -> None:
        for gid in [g for g in self._membership.groups if self._router.partition_for(g) == partition]:
            self._membership.unload(gid)

    def _load_partition(self, partition: int, now: int) -> None:
        group_values: dict[str, rec.GroupValue | None] = {}
        offset_values: dict[rec.OffsetKey, rec.OffsetValue | None] = {}
        for key, value in self.log.replay(partition):
            try:
                k = rec.decode_key(key)
                if isinstance(k, rec.OffsetKey):
                    offset_values[k] = None if value is None else rec.decode_offset_value(value)
                elif isinstance(k, rec.GroupKey):
                    group_values[k.group] = (
                        None if value is None else rec.decode_group_value(value)
                    )
            except (ValueError, UnicodeDecodeError) as e:
                log.warning("skipping unreadable __consumer_offsets record: %s", e)
        for gid, gv in group_values.items():
            if gv is not None:
                self._membership.replay_group(gid, gv, now)
        for k, ov in offset_values.items():
            if ov is not None:
                self._offsets.replay_offset(k, ov, now)
        self._offsets.load_open_transactions(partition, now)
