"""The classic group coordinator: Kafka's join/sync protocol as an explicit state machine.

Every public method is called from the broker's single event loop, and all state
changes happen synchronously between awaits, so no locks are needed: a JoinGroup
that must wait for the join barrier returns a future that a later event (another
member joining, a timer) resolves. Writes to `__consumer_offsets` are the only
awaits, and state is re-checked after each one (the generation may have moved on
while the write was in flight), exactly as Kafka does in its append callbacks.

Semantics follow Kafka's `GroupCoordinator.scala` (the pre-KIP-848 coordinator):
KIP-394 member-id round trip, KIP-345 static membership, KIP-211 offset expiry of
empty groups, `group.initial.rebalance.delay.ms` for the first rebalance of an
empty group. On a single broker the coordinator owns every `__consumer_offsets`
partition; in a cluster (`manage_partitions`) it owns the partitions this broker leads,
loading one when it becomes its leader (`on_election`) and dropping its groups when it
stops leading it (`on_resignation`); a group of another partition is NOT_COORDINATOR, so
its clients ask FindCoordinator again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
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
from yak.group.consumer_group import ConsumerGroups, HeartbeatResult, TopicResolver
from yak.group.offsets import OffsetMetadataManager
from yak.group.offsets_log import OffsetsLog, Record
from yak.group.state import Group, GroupState, Member
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
        self.groups: dict[str, Group] = {}
        self.loaded = False
        # None: every partition (one broker); else the partitions this broker leads.
        self._owned: set[int] | None = None
        self._loading: set[int] = set()
        self._timer_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._partitions: dict[str, int] = {}  # group id -> offsets partition (hash cache)
        self.consumer = ConsumerGroups(
            self.timers,
            self.clock,
            topic_resolver or (lambda _topic: None),
            self.config.consumer_session_timeout_ms,
            self.config.consumer_heartbeat_interval_ms,
            topic_lister,
        )
        self.offsets = OffsetMetadataManager(
            self, offsets_log, self.config, self.clock, self.timers, self.partition_for,
            self._spawn, topic_resolver,
        )

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
            group = self.groups.pop(gid)
            for m in list(group.members.values()):
                self.timers.cancel(("hb", gid, m.member_id))
                self._resolve_join(m, JoinResult(ErrorCode.not_coordinator, m.member_id))
                self._resolve_sync(m, SyncResult(ErrorCode.not_coordinator))
            self.consumer.groups.pop(gid, None)

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
                self._load_group(gid, gv, now)
        for k, ov in offset_values.items():
            if ov is not None:
                self.offsets.replay_offset(k, ov, now)
        self.offsets.load_open_transactions(partition, now)

    def _load_group(self, group_id: str, gv: rec.GroupValue, now: int) -> None:
        group = Group(
            group_id,
            generation_id=gv.generation,
            protocol_type=gv.protocol_type or None,
            protocol_name=gv.protocol,
            leader_id=gv.leader,
            state_timestamp_ms=gv.current_state_timestamp
            if gv.current_state_timestamp >= 0
            else now,
        )
        for mv in gv.members:
            member = Member(
                member_id=mv.member_id,
                group_instance_id=mv.group_instance_id,
                client_id=mv.client_id,
                client_host=mv.client_host,
                session_timeout_ms=mv.session_timeout,
                rebalance_timeout_ms=mv.rebalance_timeout,
                protocol_type=gv.protocol_type,
                protocols=[(gv.protocol or "", mv.subscription)],
                assignment=mv.assignment,
                is_new=False,
            )
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members), None)
        self.groups[group_id] = group
        for member in group.members.values():
            self.schedule_session_timeout(group, member)

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
        for group in self.groups.values():
            for m in group.members.values():
                self._resolve_join(m, JoinResult(ErrorCode.not_coordinator, m.member_id))
                self._resolve_sync(m, SyncResult(ErrorCode.not_coordinator))
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

    # ================================================================ JoinGroup

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
        outcome = self._join(
            group_id,
            member_id,
            group_instance_id,
            client_id,
            client_host,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            list(protocols),
            require_known_member_id,
        )
        if isinstance(outcome, JoinResult):
            return outcome
        return await outcome

    def _join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> JoinResult | asyncio.Future[JoinResult]:
        err = self._group_id_error(group_id)
        if err is not None:
            return JoinResult(err, member_id)
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        if rebalance_timeout_ms < 0:  # JoinGroup v0 has none: Kafka uses the session timeout
            rebalance_timeout_ms = session_timeout_ms
        if self.consumer.has_members(group_id):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            if not protocol_type or not protocols:  # refused without leaving a group behind
                return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
            group = Group(group_id, state_timestamp_ms=self.clock.now_ms())
            self.groups[group_id] = group
        if group.is_(GroupState.DEAD):
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        if not group.supports_protocols(protocol_type, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        args = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type)
        if not member_id:
            return self._join_unknown_member(
                group, instance_id, protocols, require_known_member_id, *args
            )
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.timers.cancel(("pending", group_id, member_id))
            return self._add_member_and_rebalance(group, member_id, instance_id, protocols, *args)
        err = group.member_error(member_id, instance_id)
        if err is not None:
            return JoinResult(err, member_id)
        member = group.members[member_id]
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        if group.is_(GroupState.PREPARING_REBALANCE):
            return self._update_member_and_rebalance(group, member, protocols)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            if member.same_protocols(protocols):
                # A retried join (lost response): answer with the generation just formed.
                return self._current_join_result(group, member)
            return self._update_member_and_rebalance(group, member, protocols)
        if group.is_(GroupState.STABLE):
            if member.member_id == group.leader_id or not member.same_protocols(protocols):
                # The leader rejoining asks for a rebalance (e.g. topic metadata changed).
                return self._update_member_and_rebalance(group, member, protocols)
            return self._current_join_result(group, member)
        return JoinResult(ErrorCode.unknown_member_id, member_id)

    def _join_unknown_member(
        self,
        group: Group,
        instance_id: str | None,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
    ) -> JoinResult | asyncio.Future[JoinResult]:
        args = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type)
        if instance_id is not None:
            new_id = f"{instance_id}-{uuid.uuid4()}"
            old_id = group.static_member_id(instance_id)
            if old_id is not None and old_id in group.members:
                return self._replace_static_member(
                    group, group.members[old_id], new_id, protocols, *args
                )
            return self._add_member_and_rebalance(group, new_id, instance_id, protocols, *args)
        if len(group.members) + len(group.pending_members) >= self.config.max_group_size:
            return JoinResult(ErrorCode.group_max_size_reached)
        new_id = f"{client_id}-{uuid.uuid4()}"
        if require_known_member_id:
            # KIP-394: hand out the id first, so a client that times out and retries
            # cannot leave a trail of phantom members behind.
            group.pending_members.add(new_id)
            self.timers.schedule(
                ("pending", group.group_id, new_id),
                self.clock.now_ms() + session_timeout_ms,
                lambda: self._expire_pending(group.group_id, new_id),
            )
            return JoinResult(ErrorCode.member_id_required, new_id)
        return self._add_member_and_rebalance(group, new_id, None, protocols, *args)

    def _add_member_and_rebalance(
        self,
        group: Group,
        member_id: str,
        instance_id: str | None,
        protocols: list[tuple[str, bytes]],
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
    ) -> JoinResult | asyncio.Future[JoinResult]:
        if len(group.members) >= self.config.max_group_size:
            return JoinResult(ErrorCode.group_max_size_reached, member_id)
        member = Member(
            member_id=member_id,
            group_instance_id=instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
        )
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = fut
        group.add(member)
        group.new_member_joined = True
        self._maybe_prepare_rebalance(group)
        self._maybe_complete_join(group)
        return fut

    def _update_member_and_rebalance(
        self, group: Group, member: Member, protocols: list[tuple[str, bytes]]
    ) -> asyncio.Future[JoinResult]:
        member.protocols = protocols
        self._resolve_join(member, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = fut
        self._maybe_prepare_rebalance(group)
        self._maybe_complete_join(group)
        return fut

    def _replace_static_member(
        self,
        group: Group,
        old: Member,
        new_id: str,
        protocols: list[tuple[str, bytes]],
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
    ) -> JoinResult | asyncio.Future[JoinResult]:
        """KIP-345: a restarted static member takes over its old identity. If the group is
        Stable and the protocol would not change, it simply gets its old assignment back
        (no rebalance); the old incarnation, if still around, is fenced."""
        self._resolve_join(old, JoinResult(ErrorCode.fenced_instance_id, old.member_id))
        self._resolve_sync(old, SyncResult(ErrorCode.fenced_instance_id))
        self.timers.cancel(("hb", group.group_id, old.member_id))
        was_leader = group.leader_id == old.member_id
        del group.members[old.member_id]
        old.member_id = new_id
        old.client_id, old.client_host = client_id, client_host
        old.session_timeout_ms, old.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        old.protocols = protocols
        group.members[new_id] = old
        assert old.group_instance_id is not None
        group.static_members[old.group_instance_id] = new_id
        if was_leader:
            group.leader_id = new_id
        member = old
        if group.is_(GroupState.STABLE):
            # Like Kafka, only a change of the selected protocol forces a rebalance: the
            # restarted consumer's subscription bytes differ (it owns nothing yet).
            if group.select_protocol() == group.protocol_name:
                self.schedule_session_timeout(group, member)
                self._spawn(self._store_group_quietly(group))
                result = self._current_join_result(group, member)
                result.skip_assignment = member.member_id == group.leader_id
                return result
            return self._update_member_and_rebalance(group, member, protocols)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return self._update_member_and_rebalance(group, member, protocols)
        # PreparingRebalance: this member simply joins the barrier under its new id.
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = fut
        self._maybe_complete_join(group)
        return fut

    def _current_join_result(self, group: Group, member: Member) -> JoinResult:
        self.schedule_session_timeout(group, member)
        return JoinResult(
            ErrorCode.none,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=self._member_list(group) if member.member_id == group.leader_id else [],
        )

    @staticmethod
    def _member_list(group: Group) -> list[tuple[str, str | None, bytes]]:
        return [
            (m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
            for m in group.members.values()
        ]

    # ---------------------------------------------------------------- the join barrier

    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: Group) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            for m in group.members.values():
                self._resolve_sync(m, SyncResult(ErrorCode.rebalance_in_progress))
        was_empty = group.is_(GroupState.EMPTY)
        now = self.clock.now_ms()
        group.transition(GroupState.PREPARING_REBALANCE, now)
        timeout = group.rebalance_timeout_ms()
        key = ("join", group.group_id)
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            # Let the other members of a freshly started application arrive before the
            # first assignment, instead of rebalancing once per member.
            delay = min(self.config.initial_rebalance_delay_ms, timeout)
            group.initial_join_pending = True
            group.new_member_joined = False
            remaining = timeout - delay
            self.timers.schedule(key, now + delay, lambda: self._on_initial_delay(group, remaining))
        else:
            group.initial_join_pending = False
            group.join_deadline_ms = now + timeout
            self.timers.schedule(key, now + timeout, lambda: self._complete_join(group))
            # Nobody left to wait for (the last member left): the barrier opens at once.
            self._maybe_complete_join(group)

    def _on_initial_delay(self, group: Group, remaining_ms: int) -> None:
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        if group.new_member_joined and remaining_ms > 0:
            group.new_member_joined = False
            delay = min(self.config.initial_rebalance_delay_ms, remaining_ms)
            self.timers.schedule(
                ("join", group.group_id),
                self.clock.now_ms() + delay,
                lambda: self._on_initial_delay(group, remaining_ms - delay),
            )
            return
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if (
            group.is_(GroupState.PREPARING_REBALANCE)
            and not group.initial_join_pending
            and group.all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        self.timers.cancel(("join", group.group_id))
        group.initial_join_pending = False
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        # Dynamic members that did not rejoin in time are gone; static ones keep their
        # seat until their session times out (they may be restarting).
        for m in group.not_yet_rejoined():
            if m.group_instance_id is None:
                self._drop_member(group, m)
        now = self.clock.now_ms()
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, now)
            self._spawn(self._store_group_quietly(group))
            return
        group.protocol_name = group.select_protocol()
        leader = group.members.get(group.leader_id or "")
        if leader is None or not leader.awaiting_join:
            joined = [m for m in group.members.values() if m.awaiting_join]
            group.leader_id = (joined or list(group.members.values()))[0].member_id
        group.transition(GroupState.COMPLETING_REBALANCE, now)
        members = self._member_list(group)
        for m in group.members.values():
            self._resolve_join(
                m,
                JoinResult(
                    ErrorCode.none,
                    member_id=m.member_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader_id=group.leader_id or "",
                    members=members if m.member_id == group.leader_id else [],
                ),
            )
            m.is_new = False
            self.schedule_session_timeout(group, m)

    # ================================================================ SyncGroup

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
        outcome = self._sync(
            group_id,
            generation_id,
            member_id,
            group_instance_id,
            protocol_type,
            protocol_name,
            assignments,
        )
        if isinstance(outcome, SyncResult):
            return outcome
        return await outcome

    def _sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult | asyncio.Future[SyncResult]:
        err = self._group_id_error(group_id)
        if err is not None:
            return SyncResult(err)
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD, GroupState.EMPTY):
            return SyncResult(ErrorCode.unknown_member_id)
        err = group.member_error(member_id, instance_id)
        if err is not None:
            return SyncResult(err)
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        member = group.members[member_id]
        if group.is_(GroupState.PREPARING_REBALANCE):
            return SyncResult(ErrorCode.rebalance_in_progress)
        if group.is_(GroupState.STABLE):
            self.schedule_session_timeout(group, member)
            return SyncResult(
                ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment
            )
        # CompletingRebalance: everyone waits for the leader's assignment.
        self._resolve_sync(member, SyncResult(ErrorCode.rebalance_in_progress))
        fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.sync_future = fut
        if member_id == group.leader_id:
            for mid, m in group.members.items():
                m.assignment = assignments.get(mid, b"")
            group.transition(GroupState.STABLE, self.clock.now_ms())
            self._spawn(self._store_assignment(group, group.generation_id))
        return fut

    async def _store_assignment(self, group: Group, generation: int) -> None:
        """Persist the new generation, then release the members waiting in SyncGroup."""
        try:
            await self._store_group(group)
            error = ErrorCode.none
        except Exception as e:  # noqa: BLE001 - any write failure means a new rebalance
            log.warning("storing group %r failed: %s", group.group_id, e)
            error = storage_error_code(e)
        if group.generation_id != generation or not group.is_(GroupState.STABLE):
            return  # a newer rebalance already answered the waiters
        for m in group.members.values():
            if error is ErrorCode.none:
                result = SyncResult(error, group.protocol_type, group.protocol_name, m.assignment)
            else:
                m.assignment = b""
                result = SyncResult(error)
            self._resolve_sync(m, result)
        if error is not ErrorCode.none:
            self._prepare_rebalance(group)

    # ================================================================ Heartbeat / Leave

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        err = self._group_id_error(group_id)
        if err is not None:
            return err
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD, GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        err = group.member_error(member_id, group_instance_id)
        if err is not None:
            return err
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        self.schedule_session_timeout(group, group.members[member_id])
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[LeaveResult]]:
        """Remove a batch of members (LeaveGroup v3+); returns (top error, per member)."""
        err = self._group_id_error(group_id)
        if err is not None:
            return err, []
        group = self.groups.get(group_id)
        results: list[LeaveResult] = []
        for member_id, instance_id in members:
            code = self._leave_one(group, member_id, instance_id)
            results.append(LeaveResult(member_id, instance_id, code))
        return ErrorCode.none, results

    def _leave_one(self, group: Group | None, member_id: str, instance_id: str | None) -> ErrorCode:
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.unknown_member_id
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            if member_id and member_id != known:
                return ErrorCode.fenced_instance_id
            member_id = known
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.timers.cancel(("pending", group.group_id, member_id))
            self._maybe_complete_join(group)
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        self._remove_member_and_update(group, member)
        return ErrorCode.none

    # ---------------------------------------------------------------- expiry

    def schedule_session_timeout(self, group: Group, member: Member) -> None:
        gid, mid = group.group_id, member.member_id
        self.timers.schedule(
            ("hb", gid, mid),
            self.clock.now_ms() + member.session_timeout_ms,
            lambda: self._on_session_timeout(gid, mid),
        )

    def _on_session_timeout(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return
        if member.awaiting_join or member.awaiting_sync:
            # A member blocked in JoinGroup/SyncGroup cannot heartbeat: the barrier's own
            # timeout decides its fate, not the session timer.
            self.schedule_session_timeout(group, member)
            return
        log.info("group %r: member %s session timed out", group_id, member_id)
        self._remove_member_and_update(group, member)

    def _expire_pending(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.pending_members:
            return
        group.pending_members.discard(member_id)
        self._maybe_complete_join(group)

    def _drop_member(self, group: Group, member: Member) -> None:
        self.timers.cancel(("hb", group.group_id, member.member_id))
        self._resolve_join(member, JoinResult(ErrorCode.unknown_member_id, member.member_id))
        self._resolve_sync(member, SyncResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)

    def _remove_member_and_update(self, group: Group, member: Member) -> None:
        self._drop_member(group, member)
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    # ================================================================ KIP-848

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
        """ConsumerGroupHeartbeat; the group's committed offsets live in the same `Group`
        as a classic group's, so OffsetCommit/Fetch and the admin APIs work unchanged."""
        err = self._group_id_error(group_id)
        if err is not None:
            return HeartbeatResult(err, member_id, member_epoch)
        group = self.groups.get(group_id)
        if group is not None and (group.members or group.pending_members):
            return HeartbeatResult(
                ErrorCode.group_id_not_found,
                member_id,
                member_epoch,
                error_message=f"Group {group_id} is not a consumer group.",
            )
        result = self.consumer.heartbeat(
            group_id,
            member_id,
            member_epoch,
            instance_id,
            rack_id,
            rebalance_timeout_ms,
            subscribed,
            owned,
            client_id,
            client_host,
            regex,
        )
        if result.error is ErrorCode.none:
            if group is None:
                group = Group(group_id, protocol_type="consumer")
                self.groups[group_id] = group
            group.protocol_type = "consumer"
            group.state_timestamp_ms = self.clock.now_ms()  # offsets expire after inactivity
        return result

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
        want_states = {s.lower() for s in states}
        want_types = {t.lower() for t in types}
        out = []
        for g in self.groups.values():
            if g.is_(GroupState.DEAD):
                continue
            cg = self.consumer.groups.get(g.group_id)
            state, kind = (cg.state(), "consumer") if cg is not None else (g.state.value, "classic")
            if want_states and state.lower() not in want_states:
                continue
            if want_types and kind not in want_types:
                continue
            out.append(GroupListing(g.group_id, g.protocol_type or "", state, kind))
        return out

    def describe_group(self, group_id: str) -> GroupDescription:
        err = self._group_id_error(group_id)
        if err is not None:
            return GroupDescription(group_id, err, "", "", "")
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return GroupDescription(group_id, ErrorCode.group_id_not_found, "Dead", "", "")
        cg = self.consumer.groups.get(group_id)
        if cg is not None:
            return GroupDescription(
                group_id,
                ErrorCode.none,
                cg.state(),
                "consumer",
                "uniform",
                [
                    MemberDescription(
                        m.member_id, m.instance_id, m.client_id, m.client_host, b"", b""
                    )
                    for m in cg.members.values()
                ],
            )
        stable = group.is_(GroupState.STABLE)
        return GroupDescription(
            group_id,
            ErrorCode.none,
            group.state.value,
            group.protocol_type or "",
            # Kafka only names the protocol once it is in force.
            group.protocol_name or "" if stable else "",
            [
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(group.protocol_name) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in group.members.values()
            ],
        )

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
                    await self.log.append(self.partition_for(gid), self._tombstones(group))
                except Exception as e:  # noqa: BLE001
                    codes.append(storage_error_code(e))
                    continue
                self.kill(group)
                codes.append(ErrorCode.none)
        return codes

    def _tombstones(self, group: Group) -> list[Record]:
        out = self.offsets.tombstones(group)
        out.append((rec.encode_group_key(group.group_id), None))
        return out

    def kill(self, group: Group) -> None:
        self.consumer.groups.pop(group.group_id, None)
        group.transition(GroupState.DEAD, self.clock.now_ms())
        self.timers.cancel(("join", group.group_id))
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    # ================================================================ helpers

    def _group_record(self, group: Group) -> Record:
        value = rec.GroupValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=group.state_timestamp_ms,
            members=tuple(
                rec.MemberValue(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata_for(group.protocol_name),
                    m.assignment,
                )
                for m in group.members.values()
            ),
        )
        return rec.encode_group_key(group.group_id), rec.encode_group_value(value)

    async def _store_group(self, group: Group) -> None:
        await self.log.append(self.partition_for(group.group_id), [self._group_record(group)])

    async def _store_group_quietly(self, group: Group) -> None:
        try:
            await self._store_group(group)
        except Exception as e:  # noqa: BLE001 - the next generation will be stored again
            log.warning("storing group %r failed: %s", group.group_id, e)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @staticmethod
    def _resolve_join(member: Member, result: JoinResult) -> None:
        fut, member.join_future = member.join_future, None
        if fut is not None and not fut.done():
            fut.set_result(result)

    @staticmethod
    def _resolve_sync(member: Member, result: SyncResult) -> None:
        fut, member.sync_future = member.sync_future, None
        if fut is not None and not fut.done():
            fut.set_result(result)
