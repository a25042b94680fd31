"""The membership manager: which groups exist and who is in them, for both group protocols.

One job: answer for membership, as Kafka's `GroupMetadataManager`:
the classic protocol's JoinGroup/SyncGroup/Heartbeat/LeaveGroup (its state machine, the
join barrier and session timers, is `classic.ClassicGroups`), the KIP-848
ConsumerGroupHeartbeat (`consumer_group.ConsumerGroups`), which of the two a group id
speaks, the admin views (ListGroups, DescribeGroups), a group's removal, and a group's
record read back when a partition loads or dropped when it unloads. The groups are the
shards' (`shard.GroupShard`); `groups` and `consumer.groups` are maps that route a group
id to its shard's. Separate from
`offsets.OffsetMetadataManager`, which keeps what the groups have committed: membership
never writes an offset, and offsets never rebalance anyone.

Callers (the `GroupCoordinator` facade) have already routed the group id to a partition
this broker owns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

from yak.coordinator import CoordinatorRuntime, Record
from yak.coordinator.timer import Clock, TimerQueue
from yak.errors import ErrorCode
from yak.group import records as rec
from yak.group.api import GroupConfig, GroupDescription, GroupListing, MemberDescription
from yak.group.classic import ClassicGroups
from yak.group.consumer_group import CGroup, ConsumerGroups, HeartbeatResult, TopicResolver
from yak.group.state import Group, GroupState

__all__ = ["GroupMetadataManager"]


class GroupMetadataManager:
    def __init__(
        self,
        runtime: CoordinatorRuntime[Any],
        groups: MutableMapping[str, Group],
        consumer_groups: MutableMapping[str, CGroup],
        config: GroupConfig,
        clock: Clock,
        timers: TimerQueue,
        partition_for: Callable[[str], int],
        spawn: Callable[[Any], None],
        topic_resolver: TopicResolver | None = None,
        topic_lister: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self.clock = clock
        self.timers = timers
        # Every group this broker coordinates, classic or consumer (a consumer group has
        # its `Group` too, which holds its committed offsets), in its shard.
        self.groups = groups
        self.consumer = ConsumerGroups(
            timers,
            clock,
            topic_resolver or (lambda _topic: None),
            config.consumer_session_timeout_ms,
            config.consumer_heartbeat_interval_ms,
            topic_lister,
            consumer_groups,
        )
        self.classic = ClassicGroups(
            self.groups, self.consumer, runtime, config, clock, timers, partition_for, spawn
        )
        # The classic protocol's requests are its state machine's own.
        self.join_group = self.classic.join_group
        self.sync_group = self.classic.sync_group
        self.heartbeat = self.classic.heartbeat
        self.leave_group = self.classic.leave_group
        self.schedule_session_timeout = self.classic.schedule_session_timeout

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

    # ================================================================ removal, loading, unloading

    def kill(self, group: Group) -> None:
        """`group` is gone (DeleteGroups, or expiry left it with nothing): Dead."""
        self.consumer.groups.pop(group.group_id, None)
        group.transition(GroupState.DEAD, self.clock.now_ms())
        self.timers.cancel(("join", group.group_id))
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]


    @staticmethod
    def tombstone(group: Group) -> Record:
        """The record that deletes `group`'s metadata (after its offsets' tombstones)."""
        return rec.encode_group_key(group.group_id), None

    def replay_group(self, into: dict[str, Group], group_id: str, gv: rec.GroupValue,
                     now: int) -> None:
        """A classic group read back from `__consumer_offsets` (its last record), into
        its loading shard's map."""
        self.classic.replay_group(into, group_id, gv, now)

    def unload_groups(self, groups: Iterable[Group], consumer_groups: Iterable[CGroup]) -> None:
        """This broker no longer coordinates these groups (their shard is unloaded): their
        waiting members get NOT_COORDINATOR and their timers are cancelled, so none fires
        on a group of the same id loaded here again later."""
        for group in groups:
            self.classic.release_waiters(group, cancel_sessions=True)
            self.timers.cancel(("join", group.group_id))
            for mid in list(group.pending_members):
                self.timers.cancel(("pending", group.group_id, mid))
        for cg in consumer_groups:
            self.consumer.cancel_timers(cg)

    def release_all(self, groups: Iterable[Group]) -> None:
        """Shutdown: every member waiting in JoinGroup/SyncGroup gets NOT_COORDINATOR."""
        for group in groups:
            self.classic.release_waiters(group, cancel_sessions=False)
