"""The group coordinator: the one API the broker's handlers call for consumer groups.

One job: a facade, as Kafka's `GroupCoordinatorService` over its shards. It routes each
request's group id to its `__consumer_offsets` partition and refuses it unless this broker
coordinates that partition now (INVALID_GROUP_ID, COORDINATOR_LOAD_IN_PROGRESS,
NOT_COORDINATOR), then hands it to the manager that owns the answer:

- `membership.GroupMetadataManager`: classic JoinGroup/SyncGroup/Heartbeat/LeaveGroup
  (`classic`), KIP-848 ConsumerGroupHeartbeat (`consumer_group`), ListGroups/DescribeGroups;
- `offsets.OffsetMetadataManager`: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete
  and expiry.

It also holds the partitions: on a single broker it owns every `__consumer_offsets`
partition; in a cluster (`manage_partitions`) it owns the partitions this broker leads,
loading one when it becomes its leader (`on_election`) and dropping its groups when it
stops leading it (`on_resignation`); a group of another partition is NOT_COORDINATOR, so
its clients ask FindCoordinator again. All of it runs on the broker's one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from yak.errors import ErrorCode
from yak.group import records as rec
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
from yak.group.offsets_log import OffsetsLog
from yak.group.state import GroupState
from yak.group.timers import Clock, SystemClock, TimerQueue

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

log = logging.getLogger(__name__)


class GroupCoordinator:
    def __init__(
        self,
        offsets_log: OffsetsLog,
        config: GroupConfig | None = None,
        clock: Clock | None = None,
        topic_resolver: TopicResolver | None = None,
        topic_lister: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self.log = offsets_log
        self.config = config or GroupConfig()
        self.config.validate()
        self.clock = clock or SystemClock()
        self.timers = TimerQueue(self.clock)
        self.loaded = False
        # None: every partition (one broker); else the partitions this broker leads.
        self._owned: set[int] | None = None
        self._loading: set[int] = set()
        self._timer_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._partitions: dict[str, int] = {}  # group id -> offsets partition (hash cache)
        self.membership = GroupMetadataManager(
            offsets_log, self.config, self.clock, self.timers, self.partition_for,
            self._spawn, topic_resolver, topic_lister,
        )
        self.offsets = OffsetMetadataManager(
            self.membership, offsets_log, self.config, self.clock, self.timers,
            self.partition_for, self._spawn, topic_resolver,
        )
        self.groups = self.membership.groups
        self.consumer = self.membership.consumer

    # ================================================================ lifecycle

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
        for gid in [g for g in self.groups if self.partition_for(g) == partition]:
            self.membership.unload(gid)

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
                self.membership.replay_group(gid, gv, now)
        for k, ov in offset_values.items():
            if ov is not None:
                self.offsets.replay_offset(k, ov, now)
        self.offsets.load_open_transactions(partition, now)

    async def start(self) -> None:
        if not self.loaded:
            self.load()
        self.offsets.schedule_expiration()
        self._timer_task = asyncio.create_task(self.timers.run_forever(), name="group-timers")

    async def stop(self) -> None:
        if self._timer_task is not None:
            self._timer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer_task
            self._timer_task = None
        self.membership.release_all()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    def partition_for(self, group_id: str) -> int:
        p = self._partitions.get(group_id)
        if p is None:
            if len(self._partitions) > 100_000:
                self._partitions.clear()
            p = self._partitions[group_id] = rec.partition_for(group_id, self.log.num_partitions)
        return p

    # ================================================================ validation

    def _group_id_error(self, group_id: str | None) -> ErrorCode | None:
        """Empty ids are Kafka's INVALID_GROUP_ID; so are ids too long to be written as a
        key of `__consumer_offsets` (Kafka's int16-length string)."""
        if not group_id or len(group_id.encode()) > rec.MAX_STRING_BYTES:
            return ErrorCode.invalid_group_id
        if not self.loaded:
            return ErrorCode.coordinator_load_in_progress
        if self._owned is not None:
            partition = self.partition_for(group_id)
            if partition in self._loading:
                return ErrorCode.coordinator_load_in_progress
            if partition not in self._owned:
                return ErrorCode.not_coordinator
        return None

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
        err = self._group_id_error(group_id)
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
        err = self._group_id_error(group_id)
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
        """ConsumerGroupHeartbeat (KIP-848)."""
        err = self._group_id_error(group_id)
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
        err = self._group_id_error(group_id)
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
        err = self._group_id_error(group_id)
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
        err = self._group_id_error(group_id)
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
            err = self._group_id_error(gid)
            group = self.groups.get(gid) if err is None else None
            if err is not None:
                codes.append(err)
            elif group is None or group.is_(GroupState.DEAD):
                codes.append(ErrorCode.group_id_not_found)
            elif not group.is_(GroupState.EMPTY) or self.consumer.has_members(gid):
                codes.append(ErrorCode.non_empty_group)
            else:
                try:
                    await self.log.append(self.partition_for(gid),
                                          self.offsets.tombstones(group)
                                          + [self.membership.tombstone(group)])
                except Exception as e:  # noqa: BLE001
                    codes.append(storage_error_code(e))
                    continue
                self.membership.kill(group)
                codes.append(ErrorCode.none)
        return codes

    # ================================================================ helpers

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
