"""The share-group facade the handlers call (Kafka's SharePartitionManager plus, for now,
the membership the share coordinator will own): share partitions keyed by (group, topic,
partition), the share sessions, the groups, and the group configs.

Policy lives here and in `partition.py`, `group.py`, `session.py`; the handlers only
translate the wire. A ShareFetch applies its piggy-backed acknowledgements before it
reads (synchronously, before any await, so a connection's acks take effect in order),
then acquires records from the partition leader's log: whole batches are returned, the
AcquiredRecords ranges say which offsets the member holds. With nothing acquired, or
fewer bytes to acquire than the request's `min_bytes` (then nothing is acquired until
they are there or `max_wait` passes, as Kafka's DelayedShareFetch), it waits in the fetch
purgatory for new data, for at most `max_wait` and never past the next lock expiry (an
expired lock makes records available again).

Share-partition state is durable when a persister is given (the composition's
`CoordinatorPersister`, the share coordinator on `__share_group_state`): a share partition
is read from it on first use (`_ensure_loaded`; never initialized: by
`share.auto.offset.reset`, and that start written before a record is handed out), and
its changes are written (`_flush`, one write per share partition at a time, each taking
every change noted so far) before a ShareFetch returns what it acquired and before an
acknowledgement is answered. Group configs are documents of the metadata store when a
`GroupConfigStore` is given (`group_configs.py`). Membership is durable on the group
coordinator when `group.py`'s store is set (its expiries written by the sweep); sessions
are in memory (docs/share-groups.md). Dead letters: `dead_letters.py`. Over 600 lines:
the facade is the one place the handlers reach; the pieces are its neighbours.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from yak.clock import Clock
from yak.errors import ErrorCode, KafkaError
from yak.partition.partition import FetchIsolation
from yak.partition.replica_manager import ReplicaManager
from yak.share.dead_letters import DeadLetters, LeaderOf, Send
from yak.share.group import ShareGroups, TopicLookup, coordinated_elsewhere
from yak.share.group_configs import (
    DLQ_TOPIC,
    GroupConfigStore,
    InvalidGroupConfig,
    check_group_config,
    reset_end,
)
from yak.share.load_failures import LoadFailures
from yak.share.log_read import acquired_records, read_batches
from yak.share.metrics import ShareMetrics
from yak.share.partition import AcquiredRange, InvalidRecordState, SharePartition
from yak.share.persister import CoordinatorPersister
from yak.share.records import ShareKey
from yak.share.session import ShareSessionCache

__all__ = ["InvalidGroupConfig", "ShareConfig", "ShareManager", "SharePartitionResult"]

DLQ_ACK_TIMEOUT_MS = 5000


@dataclass(frozen=True)
class ShareConfig:
    """The broker's `group.share.*` settings (yak/settings.py)."""

    record_lock_duration_ms: int = 30_000
    min_record_lock_duration_ms: int = 15_000
    max_record_lock_duration_ms: int = 60_000
    delivery_count_limit: int = 5
    min_delivery_count_limit: int = 2
    max_delivery_count_limit: int = 10
    partition_max_record_locks: int = 2000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    max_share_sessions: int = 2000


@dataclass
class SharePartitionResult:
    error: ErrorCode = ErrorCode.none
    ack_error: ErrorCode = ErrorCode.none
    records: list[Any] = field(default_factory=list)  # whole batches (views of the read)
    acquired: list[AcquiredRange] = field(default_factory=list)
    leader: tuple[int, int] = (-1, -1)


