"""The group coordinator: the one API the broker's handlers call for consumer groups.

One job: a facade, as Kafka's `GroupCoordinatorService` over its shards. It routes each
request's group id to its `__consumer_offsets` partition and refuses it unless this broker
coordinates that partition now (INVALID_GROUP_ID, COORDINATOR_LOAD_IN_PROGRESS,
NOT_COORDINATOR), then hands it to the manager that owns the answer:

- `membership.GroupMetadataManager`: classic JoinGroup/SyncGroup/Heartbeat/LeaveGroup
  (`classic`), KIP-848 ConsumerGroupHeartbeat (`consumer_group`), ListGroups/DescribeGroups;
- `offsets.OffsetMetadataManager`: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete
  and expiry.

Its state lives on the coordinator runtime (`yak.coordinator`): one shard per
`__consumer_offsets` partition this broker leads (`shard.py`), which owns that partition's
groups (unloading it drops exactly them; loading it rebuilds exactly them), every write an operation
of its partition's shard, so the writes of one partition take effect in the order they
were submitted; the runtime's timer queue runs the groups' deadlines. On a single broker
every partition is led here (loaded at start-up, or when the topic is created); in a
cluster (`manage_partitions`) a partition is loaded when this broker becomes its leader
(`on_election`) and its groups dropped when it stops leading it (`on_resignation`); a
group of another partition is NOT_COORDINATOR, so its clients ask FindCoordinator again.
All of it runs on the broker's one event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any

from yak.coordinator import (
    CoordinatorLoader,
    CoordinatorResult,
    CoordinatorRuntime,
    PartitionWriter,
    Record,
)
from yak.coordinator.timer import Clock, SystemClock, TimerQueue
from yak.errors import ErrorCode, KafkaError
from yak.group.api import (
    FetchedOffset,
    GroupConfig,
    GroupDescription,
    GroupListing,
    JoinResult,
    LeaveResult,
    MemberDescription,
    OffsetToCommit,
    SyncResult,
    storage_error_code,
)
from yak.group.consumer_group import HeartbeatResult, TopicResolver
from yak.group.membership import GroupMetadataManager
from yak.group.offsets import OffsetMetadataManager
from yak.group.shard import GroupShard, GroupShards, PartitionRouter, ShardedGroups
from yak.group.state import GroupState

__all__ = [
    "GroupConfig",
    "GroupCoordinator",
    "JoinResult",
    "SyncResult",
    "LeaveResult",
    "MemberDescription",
    "GroupDescription",
    "GroupListing",
    "FetchedOffset",
    "OffsetToCommit",
]


class GroupCoordinator:
    def __init__(
        self,
        writer: PartitionWriter,
        loader: CoordinatorLoader,
        config: GroupConfig | None = None,
        clock: Clock | None = None,
        topic_resolver: TopicResolver | None = None,
        topic_lister: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self.config = config or GroupConfig()
        self.config.validate()
        self.clock = clock or SystemClock()
        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(
            writer, loader, GroupShard, self.clock)
        self.writer = writer
        self.timers: TimerQueue = self.runtime.timers
        self._background: set[asyncio.Task[Any]] = set()
        self.router = PartitionRouter(self.runtime)
        partition_for = self.router.partition_for
        self.membership = GroupMetadataManager(
            self.runtime,
            ShardedGroups(self.runtime, self.router, attrgetter("groups")),
            ShardedGroups(self.runtime, self.router, attrgetter("consumer_groups")),
            self.config, self.clock, self.timers, partition_for,
            self._spawn, topic_resolver, topic_lister,
        )
        self.offsets = OffsetMetadataManager(
            self.membership, self.runtime, self.config, self.clock, self.timers,
            partition_for, self._spawn, topic_resolver,
        )
        self.shards = GroupShards(
            self.runtime, self.clock, self.router, self.membership, self.offsets
        )
        self.groups = self.membership.groups
        self.consumer = self.membership.consumer

    # ================================================================ partitions (shard)

    def load(self) -> None:
        """Rebuild groups and committed offsets from every `__consumer_offsets` partition
        led here (one broker): later records win, tombstones delete, and a group with
        members comes back Stable with fresh session timers."""
        self.shards.load()

    async def ensure_ready(self, group_id: str | None = None) -> None:
        """Create `__consumer_offsets` if it does not exist yet (the first FindCoordinator,
        as Kafka does), load its partitions led here and, if it was just created, wait a
        moment for `group_id`'s."""
        await self.shards.ensure_ready(group_id)

    def manage_partitions(self) -> None:
        """Cluster mode: own no partition until this broker leads it (`on_election`)."""
        self.shards.manage_partitions()

    def owns(self, partition: int) -> bool:
        return self.shards.owns(partition)

    def partition_loading(self, partition: int) -> bool:
        return self.shards.partition_loading(partition)

    def on_election(self, partition: int, epoch: int) -> None:
        """This broker leads `partition` of `__consumer_offsets` at `epoch` now: load its
        groups."""
        self.shards.on_election(partition, epoch)

    def on_resignation(self, partition: int, epoch: int | None = None) -> None:
        """Another broker leads `partition` now: forget its groups."""
        self.shards.on_resignation(partition, epoch)

    @property
    def loaded(self) -> bool:
        return self.shards.loaded

    async def start(self) -> None:
        if not self.loaded:
            self.load()
        self.offsets.schedule_expiration()
        self.runtime.start_timers()

    async def stop(self) -> None:
        groups = list(self.groups.values())  # the runtime forgets its shards on stop
        await self.runtime.stop()
        self.membership.release_all(groups)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    def partition_for(self, group_id: str) -> int:
        return self.router.partition_for(group_id)

    def _group_id_error(self, group_id: str | None) -> ErrorCode | None:
        return self.shards.route_error(group_id)

    async def _write_error(self, group_id: str | None) -> ErrorCode | None:
        """`_group_id_error` for a request that may write: the first one creates
        `__consumer_offsets` (and waits for its partition to load) if no FindCoordinator
        did, as Yak always has on one broker."""
        if group_id and self.shards.loaded and self.shards.needs_topic():
            try:
                await self.shards.ensure_ready(group_id)
            except Exception:  # noqa: BLE001 - the client finds the coordinator again
                return ErrorCode.coordinator_not_available
        return self.shards.route_error(group_id)

    # ================================================================ share groups

    async def share_group_error(self, group_id: str) -> ErrorCode | None:
        """May a share group's membership be written here now (KIP-932; the share layer's
        `MembershipStore`)? As any write's check: the first creates the topic."""
        return await self._write_error(group_id)

    async def write_share_records(self, group_id: str, records: Sequence[Record]) -> ErrorCode:
        """Write a share group's records (yak/share/group_records.py) to its partition as
        one write operation of its shard: appended before the first await, answered once
        committed, after every earlier write of the shard; a failure mapped as every
        coordinator write's (`storage_error_code`)."""
        try:
            await self.runtime.schedule_write_operation(
                "share-group", self.partition_for(group_id),
                lambda _shard: CoordinatorResult(records=list(records)))
        except KafkaError as e:
            return storage_error_code(e)
        return ErrorCode.none

    # ================================================================ membership

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        require_known_member_id: bool = True,
    ) -> JoinResult:
        err = await self._write_error(group_id)
        if err is not None:
            return JoinResult(err, member_id)
        return await self.membership.join_group(
            group_id, member_id, group_instance_id, client_id, client_host,
            session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
            require_known_member_id,
        )

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        err = await self._write_error(group_id)
        if err is not None:
            return SyncResult(err)
        return await self.membership.sync_group(
            group_id, generation_id, member_id, group_instance_id, protocol_type,
            protocol_name, assignments,
        )

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        err = self._group_id_error(group_id)
        if err is not None:
            return err
        return self.membership.heartbeat(group_id, generation_id, member_id, group_instance_id)

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[LeaveResult]]:
        """Remove a batch of members (LeaveGroup v3+); returns (top error, per member)."""
        err = self._group_id_error(group_id)
        if err is not None:
            return err, []
        return self.membership.leave_group(group_id, members)

    def consumer_group_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed: list[str] | None,
        owned: dict[Any, set[int]] | None,
        client_id: str,
        client_host: str,
        regex: str | None = None,
    ) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (KIP-848). Its group lives in its partition's shard, so
        before `__consumer_offsets` exists (one broker, no FindCoordinator yet) there is
        nowhere to keep it: COORDINATOR_NOT_AVAILABLE, and the client's FindCoordinator
        creates the topic."""
        err = self._group_id_error(group_id)
        if err is None and self.shards.needs_topic():
            err = ErrorCode.coordinator_not_available
        if err is not None:
            return HeartbeatResult(err, member_id, member_epoch)
        return self.membership.consumer_group_heartbeat(
            group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
            subscribed, owned, client_id, client_host, regex,
        )

    # ================================================================ offsets

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Sequence[OffsetToCommit],
    ) -> list[ErrorCode]:
        """One error per offset, in order. Valid ones are written as one batch."""
        err = await self._write_error(group_id)
        if err is not None:
            return [err] * len(offsets)
        return await self.offsets.commit_offsets(
            group_id, generation_id, member_id, group_instance_id, offsets
        )

    async def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Sequence[OffsetToCommit],
    ) -> list[ErrorCode]:
        """TxnOffsetCommit: pending until the transaction's marker (see the offsets manager)."""
        err = await self._write_error(group_id)
        if err is not None:
            return [err] * len(offsets)
        return await self.offsets.txn_commit_offsets(
            group_id, producer_id, producer_epoch, generation_id, member_id,
            group_instance_id, offsets,
        )

    def complete_txn_offsets(
        self, producer_id: int, commit: bool, partitions: Iterable[int]
    ) -> int:
        """A COMMIT/ABORT marker of `producer_id` reached these `__consumer_offsets`
        partitions: returns how many pending offsets were applied."""
        return self.offsets.complete_txn_offsets(producer_id, commit, partitions)

    def has_pending_txn_offsets(self, group_id: str) -> bool:
        return self.offsets.has_pending_txn_offsets(group_id)

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, Sequence[int]]] | None,
        require_stable: bool = False,
    ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """Committed offsets (-1 where none); `partitions=None` means all of the group's."""
        err = self._group_id_error(group_id)
        if err is not None:
            return err, []
        return self.offsets.fetch_offsets(group_id, partitions, require_stable)

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, int]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """OffsetDelete: refused for topics an active consumer group is subscribed to."""
        err = await self._write_error(group_id)
        if err is not None:
            return err, []
        return await self.offsets.delete_offsets(group_id, partitions)

    def expire_offsets(self) -> int:
        """KIP-211 expiry, now (the timer also runs it every
        `offsets.retention.check.interval.ms`); returns how many offsets went."""
        return self.offsets.expire_offsets()

    # ================================================================ admin views

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[GroupListing]:
        return self.membership.list_groups(states, types)

    def describe_group(self, group_id: str) -> GroupDescription:
        err = self._group_id_error(group_id)
        if err is not None:
            return GroupDescription(group_id, err, "", "", "")
        return self.membership.describe_group(group_id)

    async def delete_groups(self, group_ids: Sequence[str]) -> list[ErrorCode]:
        codes: list[ErrorCode] = []
        for gid in group_ids:
            err = await self._write_error(gid)
            group = self.groups.get(gid) if err is None else None
            if err is not None:
                codes.append(err)
            elif group is None or group.is_(GroupState.DEAD):
                codes.append(ErrorCode.group_id_not_found)
            elif not group.is_(GroupState.EMPTY) or self.consumer.has_members(gid):
                codes.append(ErrorCode.non_empty_group)
            else:
                records = self.offsets.tombstones(group) + [self.membership.tombstone(group)]
                try:
                    await self.runtime.schedule_write_operation(
                        "delete-group", self.partition_for(gid),
                        lambda _shard, records=records, group=group: CoordinatorResult(
                            records, apply=lambda: self.membership.kill(group)))
                except Exception as e:  # noqa: BLE001
                    codes.append(storage_error_code(e))
                    continue
                codes.append(ErrorCode.none)
        return codes

    # ================================================================ helpers

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
