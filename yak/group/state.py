"""A classic consumer group's data and the legal moves of its state machine.

The states and their allowed predecessors are Kafka's (`GroupMetadata.scala`):
writing them down as a table means an impossible transition (say Stable straight
to Empty, skipping the join barrier) fails loudly in tests instead of leaving a
group half-rebalanced in production.

    Empty --join--> PreparingRebalance --barrier--> CompletingRebalance --leader sync--> Stable
      ^                   |  ^                              |                            |
      +-- all left -------+  +------ member joins/leaves/expires -----------------------+
    any --DeleteGroups / offsets expired--> Dead
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any

from yak.errors import ErrorCode, KafkaError
from yak.group import records as rec

__all__ = [
    "GroupState",
    "Member",
    "Group",
    "CommittedOffset",
    "IllegalStateTransition",
    "group_value",
    "group_from_value",
]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(KafkaError):
    """A coordinator bug, surfaced as UNKNOWN_SERVER_ERROR rather than silently ignored."""


@dataclass(slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # A member that answered MEMBER_ID_REQUIRED is not pending; one that joined this
    # rebalance but was never part of a generation is "new" (it may be expired sooner).
    is_new: bool = True
    join_future: asyncio.Future[Any] | None = None
    sync_future: asyncio.Future[Any] | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass(slots=True, eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # TxnOffsetCommit: offsets written in an open transaction, per producer id, invisible
    # to OffsetFetch until the transaction's COMMIT marker reaches the group's partition.
    pending_txn_offsets: dict[int, dict[tuple[str, int], CommittedOffset]] = field(
        default_factory=dict)
    state_timestamp_ms: int = -1
    # The initial-rebalance delay of an Empty group is pending: joins extend it.
    initial_join_pending: bool = False
    new_member_joined: bool = False
    join_deadline_ms: int = -1

    def transition(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalStateTransition(
                f"group {self.group_id!r}: {self.state.value} -> {target.value} is not allowed"
            )
        self.state = target
        self.state_timestamp_ms = now_ms

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    # ------------------------------------------------------------ membership

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if (
            member.group_instance_id is not None
            and self.static_members.get(member.group_instance_id) == member_id
        ):
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def member_error(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """Who may act as `member_id` (with `instance_id`, when static): None, or the
        error that refuses it (an unknown member, or a fenced static incarnation)."""
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            if known != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return None

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's rule: an empty group takes anything non-empty; otherwise the type must
        match and the member must share at least one protocol with every member."""
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        return bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those all support."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        order: list[str] = []
        for m in self.members.values():
            for name, _ in m.protocols:
                if name in candidates:
                    if name not in votes:
                        votes[name] = 0
                        order.append(name)
                    votes[name] += 1
                    break
        if not order:
            raise IllegalStateTransition(f"group {self.group_id!r} has no common protocol")
        return max(order, key=lambda n: votes[n])


def group_from_value(group_id: str, gv: rec.GroupValue, now: int) -> Group:
    """A classic group as its last GroupMetadataValue left it: Stable with its members
    (Empty without), the leader kept if it is still a member."""
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
    return group


def group_value(group: Group) -> rec.GroupValue:
    """What a GroupMetadataValue records of `group`: its generation and its members with
    their subscriptions and assignments."""
    return rec.GroupValue(
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
