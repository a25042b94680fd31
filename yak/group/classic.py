"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat and LeaveGroup as a state machine.

One job: Kafka's join/sync protocol for classic groups (the pre-KIP-848 coordinator's
`GroupCoordinator.scala`, `ClassicGroup` handling in Kafka's `GroupMetadataManager`): the
KIP-394 member-id round trip, KIP-345 static membership, the join barrier with
`group.initial.rebalance.delay.ms`, the leader's assignment, session and rebalance timers,
and writing the generation to `__consumer_offsets`. Separate from `membership` (which
answers for the groups, kept in their shards, and routes between this and the KIP-848
`consumer_group`) as
`consumer_group` is: each protocol's state machine reads alone.

About 600 lines: the join barrier, SyncGroup, LeaveGroup and the session timers call one
another (a member that leaves or expires reopens the barrier), so they stay one machine.

Every method runs on the broker's one event loop and changes state between awaits, so no
locks: a JoinGroup that waits for the barrier gets a future that a later event resolves.
Writes to `__consumer_offsets` are the only awaits, and state is re-checked after each
(the generation may have moved on meanwhile), as Kafka does in its append callbacks.
Callers have already routed the group id to a partition this broker owns.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

from yak.coordinator import CoordinatorResult, CoordinatorRuntime
from yak.coordinator.timer import Clock, TimerQueue
from yak.errors import ErrorCode
from yak.group import records as rec
from yak.group.api import GroupConfig, JoinResult, LeaveResult, SyncResult, storage_error_code
from yak.group.consumer_group import ConsumerGroups
from yak.group.state import Group, GroupState, Member, group_from_value, group_value

__all__ = ["ClassicGroups"]

log = logging.getLogger(__name__)


class ClassicGroups:
    def __init__(
        self,
        groups: MutableMapping[str, Group],
        consumer: ConsumerGroups,
        runtime: CoordinatorRuntime[Any],
        config: GroupConfig,
        clock: Clock,
        timers: TimerQueue,
        partition_for: Callable[[str], int],
        spawn: Callable[[Any], None],
    ) -> None:
        self.groups = groups  # the shards' groups (`shard.ShardedGroups`), shared with the managers
        self.consumer = consumer  # a group with KIP-848 members refuses classic joins
        self.runtime = runtime
        self.config = config
        self.clock = clock
        self.timers = timers
        self._partition_for = partition_for
        self._spawn = spawn

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

    # ================================================================ storage

    def replay_group(self, into: dict[str, Group], group_id: str, gv: rec.GroupValue,
                     now: int) -> None:
        """A group read back from `__consumer_offsets` into its shard's map: its members
        get fresh session timers, so those that keep heartbeating continue without a
        rebalance."""
        group = group_from_value(group_id, gv, now)
        replayed = into.get(group_id)  # the group's offsets, replayed already
        if replayed is not None:
            group.offsets = replayed.offsets
            group.pending_txn_offsets = replayed.pending_txn_offsets
        into[group_id] = group
        for member in group.members.values():
            self.schedule_session_timeout(group, member)

    def release_waiters(self, group: Group, cancel_sessions: bool) -> None:
        """This broker stops coordinating `group` (unload, shutdown): every member blocked
        in JoinGroup/SyncGroup is answered NOT_COORDINATOR and finds the coordinator again."""
        gid = group.group_id
        for m in list(group.members.values()):
            if cancel_sessions:
                self.timers.cancel(("hb", gid, m.member_id))
            self._resolve_join(m, JoinResult(ErrorCode.not_coordinator, m.member_id))
            self._resolve_sync(m, SyncResult(ErrorCode.not_coordinator))

    async def _store_group(self, group: Group) -> None:
        record = rec.encode_group_key(group.group_id), rec.encode_group_value(group_value(group))
        await self.runtime.schedule_write_operation(
            "store-group", self._partition_for(group.group_id),
            lambda _shard: CoordinatorResult([record]))

    async def _store_group_quietly(self, group: Group) -> None:
        try:
            await self._store_group(group)
        except Exception as e:  # noqa: BLE001 - the next generation will be stored again
            log.warning("storing group %r failed: %s", group.group_id, e)

    # ================================================================ helpers

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