class ShareManager:
    def __init__(self, config: ShareConfig, clock: Clock, replicas: ReplicaManager,
                 topics: TopicLookup, node_id: int,
                 persister: CoordinatorPersister | None = None,
                 config_store: GroupConfigStore | None = None,
                 leader_of: LeaderOf | None = None, send: Send | None = None) -> None:
        self.config = config
        # dead-letter copies: appended here, or a Produce to the leader (`leader_of`, `send`)
        self.dead_letters = DeadLetters(replicas, topics, node_id, leader_of, send,
                                        DLQ_ACK_TIMEOUT_MS)
        self.topics = topics
        self.persister = persister
        self.config_store = config_store  # None: group configs in memory (unit tests)
        self._loading: dict[tuple[str, str, int], asyncio.Future[tuple[ErrorCode, str]]] = {}
        self._flush_locks: dict[tuple[str, str, int], asyncio.Lock] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._preparing: asyncio.Task[Any] | None = None
        self.clock = clock
        self.replicas = replicas
        self.node_id = node_id
        self.groups = ShareGroups(clock, topics, session_timeout_ms=config.session_timeout_ms,
                                  heartbeat_interval_ms=config.heartbeat_interval_ms,
                                  max_size=config.max_size, configs=self._cfg,
                                  on_member_removed=self._member_removed,
                                  elsewhere=lambda g: coordinated_elsewhere(
                                      g, node_id, topics, leader_of))
        self.sessions = ShareSessionCache(config.max_share_sessions)
        self.metrics = ShareMetrics()  # per-partition counters, load times (metrics.py)
        self.load_failures = LoadFailures()  # logged and counted (load_failures.py)
        self.partitions: dict[tuple[str, str, int], SharePartition] = {}
        self.group_configs: dict[str, dict[str, str]] = {}  # without a config store
        # (group, member) -> when it left while keeping its share session (see sweep)
        self._left: dict[tuple[str, str], int] = {}
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._expiry_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def _expiry_loop(self) -> None:
        """Members past their session timeout leave; expired locks are released even
        while nobody fetches (so a describe shows them available)."""
        while True:
            await asyncio.sleep(1.0)
            self.sweep()

    def sweep(self) -> None:
        """Silent members leave; expired locks are released; the share session a member
        kept after leaving (for its final acknowledgements) goes once a session timeout
        has passed without that final request, with what the member still holds."""
        self.groups.forget_elsewhere()  # the coordinator moved: not gone, not expired
        self.groups.expire_members()
        if self.config_store is not None:
            self._reconfigure()  # a group's configs changed through another broker
        for sp in self.partitions.values():
            sp.expire()
            if self.persister is None:
                sp.dead.clear()  # in memory: no dead-letter copies (they follow the writes)
        now = self.clock.now_ms()
        for key, left_ms in list(self._left.items()):
            if now - left_ms > self.config.session_timeout_ms:
                del self._left[key]
                if self.sessions.close(*key) is not None:
                    self._release(*key)
        if self.persister is not None:
            # archiving by expiry or release: written now, not at the next fetch
            for (g, t, _p), sp in self.partitions.items():
                if sp.has_changes():
                    self._spawn(self._flush(g, t, sp))
        for group_id in list(self.groups.pending):  # members expired: their tombstones
            self._spawn(self.groups.flush(group_id))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ group configs

    def check_group_config(self, key: str, value: str | None) -> None:
        """InvalidGroupConfig unless `key` is a share group config and `value` (None: a
        delete) is within the broker's bounds."""
        check_group_config(self.config, self.topics, key, value)

    def set_group_config(self, group_id: str, key: str, value: str | None) -> None:
        """Set (or with None delete) one share group config in memory (no config store:
        unit tests), within the broker's bounds; it applies to the group's share
        partitions at once."""
        self.check_group_config(key, value)
        cfgs = self.group_configs.setdefault(group_id, {})
        if value is None:
            cfgs.pop(key, None)
        else:
            cfgs[key] = value
        self._reconfigure(group_id)

    async def alter_group_configs(self, group_id: str,
                                  changes: list[tuple[str, str | None]]) -> None:
        """Set (None: delete) share group configs, every one checked first; durable and
        cluster-wide with a config store (the other brokers' share partitions take them
        at their next sweep), in memory without."""
        for key, value in changes:
            self.check_group_config(key, value)
        if self.config_store is None:
            for key, value in changes:
                self.set_group_config(group_id, key, value)
            return
        await self.config_store.apply(group_id, changes)
        self._reconfigure(group_id)

    def _cfg(self, group_id: str) -> dict[str, str]:
        if self.config_store is not None:
            return self.config_store.get(group_id)
        return self.group_configs.get(group_id, {})

    def _reconfigure(self, group_id: str | None = None) -> None:
        for (g, _t, _p), sp in self.partitions.items():
            if group_id is None or g == group_id:
                self._configure(sp, self._cfg(g))

    def group_config(self, group_id: str) -> dict[str, str]:
        return dict(self._cfg(group_id))

    def _share_partition(self, group_id: str, topic: str, partition: int) -> SharePartition:
        key = (group_id, topic, partition)
        sp = self.partitions.get(key)
        if sp is None:
            sp = self.partitions[key] = self._new_share_partition(group_id, topic, partition)
        return sp

    def _new_share_partition(self, group_id: str, topic: str, partition: int
                             ) -> SharePartition:
        sp = SharePartition(group_id, topic, partition, self.clock,
                            max_record_locks=self.config.partition_max_record_locks)
        sp.stats = self.metrics.stats(group_id, topic, partition)
        self._configure(sp, self._cfg(group_id))
        return sp

    def _configure(self, sp: SharePartition, cfg: dict[str, str]) -> None:
        c = self.config
        sp.lock_duration_ms = int(cfg.get("share.record.lock.duration.ms",
                                          c.record_lock_duration_ms))
        sp.delivery_count_limit = int(cfg.get("share.delivery.count.limit",
                                              c.delivery_count_limit))
        sp.redelivery_delay_ms = int(cfg.get("share.record.redelivery.delay.ms", 0))

    def lock_duration_ms(self, group_id: str) -> int:
        cfg = self._cfg(group_id)
        return int(cfg.get("share.record.lock.duration.ms", self.config.record_lock_duration_ms))

    # ------------------------------------------------------------------ membership

    def _member_removed(self, group_id: str, member_id: str, expired: bool) -> None:
        """A member that timed out loses its session and what it holds. One that left
        (heartbeat epoch -1) keeps its share session for its last acknowledgements: a
        closing client leaves the group first and then sends them (ShareAcknowledge with
        epoch -1, which releases the rest); without a session, what it holds goes back now.
        """
        if expired or self.sessions.get(group_id, member_id) is None:
            self.sessions.close_member(group_id, member_id)
            self._release(group_id, member_id)
        else:
            self._left[(group_id, member_id)] = self.clock.now_ms()

    def _release(self, group_id: str, member_id: str) -> None:
        for (g, _t, _p), sp in self.partitions.items():
            if g == group_id:
                sp.release_member(member_id)

    def prepare_state(self) -> None:
        """A member joins: create `__share_group_state` now if it does not exist yet (in
        the background), so the member's first fetch does not also wait for the topic's
        creation (Kafka creates it on first use too; this use is only a moment earlier)."""
        if self.persister is None or self.persister.coordinator.writer.exists() \
                or self._preparing is not None:
            return
        coordinator = self.persister.coordinator
        self._preparing = task = asyncio.get_running_loop().create_task(
            coordinator.ensure_ready(ShareKey("", uuid.UUID(int=0), 0)))
        self._background.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._background.discard(t)
            self._preparing = None
            if not t.cancelled():
                t.exception()  # seen; a failure is retried by the next join or first fetch

        task.add_done_callback(done)

    def list_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str]]:
        """(group id, state) of the share groups here: Stable with members, else Empty
        (ListGroups' state filter, case-insensitive, as Kafka's)."""
        want = {s.lower() for s in states}
        out = []
        for gid, g in self.groups.groups.items():
            state = "Stable" if g.members else "Empty"
            if not want or state.lower() in want:
                out.append((gid, state))
        return out

    async def reset_offsets(self, group_id: str,
                            starts: Sequence[tuple[str, uuid.UUID, int, int]],
                            ) -> list[ErrorCode]:
        """AlterShareGroupOffsets: each (topic, topic id, partition, start offset) gets a
        new state at that start, at the next state epoch; only while the group has no
        members (NON_EMPTY_GROUP), as in Kafka. This broker's windows of them go (read
        again on the next fetch); a leader elsewhere is fenced at its next write."""
        assert self.persister is not None
        g = self.groups.get(group_id)
        if g is not None and g.members:
            return [ErrorCode.non_empty_group] * len(starts)
        codes = []
        for topic, tid, partition, start in starts:
            codes.append(await self.persister.reset(ShareKey(group_id, tid, partition), start))
            self.partitions.pop((group_id, topic, partition), None)
        return codes

    def check_member(self, group_id: str, member_id: str) -> ErrorCode:
        """UNKNOWN_MEMBER_ID for a member of a group this broker coordinates but does not
        know (a group coordinated elsewhere is not checked here yet)."""
        if not member_id:
            return ErrorCode.invalid_request
        g = self.groups.get(group_id)
        if g is not None and member_id not in g.members and not self.groups.elsewhere(group_id):
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def session_closed(self, group_id: str, member_id: str) -> None:
        """A share session ended (epoch -1, or replaced by a new epoch 0): what the member
        still holds goes back to the group."""
        self._left.pop((group_id, member_id), None)
        self._release(group_id, member_id)

    # ------------------------------------------------------------------ acks and fetch

    def acknowledge(self, group_id: str, member_id: str, topic: str, partition: int,
                    batches: Iterable[tuple[int, int, Sequence[int]]]) -> ErrorCode:
        sp = self.partitions.get((group_id, topic, partition))
        if sp is None:
            p = self.replicas.get_partition(topic, partition)
            return (ErrorCode.unknown_topic_or_partition if p is None
                    else ErrorCode.invalid_record_state)
        code = ErrorCode.none
        for first, last, types in batches:
            try:
                sp.acknowledge(member_id, first, last, types)
            except InvalidRecordState:
                code = ErrorCode.invalid_record_state
        return code

    async def fetch(self, group_id: str, member_id: str,
                    wanted: Sequence[tuple[str, int]], *, max_records: int, max_bytes: int,
                    max_wait_ms: int, acked: Sequence[tuple[str, int]] = (),
                    ack_errors: dict[tuple[str, int], ErrorCode] | None = None,
                    record_limit: bool = False, regions: bool = False, min_bytes: int = 1,
                    ) -> list[SharePartitionResult]:
        """Acquire for `member_id`. `acked`: the partitions whose acknowledgements the
        caller just applied: made durable with the acquisitions (one write per share
        partition), or before waiting when nothing is acquired; `ack_errors` gets the
        ones whose write failed. `record_limit`: SharePartition.acquire's; `regions`: the
        records as `FileRegion`s (yak/share/log_read.py), for a sendfile connection.
        `min_bytes` (Kafka's DelayedShareFetch): while fewer bytes than that can be
        acquired (`_short_of`) and time remains, wait without acquiring, so nothing is
        held locked while the request waits; at `max_wait_ms` acquire what there is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        acks_pending = bool(acked) and self.persister is not None
        # the windows the acks went to (no await since): what they must be written from
        windows = {tp: sp for tp in acked
                   if (sp := self.partitions.get((group_id, tp[0], tp[1]))) is not None}
        if self.persister is not None:
            await self._ensure_loaded(group_id, wanted)
        while True:
            short = (min_bytes > 1 and bool(wanted) and deadline > loop.time()
                     and self._short_of(group_id, wanted, min(min_bytes, max_bytes)))
            results = [] if short else self._acquire(group_id, member_id, wanted,
                                                     max_records, max_bytes, record_limit,
                                                     regions)
            if any(r.acquired or r.error is not ErrorCode.none for r in results):
                if self.persister is not None:
                    failed = await self._make_durable(group_id, member_id, wanted, results,
                                                      acked if acks_pending else (), windows)
                    if ack_errors is not None:
                        ack_errors.update((tp, failed[tp]) for tp in acked if tp in failed)
                return results
            if acks_pending:  # durable before this request waits, not after
                acks_pending = False
                failed = await self.persist(group_id, acked, windows)
                if ack_errors is not None:
                    ack_errors.update(failed)
            remaining = deadline - loop.time()
            if remaining <= 0 and short:
                continue  # max_wait passed short of min_bytes: acquire what there is
            if remaining <= 0 or not wanted:
                return results
            nxt = [d for sp in (self.partitions.get((group_id, t, p)) for t, p in wanted)
                   if sp is not None and (d := sp.next_deadline_ms()) is not None]
            if nxt:
                remaining = min(remaining, max(0.0, (min(nxt) - self.clock.now_ms()) / 1000)
                                + 0.001)
            await self.replicas.fetch_purgatory.wait(wanted, remaining)

    def _short_of(self, group_id: str, wanted: Sequence[tuple[str, int]], need: int) -> bool:
        """Do the wanted share partitions have fewer than `need` bytes to acquire? Counted
        as Kafka's DelayedShareFetch counts them, from each one's next fetch offset to the
        high watermark (last stable offset for read_committed), by a header-only read of
        whole batches (`FileRegion`s, released at once) that stops at `need`: per batch,
        never per record, and nothing acquired. A read that stops short of its bound had a
        batch too big for what is still needed, or reached its segment's end (Kafka's
        "older segment" case): enough either way. A partition `_acquire` must answer now
        (not led here, not initialized yet, a read error) makes it False: acquire at once."""
        committed = self._cfg(group_id).get("share.isolation.level") == "read_committed"
        for topic, partition in wanted:
            p = self.replicas.get_partition(topic, partition)
            sp = self.partitions.get((group_id, topic, partition))
            if p is None or not p.is_leader or sp is None or not sp.initialized:
                return False
            if self.persister is not None and sp.leader_epoch != p.leader_epoch:
                continue  # not loaded at this epoch: `_acquire` skips it too
            sp.log_start_moved(p.log_start_offset)
            offset = sp.next_fetch_offset()
            bound = p.last_stable_offset if committed else p.high_watermark
            if offset >= bound:
                continue
            try:
                read = p.log.read(offset, need, bound, True, True)
            except KafkaError:
                return False
            for region in read.buffers:
                region.release()
            need -= read.size
            if need <= 0 or (read.size and read.next_offset < bound):
                return False
        return True

    # ------------------------------------------------------------------ durability

    async def _ensure_loaded(self, group_id: str, wanted: Sequence[tuple[str, int]]) -> None:
        """Read the state of every share partition of `wanted` led here that has none in
        memory (or one of an older leader epoch); concurrent fetches share one read."""
        for topic, partition in wanted:
            key = (group_id, topic, partition)
            p = self.replicas.get_partition(topic, partition)
            if p is None or not p.is_leader:
                continue  # _acquire answers
            sp = self.partitions.get(key)
            if sp is not None and sp.leader_epoch == p.leader_epoch:
                continue
            fut = self._loading.get(key)
            if fut is None:
                fut = asyncio.get_running_loop().create_task(
                    self._load(group_id, topic, partition, p.leader_epoch))
                self._loading[key] = fut
                fut.add_done_callback(lambda _f, k=key: self._loading.pop(k, None))
                fut.add_done_callback(lambda f, k=key: self.load_failures.done(k, f))
            await asyncio.shield(fut)

    async def _load(self, group_id: str, topic: str, partition: int,
                    leader_epoch: int) -> tuple[ErrorCode, str]:
        assert self.persister is not None
        started = self.metrics.now()
        found = self.topics(topic)
        if found is None:
            return ErrorCode.unknown_topic_or_partition, "topic unknown"
        key = ShareKey(group_id, found[0], partition)
        state = await self.persister.read(key, leader_epoch)
        if state.error is not ErrorCode.none:
            return state.error, f"ReadShareGroupState at leader epoch {leader_epoch}"
        p = self.replicas.get_partition(topic, partition)
        if p is None or not p.is_leader or p.leader_epoch != leader_epoch:
            return ErrorCode.not_leader_or_follower, f"leader epoch {leader_epoch} gone"
        sp = self._new_share_partition(group_id, topic, partition)
        sp.leader_epoch = leader_epoch
        if state.start_offset >= 0:
            sp.restore(state.start_offset, state.batches, state.state_epoch)
            sp.log_start_moved(p.log_start_offset)
        else:
            reset = self._cfg(group_id).get("share.auto.offset.reset", "latest")
            sp.initialize(p.log_start_offset, reset_end(p, reset), reset)
        code, copied = await self._dead_letters(group_id, topic, sp)  # held at the limit
        if code is not ErrorCode.none:
            return code, "dead-letter copy"  # not loaded: the next fetch tries again
        changes = sp.take_changes()
        if changes is not None:  # the start a reset chose must be durable before use
            code = await self.persister.write(key, sp.state_epoch, leader_epoch, *changes)
            if copied:
                await self.replicas.wait_for_acks(copied, DLQ_ACK_TIMEOUT_MS)
            if code is not ErrorCode.none:
                return code, "first WriteShareGroupState"
        sp.durable = sp.noted()
        self.partitions[(group_id, topic, partition)] = sp
        self.metrics.loaded(started)
        return ErrorCode.none, ""

    async def persist(self, group_id: str, parts: Iterable[tuple[str, int]],
                      windows: dict[tuple[str, int], SharePartition] | None = None,
                      ) -> dict[tuple[str, int], ErrorCode]:
        """Make every change noted so far on these share partitions durable (the
        acknowledgements just applied); the partitions whose write failed, with why.
        `windows`: the share partitions the acknowledgements were applied to, written
        even if this broker dropped them since (led elsewhere now, or read again): an
        acknowledgement is answered only once written (or refused: FENCED_LEADER_EPOCH
        once a newer leader read the state), never as if a dropped window held it."""
        if self.persister is None:
            return {}
        given = windows or {}
        sps = {tp: sp for tp in dict.fromkeys(parts)
               if (sp := given[tp] if tp in given
                   else self.partitions.get((group_id, tp[0], tp[1]))) is not None}
        codes = await asyncio.gather(*(
            self._flush(group_id, tp[0], sp) for tp, sp in sps.items()))
        return {tp: c for tp, c in zip(sps, codes, strict=True) if c is not ErrorCode.none}

    async def _flush(self, group_id: str, topic: str, sp: SharePartition) -> ErrorCode:
        """Until every change noted on `sp` before this call is durable. One write of a
        share partition at a time (a FIFO lock), each taking all changes noted until it
        starts, so the writes reach the coordinator in the order of the changes."""
        assert self.persister is not None
        want = sp.noted()
        key = (group_id, topic, sp.partition)
        lock = self._flush_locks.get(key)
        if lock is None:
            lock = self._flush_locks[key] = asyncio.Lock()
        async with lock:
            if sp.durable >= want and not sp.has_changes():
                return ErrorCode.none
            found = self.topics(topic)
            if found is None:
                return ErrorCode.unknown_topic_or_partition
            code, copied = await self._dead_letters(group_id, topic, sp)
            if code is not ErrorCode.none:
                return code  # the archive stays unwritten until its copies are made
            seq = sp.noted()
            changes = sp.take_changes()
            if changes is None:
                sp.durable = seq
                return ErrorCode.none
            code = await self.persister.write(ShareKey(group_id, found[0], sp.partition),
                                              sp.state_epoch, sp.leader_epoch, *changes)
            if copied:
                await self.replicas.wait_for_acks(copied, DLQ_ACK_TIMEOUT_MS)
            if code is ErrorCode.none:
                sp.durable = max(sp.durable, seq)
            elif code in (ErrorCode.fenced_state_epoch, ErrorCode.fenced_leader_epoch):
                # reset, or led elsewhere now: this window is not the truth any more
                if self.partitions.get(key) is sp:
                    del self.partitions[key]
            else:
                sp.untake(changes[1])
            return code

    def _dead_letters(self, group_id: str, topic: str,
                      sp: SharePartition) -> Awaitable[tuple[ErrorCode, list[Any]]]:
        """Copy what `sp` archived to the group's dead-letter topic, if it has one
        (`DeadLetters.drain`); a failed copy: nothing may be written."""
        return self.dead_letters.drain(group_id, topic, sp, self._cfg(group_id).get(DLQ_TOPIC))

    async def _make_durable(self, group_id: str, member_id: str,
                            wanted: Sequence[tuple[str, int]],
                            results: list[SharePartitionResult],
                            acked: Sequence[tuple[str, int]] = (),
                            windows: dict[tuple[str, int], SharePartition] | None = None,
                            ) -> dict[tuple[str, int], ErrorCode]:
        """Acquisitions are written (their delivery counts) before records go out, with
        the acknowledgements of `acked`; a partition whose write failed hands its records
        back and returns none (no error: the client fetches again, and librdkafka treats
        a partition's coordinator errors as fatal). Returns the failed writes."""
        parts = [*acked, *(tp for tp, r in zip(wanted, results, strict=True) if r.acquired)]
        failed = await self.persist(group_id, parts, windows)
        for tp, r in zip(wanted, results, strict=True):
            code = failed.get(tp)
            if code is None or not r.acquired:
                continue
            sp = self.partitions.get((group_id, tp[0], tp[1]))
            if sp is not None:
                sp.hand_back(member_id, r.acquired)
            r.acquired, r.records = [], []
        return failed

    def _acquire(self, group_id: str, member_id: str, wanted: Sequence[tuple[str, int]],
                 max_records: int, max_bytes: int, record_limit: bool = False,
                 regions: bool = False) -> list[SharePartitionResult]:
        out: list[SharePartitionResult] = []
        budget = max(1, max_records)
        bytes_left = max_bytes
        cfg = self._cfg(group_id)
        reset = cfg.get("share.auto.offset.reset", "latest")
        committed = (cfg.get("share.isolation.level")
                     == "read_committed")
        isolation = FetchIsolation.TXN_COMMITTED if committed else FetchIsolation.HIGH_WATERMARK
        for topic, partition in wanted:
            r = SharePartitionResult()
            out.append(r)
            p = self.replicas.get_partition(topic, partition)
            if p is None or not p.is_leader:
                # Deleted, or led elsewhere now: this broker's window is no longer the
                # truth (and with no durable state there is nothing to hand over).
                self.partitions.pop((group_id, topic, partition), None)
                r.error = (ErrorCode.unknown_topic_or_partition if p is None
                           else ErrorCode.not_leader_or_follower)
                if p is not None:
                    r.leader = (p.state.leader, p.leader_epoch)
                continue
            r.leader = (p.state.leader, p.leader_epoch)
            if self.persister is not None:
                found = self.partitions.get((group_id, topic, partition))
                if found is None or found.leader_epoch != p.leader_epoch:
                    # Its state could not be read yet (the share coordinator loading or
                    # moving): nothing to hand out this time, and no error either
                    # (librdkafka treats a partition's COORDINATOR_NOT_AVAILABLE as fatal);
                    # the next fetch reads it again.
                    continue
                sp = found
            else:
                sp = self._share_partition(group_id, topic, partition)
            if not sp.initialized:
                sp.initialize(p.log_start_offset, reset_end(p, reset), reset)
            sp.log_start_moved(p.log_start_offset)
            if budget <= 0 or bytes_left <= 0:
                continue
            offset = sp.next_fetch_offset()
            bound = p.last_stable_offset if committed else p.high_watermark
            if offset >= bound:
                continue
            try:
                info = p.read(offset, sp.read_bytes(bytes_left, budget), isolation, True,
                              regions)
                batches = read_batches(info.buffers,
                                       info.aborted_transactions if committed else None)
            except KafkaError as e:
                r.error = e.code
                continue
            sp.read_seen(batches)
            r.acquired = sp.acquire(member_id, [(b, e, gap) for b, e, gap, _ in batches],
                                    budget, record_limit)
            if not r.acquired:
                continue
            budget -= sum(a.last_offset - a.first_offset + 1 for a in r.acquired)
            lo, hi = r.acquired[0].first_offset, r.acquired[-1].last_offset
            r.records = acquired_records(batches, lo, hi)
            bytes_left -= sum(len(v) for v in r.records)
        return out


def topic_partitions(ids: Callable[[uuid.UUID], str | None],
                     pairs: Iterable[tuple[uuid.UUID, int]]) -> list[tuple[str, int] | None]:
    """Topic ids to names (None for an id this broker does not know)."""
    out: list[tuple[str, int] | None] = []
    for tid, part in pairs:
        name = ids(tid)
        out.append(None if name is None else (name, part))
    return out
