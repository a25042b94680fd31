"""Share group membership (KIP-932's ShareGroupHeartbeat) and the simple assignor.

A share group has no rebalance protocol: a partition may be given to many members at
once (records, not partitions, are what members hold, under acquisition locks), so a
member never has to give anything back before another gets it. The group epoch goes up
whenever membership or subscriptions change; each member's epoch catches up with it at
that member's next heartbeat, which then carries the assignment (as does every heartbeat
that names the subscription; null otherwise, as Kafka answers). A heartbeat with another epoch than the member's is fenced
(FENCED_MEMBER_EPOCH); an unknown member gets UNKNOWN_MEMBER_ID.

The assignor gives every member every partition of the topics it subscribes to, which
is what Kafka's SimpleAssignor does while a group has no more members than partitions
per topic can usefully serve; the spreading of large groups is left (docs/share-groups.md).

Members live in memory only: a restart forgets them, and clients rejoin with epoch 0.

Only the group's coordinator (the leader of its `__consumer_offsets` partition, where
FindCoordinator sends the members) keeps a group: a heartbeat elsewhere is
NOT_COORDINATOR, and a broker that stops coordinating a group forgets it without
removing its members (`forget_elsewhere`), since they live on at the new coordinator.
Before, a broker that had been the coordinator once (then paused past its session, so the
members joined the group again elsewhere) kept the group: it refused those members'
share sessions (UNKNOWN_MEMBER_ID) once the members it knew had gone silent there, and
closing their share sessions at that moment released what they held.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from yak.clock import Clock
from yak.errors import ErrorCode

__all__ = ["HeartbeatResult", "ShareGroups", "ShareMember"]

# topic name -> (topic id, partition count), None for a topic that does not exist
TopicLookup = Callable[[str], "tuple[uuid.UUID, int] | None"]


OFFSETS_TOPIC = "__consumer_offsets"


def coordinator_partition(group_id: str, num_partitions: int) -> int:
    """The group's `__consumer_offsets` partition: Kafka's
    `Utils.abs(groupId.hashCode()) % partitions` (yak/group/records.py's `partition_for`,
    which this layer may not import)."""
    h = 0
    data = group_id.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def coordinated_elsewhere(group_id: str, node_id: int, topics: TopicLookup,
                          leader_of: Callable[[str, int], int] | None) -> bool:
    """Does another broker lead the group's `__consumer_offsets` partition (its
    coordinator) now? False while that is not known: no such topic yet, no leader, or no
    leadership lookup (unit tests)."""
    found = topics(OFFSETS_TOPIC)
    if leader_of is None or found is None or found[1] <= 0:
        return False
    leader = leader_of(OFFSETS_TOPIC, coordinator_partition(group_id, found[1]))
    return leader >= 0 and leader != node_id


@dataclass
class ShareMember:
    member_id: str
    epoch: int
    subscribed: tuple[str, ...]
    rack_id: str | None
    client_id: str
    client_host: str
    last_seen_ms: int
    assignment: dict[uuid.UUID, tuple[int, ...]] = field(default_factory=dict)


@dataclass
class ShareGroup:
    group_id: str
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: dict[uuid.UUID, tuple[int, ...]] | None = None
    error_message: str | None = None


class ShareGroups:
    """Every share group this broker coordinates, in memory."""

    def __init__(
        self,
        clock: Clock,
        topics: TopicLookup,
        *,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 5_000,
        max_size: int = 200,
        on_member_removed: Callable[[str, str, bool], None] | None = None,
        configs: Callable[[str], Mapping[str, str]] | None = None,
        elsewhere: Callable[[str], bool] | None = None,
    ) -> None:
        self.clock = clock
        self.topics = topics
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # a group's own configs: its `share.session.timeout.ms` and
        # `share.heartbeat.interval.ms` win over the broker's (issue 24)
        self.configs = configs or (lambda _group_id: {})
        self.max_size = max_size
        self.on_member_removed = on_member_removed
        # is the group coordinated by another broker now? (None: always here, one broker)
        self.elsewhere = elsewhere or (lambda _group_id: False)
        self.groups: dict[str, ShareGroup] = {}

    def get(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def is_member(self, group_id: str, member_id: str) -> bool:
        g = self.groups.get(group_id)
        return g is not None and member_id in g.members

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        subscribed: Iterable[str] | None,
        rack_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
    ) -> HeartbeatResult:
        now = self.clock.now_ms()
        if not group_id:
            return HeartbeatResult(ErrorCode.invalid_request, error_message="group id empty")
        if self.elsewhere(group_id):
            self.groups.pop(group_id, None)  # its members live on at the coordinator
            return HeartbeatResult(ErrorCode.not_coordinator, member_id,
                                   error_message="another broker coordinates this group")
        g = self.groups.get(group_id)
        if g is not None:  # this group's silent members go first (the rest: the sweep)
            session_ms = self._group_ms(group_id, "share.session.timeout.ms",
                                        self.session_timeout_ms)
            for m in [m for m in g.members.values() if now - m.last_seen_ms > session_ms]:
                self._remove(g, m.member_id, expired=True)
        if member_epoch == -1:  # leave
            if g is not None and member_id in g.members:
                self._remove(g, member_id, expired=False)
            return HeartbeatResult(ErrorCode.none, member_id, -1)
        if member_epoch == 0:  # join
            if not member_id:
                member_id = str(uuid.uuid4())  # KIP-1082 clients bring their own
            if g is None:
                g = self.groups[group_id] = ShareGroup(group_id)
            m = g.members.get(member_id)
            if m is None:
                if len(g.members) >= self.max_size:
                    return HeartbeatResult(ErrorCode.group_max_size_reached, member_id)
                if not subscribed:
                    return HeartbeatResult(ErrorCode.invalid_request, member_id,
                                           error_message="a joining member must subscribe")
                m = ShareMember(member_id, 0, tuple(sorted(set(subscribed))), rack_id,
                                client_id, client_host, now)
                g.members[member_id] = m
                g.epoch += 1
            m.epoch = 0
        else:
            m = g.members.get(member_id) if g is not None else None
            if g is None or m is None:
                return HeartbeatResult(ErrorCode.unknown_member_id, member_id)
            if member_epoch != m.epoch:
                return HeartbeatResult(ErrorCode.fenced_member_epoch, member_id)
        m.last_seen_ms = now
        if subscribed is not None:
            subs = tuple(sorted(set(subscribed)))
            if subs != m.subscribed:
                m.subscribed = subs
                g.epoch += 1
        target = self._target(m)
        # Kafka sends the assignment when the member's epoch or assignment moves, and to
        # every full request (one naming the subscription); null otherwise.
        send = None
        if m.epoch != g.epoch or target != m.assignment or subscribed is not None:
            m.assignment = target
            m.epoch = g.epoch
            send = target
        interval_ms = self._group_ms(group_id, "share.heartbeat.interval.ms",
                                     self.heartbeat_interval_ms)
        return HeartbeatResult(ErrorCode.none, member_id, m.epoch, interval_ms, send)

    def _group_ms(self, group_id: str, key: str, default: int) -> int:
        """The group's own `key` (checked within the broker's bounds when it was set),
        else the broker's."""
        value = self.configs(group_id).get(key)
        return default if value is None else int(value)

    def _target(self, m: ShareMember) -> dict[uuid.UUID, tuple[int, ...]]:
        out: dict[uuid.UUID, tuple[int, ...]] = {}
        for name in m.subscribed:
            found = self.topics(name)
            if found is not None:
                out[found[0]] = tuple(range(found[1]))
        return out

    def forget_elsewhere(self) -> list[str]:
        """Forget the groups another broker coordinates now, with no member removed (no
        `on_member_removed`): the members heartbeat the new coordinator, and their share
        sessions and acquisitions here stay theirs."""
        gone = [gid for gid in self.groups if self.elsewhere(gid)]
        for gid in gone:
            del self.groups[gid]
        return gone

    def expire_members(self, now_ms: int | None = None) -> list[tuple[str, str]]:
        """Remove members silent for longer than the session timeout."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        gone = []
        for g in self.groups.values():
            session_ms = self._group_ms(g.group_id, "share.session.timeout.ms",
                                        self.session_timeout_ms)
            gone += [(g, m.member_id) for m in g.members.values()
                     if now - m.last_seen_ms > session_ms]
        for g, member_id in gone:
            self._remove(g, member_id, expired=True)
        return [(g.group_id, member_id) for g, member_id in gone]

    def _remove(self, g: ShareGroup, member_id: str, *, expired: bool) -> None:
        """`expired`: silent past the session timeout (else it left with epoch -1)."""
        del g.members[member_id]
        g.epoch += 1
        if self.on_member_removed is not None:
            self.on_member_removed(g.group_id, member_id, expired)
