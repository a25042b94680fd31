"""KIP-848 consumer groups (`group.protocol=consumer`): the broker assigns partitions.

Members only send ConsumerGroupHeartbeat; there is no join barrier. The coordinator
keeps, per group, a group epoch (bumped when membership or subscriptions change), a
target assignment computed for that epoch by a server-side assignor, and per member
its current assignment and member epoch. Each heartbeat moves the member one step
towards its target, Kafka's reconciliation rule:

1. partitions in its current assignment but not in the target are revoked first
   (the member keeps its epoch until it reports, in a later heartbeat, that it no
   longer owns them);
2. then it receives target partitions that no other member still owns or is
   revoking, so a partition is never consumed by two members at once;
3. once it has nothing left to revoke it moves to the target epoch (partitions still
   being released by others follow on later heartbeats).

Static members (KIP-848 flavour): epoch -2 means "restarting"; the member keeps its
partitions until it rejoins with the same instance id (taking over its epoch and
assignment, so nobody else rebalances) or its session times out. Joining with an
instance id still held by a live member gets UNRELEASED_INSTANCE_ID.

Simplifications (documented): membership is not persisted (after a broker restart a
member gets UNKNOWN_MEMBER_ID and rejoins with epoch 0; committed offsets are kept),
regex subscriptions are matched with Python's `re` (full match; Kafka uses RE2/J) against
the topic list on every heartbeat, and the assignor is "uniform" (sticky:
partitions stay with their owner while it is still subscribed and not over quota).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field

from yak.errors import ErrorCode

__all__ = ["ConsumerGroups", "HeartbeatResult", "TopicResolver", "Assignment"]

Assignment = dict[uuid.UUID, set[int]]
TopicResolver = Callable[[str], tuple[uuid.UUID, int] | None]
"""topic name -> (topic id, partition count), None if the topic does not exist."""

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@dataclass(slots=True)
class HeartbeatResult:
    error: ErrorCode
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None
    error_message: str | None = None


@dataclass(slots=True, eq=False)
class CGMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed: list[str]  # effective: the names plus the regex's current matches
    epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)
    left_static: bool = False  # sent epoch -2: restarting, partitions kept for it
    names: list[str] = field(default_factory=list)
    regex: re.Pattern[str] | None = None


@dataclass(slots=True, eq=False)
class CGroup:
    group_id: str
    epoch: int = 0
    target_epoch: int = 0
    members: dict[str, CGMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)

    def state(self) -> str:
        """Kafka's states of a consumer group (as ListGroups reports them)."""
        if not self.members:
            return "Empty"
        if self.target_epoch < self.epoch:
            return "Assigning"
        if any(m.epoch != self.target_epoch or m.revoking for m in self.members.values()):
            return "Reconciling"
        return "Stable"


def _copy(a: Assignment) -> Assignment:
    return {t: set(ps) for t, ps in a.items() if ps}


def _minus(a: Assignment, b: Assignment) -> Assignment:
    return {t: ps - b.get(t, set()) for t, ps in a.items() if ps - b.get(t, set())}


def _union(a: Assignment, b: Assignment) -> Assignment:
    out = _copy(a)
    for t, ps in b.items():
        out.setdefault(t, set()).update(ps)
    return out


