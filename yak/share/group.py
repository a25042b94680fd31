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

Durable on the group coordinator's runtime (Kafka's GroupMetadataManager, issue 24): with
a `store` (the group coordinator, handed in by the composition), every change of a group
is noted (`_note`: which of Kafka's records of which member) and written as those records
(`group_records.py`) to the group's `__consumer_offsets` partition before the heartbeat
that made it is answered (`flush`; the records are built from memory when written, so a
failed write's notes are simply written again by the next one). The coordinator's replay
of the partition hands them back (`load_partition`: members, their epochs and
assignments, the group epoch; every session timer restarts, as in Kafka), and a partition
that moves away takes its groups with it (`unload_partition`, no member removed). So a
restart or a failover keeps the group epoch, and members go on with their epochs; a
member that rejoins (epoch 0) bumps the epoch past every one before. Without a store
(unit tests) membership is in memory only.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from yak.clock import Clock
from yak.errors import ErrorCode
from yak.share import group_records as gr

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


class MembershipStore(Protocol):
    """Where share groups are durable: the group coordinator (`yak.group`, which this
    layer may not import; the composition hands it in)."""

    async def share_group_error(self, group_id: str) -> ErrorCode | None:
        """None when this broker coordinates the group now (creating
        `__consumer_offsets` first if it does not exist); else NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS or the like."""
        ...

    async def write_share_records(self, group_id: str,
                                  records: Sequence[tuple[bytes, bytes | None]]) -> ErrorCode:
        """Append `records` to the group's partition, committed (acks=all) in submission
        order; appended before the first await."""
        ...

    def partition_for(self, group_id: str) -> int: ...


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
    previous_epoch: int = -1


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
        store: MembershipStore | None = None,
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
        self.store = store
        # group -> the records to write for it: (key version, member id or "")
        self.pending: dict[str, set[tuple[int, str]]] = {}

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
            self._forget(group_id)  # its members live on at the coordinator
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
                self._note(group_id, gr.MEMBER_METADATA, member_id)
                self._note(group_id, gr.GROUP_METADATA)
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
                self._note(group_id, gr.MEMBER_METADATA, member_id)
                self._note(group_id, gr.GROUP_METADATA)
        target = self._target(m)
        # Kafka sends the assignment when the member's epoch or assignment moves, and to
        # every full request (one naming the subscription); null otherwise.
        send = None
        if m.epoch != g.epoch or target != m.assignment or subscribed is not None:
            if m.epoch != g.epoch or target != m.assignment:
                self._note(group_id, gr.CURRENT_ASSIGNMENT, member_id)
                if m.epoch != g.epoch:
                    m.previous_epoch = m.epoch
            m.assignment = target
            m.epoch = g.epoch
            send = target
        interval_ms = self._group_ms(group_id, "share.heartbeat.interval.ms",
                                     self.heartbeat_interval_ms)
        return HeartbeatResult(ErrorCode.none, member_id, m.epoch, interval_ms, send)

    async def durable_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        subscribed: Iterable[str] | None,
        rack_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
    ) -> HeartbeatResult:
        """`heartbeat`, answered once what it changed is durable (with a store): the
        group must be coordinated here (its partition loaded), and the records of the
        change are written before the answer. A failed write answers its error (the
        client retries or finds the coordinator again) and leaves the notes for the
        next write; nothing else awaits between the change and its write's append."""
        if self.store is not None and group_id:
            code = await self.store.share_group_error(group_id)
            if code is not None:
                return HeartbeatResult(code, member_id or None,
                                       error_message="the group is not coordinated here now")
        res = self.heartbeat(group_id, member_id, member_epoch, subscribed, rack_id,
                             client_id, client_host)
        code = await self.flush(group_id)
        if code is not ErrorCode.none:
            return HeartbeatResult(code, res.member_id,
                                   error_message="the group's records were not written")
        return res

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
            self._forget(gid)
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
        for version in (gr.MEMBER_METADATA, gr.CURRENT_ASSIGNMENT):
            self._note(g.group_id, version, member_id)  # tombstones
        self._note(g.group_id, gr.GROUP_METADATA)
        if self.on_member_removed is not None:
            self.on_member_removed(g.group_id, member_id, expired)

    # ------------------------------------------------------------------ durability

    def _note(self, group_id: str, version: int, member_id: str = "") -> None:
        if self.store is not None:
            self.pending.setdefault(group_id, set()).add((version, member_id))

    def _forget(self, group_id: str) -> None:
        """Drop a group that another broker coordinates now: nothing of it is written
        from here any more (its notes go; writing them would tombstone live state)."""
        self.groups.pop(group_id, None)
        self.pending.pop(group_id, None)

    def take_records(self, group_id: str) -> list[tuple[bytes, bytes | None]]:
        """The records of the changes noted for the group, built from memory now (a
        member or group that is gone: its tombstone)."""
        notes = self.pending.pop(group_id, None)
        if not notes:
            return []
        g = self.groups.get(group_id)
        out: list[tuple[bytes, bytes | None]] = []
        for version, member_id in sorted(notes):
            key = gr.encode_key(version, group_id, member_id)
            m = g.members.get(member_id) if g is not None else None
            value: bytes | None = None
            if version == gr.GROUP_METADATA and g is not None:
                value = gr.encode_group_epoch(g.epoch)
            elif version == gr.MEMBER_METADATA and m is not None:
                value = gr.encode_member_metadata(gr.MemberMetadata(
                    m.rack_id, m.client_id, m.client_host, m.subscribed))
            elif version == gr.CURRENT_ASSIGNMENT and m is not None:
                value = gr.encode_current_assignment(gr.CurrentAssignment(
                    m.epoch, m.previous_epoch, gr.STABLE, dict(m.assignment)))
            out.append((key, value))
        return out

    async def flush(self, group_id: str) -> ErrorCode:
        """Write the group's noted changes (none: nothing to do). On failure the notes
        are kept for the next write, unless the group moved away meanwhile."""
        if self.store is None:
            return ErrorCode.none
        notes = set(self.pending.get(group_id, ()))
        records = self.take_records(group_id)
        if not records:
            return ErrorCode.none
        code = await self.store.write_share_records(group_id, records)
        if code is not ErrorCode.none and group_id in self.groups:
            self.pending.setdefault(group_id, set()).update(notes)
        return code

    def load_partition(self, partition: int,
                       records: Mapping[bytes, bytes]) -> list[str]:
        """The group coordinator replayed `partition` of `__consumer_offsets` (this
        broker coordinates its groups from now on): its share groups, from the last live
        record of each key. Every member's session starts now (Kafka restarts the
        session timers on load too). Returns the groups loaded."""
        now = self.clock.now_ms()
        epochs: dict[str, int] = {}
        metas: dict[tuple[str, str], gr.MemberMetadata] = {}
        assigned: dict[tuple[str, str], gr.CurrentAssignment] = {}
        for key, value in records.items():
            k = gr.decode_key(key)
            if k is None:
                continue
            if k.version == gr.GROUP_METADATA:
                epochs[k.group_id] = gr.decode_group_epoch(value)
            elif k.version == gr.MEMBER_METADATA:
                metas[(k.group_id, k.member_id)] = gr.decode_member_metadata(value)
            elif k.version == gr.CURRENT_ASSIGNMENT:
                assigned[(k.group_id, k.member_id)] = gr.decode_current_assignment(value)
        if self.store is not None:
            for gid in [gid for gid in self.groups
                        if self.store.partition_for(gid) == partition]:
                self._forget(gid)
        for gid, epoch in epochs.items():
            self.groups[gid] = ShareGroup(gid, epoch)
        for (gid, mid), meta in metas.items():
            g = self.groups.get(gid)
            if g is None:  # a member record without its group's: not Kafka's log
                continue
            a = assigned.get((gid, mid))
            m = ShareMember(mid, 0, meta.subscribed, meta.rack_id, meta.client_id,
                            meta.client_host, now)
            if a is not None:
                m.epoch, m.previous_epoch = a.member_epoch, a.previous_member_epoch
                m.assignment = dict(a.partitions)
            g.members[mid] = m
        return list(epochs)

    def unload_partition(self, partition: int) -> list[str]:
        """Another broker coordinates `partition` now: its groups go without a member
        removed (they live on there)."""
        if self.store is None:
            return []
        gone = [gid for gid in self.groups if self.store.partition_for(gid) == partition]
        for gid in gone:
            self._forget(gid)
        return gone

    async def delete_group(self, group_id: str) -> ErrorCode:
        """Tombstones for the group and its members' records (DeleteGroups of an empty
        share group), and the group is forgotten here once they are committed: Kafka's
        runtime applies a change only with the write of its records, so a failed write
        (answered with its error, as the runtime maps it: NOT_COORDINATOR,
        COORDINATOR_NOT_AVAILABLE) leaves the group here as it was, and the client's
        retry writes the tombstones again. Before, the group left memory before the
        write: a retry answered GROUP_ID_NOT_FOUND and wrote nothing, and a new
        coordinator's replay brought the group back. The notes still pending (a departed
        member whose tombstones' write failed) are written with them: dropped, that
        member's live records would join the group when its id is used again; on
        failure they stay pending. A group that changed while its tombstones were being
        committed (a member joined after them: its records follow them in the log) is
        kept, as the log's replay would have it."""
        g = self.groups.get(group_id)
        if self.store is None or g is None:
            self.groups.pop(group_id, None)
            return ErrorCode.none
        if g.members:  # joined while the delete deleted the group's share state
            return ErrorCode.non_empty_group
        owed = self.pending.pop(group_id, set())
        notes = owed | {(gr.GROUP_METADATA, "")}
        records: list[tuple[bytes, bytes | None]] = [
            (gr.encode_key(version, group_id, member_id), None)
            for version, member_id in sorted(notes)]
        epoch = g.epoch
        code = await self.store.write_share_records(group_id, records)
        if code is not ErrorCode.none:
            if self.groups.get(group_id) is g:  # not moved away meanwhile
                self.pending.setdefault(group_id, set()).update(owed)
            return code
        if self.groups.get(group_id) is g and g.epoch == epoch and not g.members:
            del self.groups[group_id]
        return ErrorCode.none
