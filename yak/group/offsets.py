"""The offsets manager: a group's committed offsets, and its transactional ones until the marker.

One job: OffsetCommit, TxnOffsetCommit (its offsets stay pending per producer until the
transaction's COMMIT/ABORT marker reaches the group's `__consumer_offsets` partition),
OffsetFetch, OffsetDelete, and the expiry of offsets (KIP-211) and of topics that are gone.
Kafka keeps the same cut (`OffsetMetadataManager` beside `GroupMetadataManager`): offsets
change on every commit and never rebalance anyone, membership rebalances and never writes an
offset, so each can be read without the other. What offsets need of membership goes through
the `GroupMetadataManager` it is given: the groups, the KIP-848 members, a commit as a sign of
life (`schedule_session_timeout`) and removing a group left with nothing (`kill`).

Callers (the `GroupCoordinator` facade) have already routed the group id to a partition this
broker owns; nothing here checks that again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from yak.coordinator import CoordinatorResult, CoordinatorRuntime, Record
from yak.coordinator.timer import Clock, TimerQueue
from yak.errors import ErrorCode
from yak.group import records as rec
from yak.group.api import (
    FetchedOffset,
    GroupConfig,
    OffsetToCommit,
    storage_error_code,
    txn_storage_error_code,
)
from yak.group.consumer_group import TopicResolver
from yak.group.consumer_protocol import subscribed_topics
from yak.group.state import CommittedOffset, Group, GroupState

if TYPE_CHECKING:
    from yak.group.membership import GroupMetadataManager

__all__ = ["OffsetMetadataManager"]

log = logging.getLogger(__name__)


class OffsetMetadataManager:
    def __init__(
        self,
        membership: GroupMetadataManager,
        runtime: CoordinatorRuntime[Any],
        config: GroupConfig,
        clock: Clock,
        timers: TimerQueue,
        partition_for: Callable[[str], int],
        spawn: Callable[[Any], None],
        topic_resolver: TopicResolver | None,
    ) -> None:
        self.membership = membership
        self.groups: dict[str, Group] = membership.groups
        self.consumer = membership.consumer
        self.runtime = runtime
        self.config = config
        self.clock = clock
        self.timers = timers
        self._partition_for = partition_for
        self._spawn = spawn
        self._topic_resolver = topic_resolver
        self._keys: dict[tuple[str, str, int], bytes] = {}

    def _txn_index(self, partition: int) -> dict[int, set[str]] | None:
        """The shard's producer id -> its groups with transactional offsets pending for
        it (a marker visits only those, not every group); None if not loaded here."""
        ctx = self.runtime.active(partition)
        return None if ctx is None else ctx.shard.txn_groups

    # ================================================================ loading

    @staticmethod
    def load_open_transactions(into: dict[str, Group], txn_groups: dict[int, set[str]],
                               open_txns: Mapping[int, Sequence[Record]], now: int) -> None:
        """TxnOffsetCommits whose transaction had no marker yet when the log was replayed
        (per producer id) stay pending, in the loading shard's groups: the transaction
        coordinator re-sends the marker, which completes them (`complete_txn_offsets`)."""
        for pid, records in open_txns.items():
            for key, value in records:
                try:
                    k = rec.decode_key(key)
                    if not isinstance(k, rec.OffsetKey) or value is None:
                        continue
                    ov = rec.decode_offset_value(value)
                except (ValueError, UnicodeDecodeError) as e:
                    log.warning("skipping unreadable __consumer_offsets record: %s", e)
                    continue
                group = into.get(k.group)
                if group is None:
                    group = into[k.group] = Group(k.group, state_timestamp_ms=now)
                group.pending_txn_offsets.setdefault(pid, {})[(k.topic, k.partition)] = (
                    CommittedOffset(ov.offset, ov.leader_epoch, ov.metadata, ov.commit_timestamp)
                )
                txn_groups.setdefault(pid, set()).add(k.group)

    def tombstones(self, group: Group) -> list[Record]:
        """Tombstones for every committed offset of `group` (DeleteGroups)."""
        gid = group.group_id
        return [(rec.encode_offset_key(gid, t, p), None) for (t, p) in group.offsets]

    # ================================================================ OffsetCommit

    def _offset_key(self, group_id: str, topic: str, partition: int) -> bytes:
        """Encoded OffsetCommitKey, cached: the same keys are committed over and over."""
        k = (group_id, topic, partition)
        key = self._keys.get(k)
        if key is None:
            if len(self._keys) > 100_000:
                self._keys.clear()
            key = self._keys[k] = rec.encode_offset_key(group_id, topic, partition)
        return key


    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Sequence[OffsetToCommit],
    ) -> list[ErrorCode]:
        """One error per offset, in order. Valid ones are written as one batch."""
        err = self._commit_error(group_id, generation_id, member_id, group_instance_id)
        if err is not None:
            return [err] * len(offsets)
        group = self.groups.get(group_id)
        if group is None:  # a "simple" consumer (or an admin) storing offsets only
            group = Group(group_id, state_timestamp_ms=self.clock.now_ms())
            self.groups[group_id] = group
        else:
            member = group.members.get(member_id)
            if member is not None:
                self.membership.schedule_session_timeout(group, member)  # a commit is a sign of life
        now = self.clock.now_ms()
        codes: list[ErrorCode] = []
        records: list[Record] = []
        accepted: list[tuple[tuple[str, int], CommittedOffset]] = []
        max_meta = self.config.offset_metadata_max_bytes
        for o in offsets:
            metadata = o.metadata or ""
            if len(metadata.encode()) > max_meta:
                codes.append(ErrorCode.offset_metadata_too_large)
                continue
            codes.append(ErrorCode.none)
            value = CommittedOffset(o.offset, o.leader_epoch, metadata, now)
            accepted.append(((o.topic, o.partition), value))
            records.append(
                (
                    self._offset_key(group_id, o.topic, o.partition),
                    rec.pack_offset_value(o.offset, o.leader_epoch, metadata, now),
                )
            )
        if records:
            def apply() -> list[ErrorCode]:
                if self.groups.get(group_id) is group:
                    pending = group.pending_txn_offsets
                    for tp, value in accepted:
                        group.offsets[tp] = value
                        if pending:  # a later plain commit wins over an earlier transaction's
                            for staged in pending.values():
                                staged.pop(tp, None)
                return codes

            try:
                return await self.runtime.schedule_write_operation(
                    "offset-commit", self._partition_for(group_id),
                    lambda _shard: CoordinatorResult(records, apply=apply))
            except Exception as e:  # noqa: BLE001 - mapped to a retriable coordinator error
                log.warning("offset commit for %r failed: %s", group_id, e)
                code = storage_error_code(e)
                return [code if c is ErrorCode.none else c for c in codes]
        return codes

    # ---------------------------------------------------------------- transactional

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
        """TxnOffsetCommit: the offsets are written as part of the producer's transaction
        and stay pending (invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT with
        require_stable) until its marker reaches the group's partition. KIP-447 fencing:
        a member id or generation that is not the group's current one is refused, so a
        zombie consumer-producer from an old generation cannot commit."""
        err = self._txn_commit_error(group_id, generation_id, member_id, group_instance_id)
        if err is not None:
            return [err] * len(offsets)
        group = self.groups.get(group_id)
        if group is None:
            group = Group(group_id, state_timestamp_ms=self.clock.now_ms())
            self.groups[group_id] = group
        now = self.clock.now_ms()
        codes: list[ErrorCode] = []
        records: list[Record] = []
        accepted: list[tuple[tuple[str, int], CommittedOffset]] = []
        max_meta = self.config.offset_metadata_max_bytes
        for o in offsets:
            metadata = o.metadata or ""
            if len(metadata.encode()) > max_meta:
                codes.append(ErrorCode.offset_metadata_too_large)
                continue
            codes.append(ErrorCode.none)
            accepted.append(((o.topic, o.partition),
                             CommittedOffset(o.offset, o.leader_epoch, metadata, now)))
            records.append((self._offset_key(group_id, o.topic, o.partition),
                            rec.pack_offset_value(o.offset, o.leader_epoch, metadata, now)))
        if records:
            def stage() -> None:
                # At the local append, before the wait for the ISR: the transaction's
                # marker may reach this partition during that wait (an abort on timeout,
                # or the producer giving up), and must find these offsets pending. Staged
                # only after the wait, they stayed pending for ever once the marker had
                # gone by: OffsetFetch with require_stable answered UNSTABLE_OFFSET_COMMIT
                # for good (a chaos run's exactly-once pipeline hung on it).
                if self.groups.get(group_id) is group:
                    staged = group.pending_txn_offsets.setdefault(producer_id, {})
                    for tp, value in accepted:
                        staged[tp] = value
                    index = self._txn_index(partition)
                    if index is not None:
                        index.setdefault(producer_id, set()).add(group_id)

            partition = self._partition_for(group_id)
            try:
                await self.runtime.schedule_write_operation(
                    "txn-offset-commit", partition,
                    lambda _shard: CoordinatorResult(
                        records, producer=(producer_id, producer_epoch), on_appended=stage))
            except Exception as e:  # noqa: BLE001 - mapped as for OffsetCommit
                log.warning("transactional offset commit for %r failed: %s", group_id, e)
                self._unstage_txn_offsets(group, producer_id, accepted)  # if stage() ran
                code = txn_storage_error_code(e)
                return [code if c is ErrorCode.none else c for c in codes]
        return codes

    def _unstage_txn_offsets(self, group: Group, producer_id: int,
                             accepted: Sequence[tuple[tuple[str, int], CommittedOffset]]) -> None:
        """A TxnOffsetCommit that failed after its local append (the ISR did not confirm
        it): its pending offsets go, as Kafka's failPendingTxnOffsetCommit, unless a marker
        has already settled them or a later commit of the same transaction replaced them.
        The client retries or aborts."""
        staged = group.pending_txn_offsets.get(producer_id)
        if staged is None:
            return
        for tp, value in accepted:
            if staged.get(tp) is value:
                del staged[tp]
        if not staged:
            del group.pending_txn_offsets[producer_id]

    def _txn_commit_error(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        """Kafka's doTxnCommitOffsets checks (and the KIP-848 member epoch for consumer
        groups): only a known member id and the current generation are checked, and only
        when given (a producer without group metadata sends -1 and an empty id)."""
        if self.consumer.has_members(group_id):
            if not member_id:
                return None if generation_id < 0 else ErrorCode.illegal_generation
            epoch = self.consumer.member_epoch(group_id, member_id)
            if epoch is None:
                return ErrorCode.unknown_member_id
            if generation_id >= 0 and generation_id != epoch:
                return ErrorCode.illegal_generation
            return None
        group = self.groups.get(group_id)
        if group is None:
            return None if generation_id < 0 else ErrorCode.illegal_generation
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is not None and known != member_id:
                return ErrorCode.fenced_instance_id
        if member_id and member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation_id >= 0 and generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        return None

    def complete_txn_offsets(
        self, producer_id: int, commit: bool, partitions: Iterable[int]
    ) -> int:
        """A COMMIT/ABORT marker of `producer_id` reached these `__consumer_offsets`
        partitions (Kafka's onTransactionCompleted): its pending offsets of the groups
        there become the committed ones, or are dropped. Returns how many were applied."""
        applied = 0
        for partition in set(partitions):
            index = self._txn_index(partition)
            waiting = None if index is None else index.pop(producer_id, None)
            if not waiting:
                continue
            for group_id in waiting:
                group = self.groups.get(group_id)
                staged = None if group is None else group.pending_txn_offsets.pop(producer_id, None)
                if staged is not None and commit:
                    group.offsets.update(staged)  # type: ignore[union-attr]
                    applied += len(staged)
        return applied

    def has_pending_txn_offsets(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and any(group.pending_txn_offsets.values())

    def _commit_error(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        if self.consumer.has_members(group_id):
            epoch = self.consumer.member_epoch(group_id, member_id)
            if epoch is None:
                return ErrorCode.unknown_member_id
            return None if generation_id == epoch else ErrorCode.stale_member_epoch
        group = self.groups.get(group_id)
        if group is None:
            return None if generation_id < 0 else ErrorCode.illegal_generation
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None  # not using group management (admin tools, assign())
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        err = group.member_error(member_id, instance_id)
        if err is not None:
            return err
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        return None

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, Sequence[int]]] | None,
        require_stable: bool = False,
    ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """Committed offsets (-1 where none); `partitions=None` means all of the group's.
        With `require_stable` (OffsetFetch v7+, KIP-447), a partition with a transactional
        commit still pending answers UNSTABLE_OFFSET_COMMIT (the consumer retries)."""
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        unstable: set[tuple[str, int]] = set()
        if require_stable and group is not None and group.pending_txn_offsets:
            for staged in group.pending_txn_offsets.values():
                unstable.update(staged)
        if partitions is None:
            out = [
                FetchedOffset(t, p, c.offset, c.leader_epoch, c.metadata)
                if (t, p) not in unstable
                else FetchedOffset(t, p, error=ErrorCode.unstable_offset_commit)
                for (t, p), c in sorted(offsets.items())
            ]
            out += [FetchedOffset(t, p, error=ErrorCode.unstable_offset_commit)
                    for t, p in sorted(unstable - offsets.keys())]
            return ErrorCode.none, out
        out = []
        for topic, parts in partitions:
            for p in parts:
                c = offsets.get((topic, p))
                if (topic, p) in unstable:
                    out.append(FetchedOffset(topic, p, error=ErrorCode.unstable_offset_commit))
                elif c is None:
                    out.append(FetchedOffset(topic, p))
                else:
                    out.append(FetchedOffset(topic, p, c.offset, c.leader_epoch, c.metadata))
        return ErrorCode.none, out

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, int]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """OffsetDelete: refused for topics an active consumer group is subscribed to."""
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.group_id_not_found, []
        subscribed: set[str] = set()
        cg = self.consumer.groups.get(group_id)
        if cg is not None:
            for cm in cg.members.values():
                subscribed |= set(cm.subscribed)
        if not group.is_(GroupState.EMPTY):
            if group.protocol_type != "consumer":
                return ErrorCode.non_empty_group, []
            for m in group.members.values():
                subscribed |= subscribed_topics(m.metadata_for(group.protocol_name))
        codes: list[ErrorCode] = []
        tombstones: list[Record] = []
        for topic, p in partitions:
            if topic in subscribed:
                codes.append(ErrorCode.group_subscribed_to_topic)
                continue
            codes.append(ErrorCode.none)
            if (topic, p) in group.offsets:
                tombstones.append((rec.encode_offset_key(group_id, topic, p), None))
        if tombstones:
            def apply() -> None:
                for (topic, p), code in zip(partitions, codes, strict=True):
                    if code is ErrorCode.none:
                        group.offsets.pop((topic, p), None)

            try:
                await self.runtime.schedule_write_operation(
                    "offset-delete", self._partition_for(group_id),
                    lambda _shard: CoordinatorResult(tombstones, apply=apply))
            except Exception as e:  # noqa: BLE001
                return storage_error_code(e), []
        return ErrorCode.none, codes

    # ---------------------------------------------------------------- expiry

    def schedule_expiration(self) -> None:
        self.timers.schedule(
            ("expire-offsets",),
            self.clock.now_ms() + self.config.offsets_retention_check_interval_ms,
            self._on_offset_expiration,
        )

    def _on_offset_expiration(self) -> None:
        self.schedule_expiration()
        self.expire_offsets()

    def expire_offsets(self) -> int:
        """KIP-211: a group's offsets expire `offsets.retention.minutes` after it became
        Empty; offsets of groups that never used group management expire one by one,
        counted from their commit. Offsets of topics that no longer exist are dropped in
        any state (Kafka drops them when the topic is deleted; Yak notices here, so a
        re-created topic is not read from a stale position after the next check).
        A group left with nothing is removed (Dead). Returns how many offsets went;
        the tombstones are written in the background."""
        now = self.clock.now_ms()
        retention = self.config.offsets_retention_ms
        expired_total = 0
        exists: dict[str, bool] = {}

        def topic_exists(topic: str) -> bool:
            if topic not in exists:
                exists[topic] = self._topic_resolver(topic) is not None
            return exists[topic]

        for group in list(self.groups.values()):
            expired: set[tuple[str, int]] = set()
            if self._topic_resolver is not None:
                expired = {tp for tp in group.offsets if not topic_exists(tp[0])}
            empty = group.is_(GroupState.EMPTY) and not self.consumer.has_members(group.group_id)
            if empty and group.protocol_type is not None:
                if group.state_timestamp_ms + retention <= now:
                    expired |= set(group.offsets)
            elif empty:
                expired |= {
                    tp
                    for tp, c in group.offsets.items()
                    if c.commit_timestamp_ms + retention <= now
                }
            tombstones: list[Record] = [
                (rec.encode_offset_key(group.group_id, t, p), None) for t, p in sorted(expired)
            ]
            for tp in expired:
                del group.offsets[tp]
            expired_total += len(expired)
            if (empty and not group.offsets and not group.pending_members
                    and not group.pending_txn_offsets):
                tombstones.append((rec.encode_group_key(group.group_id), None))
                self.membership.kill(group)
            if tombstones:
                self._spawn(self._append_quietly(self._partition_for(group.group_id), tombstones))
        return expired_total

    async def _append_quietly(self, partition: int, records: list[Record]) -> None:
        try:
            await self.runtime.schedule_write_operation(
                "expire-offsets", partition, lambda _shard: CoordinatorResult(records))
        except Exception as e:  # noqa: BLE001 - expiry is retried at the next check
            log.warning("writing offset tombstones failed: %s", e)