def uniform_assign(members: dict[str, CGMember], resolve: TopicResolver) -> dict[str, Assignment]:
    """Spread each topic's partitions over its subscribers, keeping current owners.

    Per topic: quota = ceil(partitions / subscribers); an owner keeps its partitions up
    to its quota, the rest go to the least-loaded subscribers. Deterministic (members
    sorted by id) so two computations of one epoch agree.
    """
    target: dict[str, Assignment] = {mid: {} for mid in members}
    topics = sorted({t for m in members.values() for t in m.subscribed})
    load = dict.fromkeys(members, 0)
    for topic in topics:
        info = resolve(topic)
        if info is None:
            continue
        topic_id, count = info
        subs = sorted(mid for mid, m in members.items() if topic in m.subscribed)
        quota = -(-count // len(subs))
        free: list[int] = []
        taken: dict[str, int] = dict.fromkeys(subs, 0)
        for p in range(count):
            owner = next(
                (
                    mid
                    for mid in subs
                    if p in members[mid].assigned.get(topic_id, ())
                    or p in members[mid].revoking.get(topic_id, ())
                ),
                None,
            )
            if owner is not None and taken[owner] < quota:
                target[owner].setdefault(topic_id, set()).add(p)
                taken[owner] += 1
                load[owner] += 1
            else:
                free.append(p)
        for p in free:
            mid = min(subs, key=lambda m: (taken[m], load[m], m))
            target[mid].setdefault(topic_id, set()).add(p)
            taken[mid] += 1
            load[mid] += 1
    return target


class ConsumerGroups:
    """The KIP-848 side of the coordinator; timers and clock are the coordinator's."""

    def __init__(
        self,
        timers: object,
        clock: object,
        resolve: TopicResolver,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 5_000,
        list_topics: Callable[[], Iterable[str]] | None = None,
        groups: MutableMapping[str, CGroup] | None = None,
    ) -> None:
        self.timers = timers
        self.clock = clock
        self.resolve = resolve
        self.list_topics = list_topics or (lambda: ())
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # A group's own configs (the GROUP resource's `consumer.session.timeout.ms` and
        # `consumer.heartbeat.interval.ms`, issue 24), read at every heartbeat as Kafka
        # does; the composition hands in the cluster-wide store's lookup.
        self.group_configs: Callable[[str], Mapping[str, str]] = lambda _group_id: {}
        # the shards' groups (`shard.ShardedGroups`); a plain dict when used alone
        self.groups: MutableMapping[str, CGroup] = {} if groups is None else groups

    def has_members(self, group_id: str) -> bool:
        g = self.groups.get(group_id)
        return g is not None and bool(g.members)

    def member_epoch(self, group_id: str, member_id: str) -> int | None:
        g = self.groups.get(group_id)
        m = g.members.get(member_id) if g is not None else None
        return None if m is None else m.epoch

    # ------------------------------------------------------------ heartbeat

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed: list[str] | None,
        owned: Assignment | None,
        client_id: str,
        client_host: str,
        regex: str | None = None,
    ) -> HeartbeatResult:
        """`subscribed`/`regex` None mean "unchanged" (KIP-848); an empty regex clears it."""
        pattern: re.Pattern[str] | None = None
        if regex:
            try:
                pattern = re.compile(regex)
            except re.error as e:
                return HeartbeatResult(
                    ErrorCode.invalid_regular_expression,
                    member_id,
                    member_epoch,
                    error_message=f"Invalid regular expression {regex!r}: {e}",
                )
        g = self.groups.setdefault(group_id, CGroup(group_id))
        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            m = g.members.get(member_id)
            if m is None:
                return HeartbeatResult(ErrorCode.unknown_member_id, member_id, member_epoch)
            if member_epoch == STATIC_LEAVE_EPOCH and m.instance_id is not None:
                # A static member restarting: it keeps its partitions (nobody else gets
                # them) until it comes back or its session times out.
                m.left_static = True
            else:
                self._remove(g, m)
            return HeartbeatResult(ErrorCode.none, member_id, member_epoch)
        m = g.members.get(member_id) if member_id else None
        if member_epoch == 0:
            if not subscribed and pattern is None:
                return HeartbeatResult(
                    ErrorCode.invalid_request,
                    error_message="SubscribedTopicNames or SubscribedTopicRegex must be set"
                    " when joining",
                )
            static = None
            if instance_id is not None:
                static = next((o for o in g.members.values() if o.instance_id == instance_id), None)
                if static is not None and not static.left_static and static.member_id != member_id:
                    return HeartbeatResult(
                        ErrorCode.unreleased_instance_id,
                        member_id,
                        member_epoch,
                        error_message=f"Static member {instance_id} is still in use.",
                    )
            if static is not None:
                m = self._take_over(
                    g,
                    static,
                    member_id or str(uuid.uuid4()),
                    client_id,
                    client_host,
                    rebalance_timeout_ms,
                    self._effective(subscribed or (), pattern),
                )
                m.names, m.regex = sorted(set(subscribed or ())), pattern
                return self._answer(g, m, owned, joined=True)
            if m is not None:  # a restarted client reusing its id: start it over
                self._remove(g, m)
            m = CGMember(
                member_id or str(uuid.uuid4()),
                instance_id,
                rack_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                self._effective(subscribed or (), pattern),
                names=sorted(set(subscribed or ())),
                regex=pattern,
            )
            g.members[m.member_id] = m
            g.epoch += 1
        else:
            if m is None:
                return HeartbeatResult(ErrorCode.unknown_member_id, member_id, member_epoch)
            if member_epoch != m.epoch:
                return HeartbeatResult(ErrorCode.fenced_member_epoch, member_id, member_epoch)
            if subscribed is not None:
                m.names = sorted(set(subscribed))
            if regex is not None:
                m.regex = pattern
            # Also catches topics created (or deleted) since the last heartbeat that
            # match the member's regex, as Kafka's periodic regex refresh does.
            self._refresh_subscription(g, m)
        return self._answer(g, m, owned, joined=member_epoch == 0)

    def _effective(self, names: Iterable[str], regex: re.Pattern[str] | None) -> list[str]:
        """Subscribed names plus the existing topics the regex matches (internal topics,
        `__*`, never match, as in Kafka)."""
        effective = set(names)
        if regex is not None:
            effective |= {
                t for t in self.list_topics() if not t.startswith("__") and regex.fullmatch(t)
            }
        return sorted(effective)

    def _refresh_subscription(self, g: CGroup, m: CGMember) -> None:
        new = self._effective(m.names, m.regex)
        if new != m.subscribed:
            m.subscribed = new
            g.epoch += 1

    def _answer(
        self, g: CGroup, m: CGMember, owned: Assignment | None, joined: bool
    ) -> HeartbeatResult:
        self._touch(g, m)
        if g.target_epoch < g.epoch:
            g.target = uniform_assign(g.members, self.resolve)
            g.target_epoch = g.epoch
        changed = self._reconcile(g, m, owned)
        return HeartbeatResult(
            ErrorCode.none,
            m.member_id,
            m.epoch,
            self._group_ms(g.group_id, "consumer.heartbeat.interval.ms",
                           self.heartbeat_interval_ms),
            _copy(m.assigned) if changed or joined else None,
        )

    def _take_over(
        self,
        g: CGroup,
        old: CGMember,
        member_id: str,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        subscribed: list[str],
    ) -> CGMember:
        """KIP-848 static membership: the new incarnation inherits the old one's epoch
        and partitions, so the rest of the group sees no rebalance."""
        self.timers.cancel(("cg", g.group_id, old.member_id))  # type: ignore[attr-defined]
        del g.members[old.member_id]
        m = CGMember(
            member_id,
            old.instance_id,
            old.rack_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            subscribed,
            epoch=old.epoch,
            assigned=old.assigned,
            revoking=old.revoking,
        )
        g.members[member_id] = m
        if old.member_id in g.target:
            g.target[member_id] = g.target.pop(old.member_id)
        if subscribed != old.subscribed:
            g.epoch += 1
        return m

    def _reconcile(self, g: CGroup, m: CGMember, owned: Assignment | None) -> bool:
        """One step of Kafka's CurrentAssignmentBuilder; True if the assignment changed."""
        if m.revoking:
            still = {t: ps & owned.get(t, set()) for t, ps in m.revoking.items()} if owned else {}
            if owned is None or any(still.values()):
                return False  # wait for the member to confirm the revocation
            m.revoking = {}
        desired = g.target.get(m.member_id, {})
        to_revoke = _minus(m.assigned, desired)
        if to_revoke:
            m.assigned = _minus(m.assigned, to_revoke)
            m.revoking = to_revoke
            return True
        held_by_others: Assignment = {}
        for other in g.members.values():
            if other is not m:
                held_by_others = _union(held_by_others, _union(other.assigned, other.revoking))
        addable = _minus(_minus(desired, m.assigned), held_by_others)
        before = _copy(m.assigned)
        if addable:
            m.assigned = _union(m.assigned, addable)
        # Nothing left to revoke: the member is at the target epoch, even if some target
        # partitions are still being released by others (Kafka's UNRELEASED_PARTITIONS);
        # it receives those on a later heartbeat.
        epoch_moved = m.epoch != g.target_epoch
        m.epoch = g.target_epoch
        return m.assigned != before or epoch_moved

    # ------------------------------------------------------------ expiry

    def _touch(self, g: CGroup, m: CGMember) -> None:
        gid, mid = g.group_id, m.member_id
        self.timers.schedule(  # type: ignore[attr-defined]
            ("cg", gid, mid),
            self.clock.now_ms()  # type: ignore[attr-defined]
            + self._group_ms(gid, "consumer.session.timeout.ms", self.session_timeout_ms),
            lambda: self._expire(gid, mid),
        )

    def _group_ms(self, group_id: str, key: str, default: int) -> int:
        """The group's own `key` if it sets one (checked within the broker's bounds when
        it was set), else the broker's."""
        value = self.group_configs(group_id).get(key)
        return default if value is None else int(value)

    def cancel_timers(self, g: CGroup) -> None:
        """`g`'s shard is unloaded: its members' session timers go with it."""
        for mid in g.members:
            self.timers.cancel(("cg", g.group_id, mid))  # type: ignore[attr-defined]

    def _expire(self, group_id: str, member_id: str) -> None:
        g = self.groups.get(group_id)
        m = g.members.get(member_id) if g is not None else None
        if g is not None and m is not None:
            self._remove(g, m)

    def _remove(self, g: CGroup, m: CGMember) -> None:
        self.timers.cancel(("cg", g.group_id, m.member_id))  # type: ignore[attr-defined]
        del g.members[m.member_id]
        g.target.pop(m.member_id, None)
        g.epoch += 1
