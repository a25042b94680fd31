"""The remote log manager (KIP-405's RemoteLogManager): for every hosted partition of a
topic with `remote.storage.enable=true`, one task per `remote.log.manager.task.interval.ms`:

- on the leader, copy: each rolled segment wholly below the high watermark, the last stable
  offset and the recovery point (so what is uploaded is committed, decided and on disk) is
  uploaded once with its `.index`, `.timeindex`, `.txnindex`, producer snapshot and the
  leader epochs it spans, at most `remote.log.manager.copier.thread.pool.size` uploads at a
  time over the broker and at most `remote.log.manager.copy.max.bytes.per.second`. The
  remote log metadata is committed first with the segments COPY_SEGMENT_STARTED and then
  COPY_SEGMENT_FINISHED, each version in the metadata store and then as the bucket's
  manifest (`yak.tiered.remote_metadata`, `yak.tiered.metadata`); only then does
  `PartitionLog.tiered_upto` move, which is what lets local retention
  (`local.retention.*`) delete the local copies;
- on the leader, remote retention: segments past `retention.ms` / `retention.bytes` (the
  whole log's) are marked DELETE_SEGMENT_STARTED with the remote log start offset moved
  past them, their objects deleted, then dropped from the manifest;
- a new leader reads the committed metadata (republishing a version the bucket missed, or
  taking the bucket's if the metadata store has none) and carries on after its last copied
  offset (no duplicate uploads); entries left STARTED by a leader that died between
  upload and commit are swept (their objects deleted) before anything else, and segment
  files no manifest names (orphans) once older than `remote.log.manager.orphan.grace.ms`
  (`yak.tiered.orphans`);
- on a follower, the committed metadata is re-read so its local retention honours what was
  uploaded;
  a follower below its leader's local log start restarts its log after the remote part
  with the producer snapshot and leader epochs of the remote segment before it
  (`follower_aux_state`, `yak.tiered.aux_state`);
- a deleted topic (`delete_topic`, KIP-405's stopPartitions with deleteRemoteLog): its
  rounds stop and every object under its key prefix (segments, indexes, manifests, orphans)
  is deleted, retried with backoff until the store answers and a listing comes back empty.

A failed round (the store down, slow or answering errors) backs off per partition
(`remote.log.manager.task.retry.backoff.ms`, doubling to `...backoff.max.ms`); nothing local
is deleted meanwhile, and produce and local fetches never wait on the store.

Reads (`read`): a Fetch below the local log start is served from the remote segment that
holds the offset (`yak.tiered.reader`); a read that takes longer than
`remote.fetch.max.wait.ms` answers empty (Kafka's DelayedRemoteFetch expiry) while it goes on
filling the cache; a store failure or a corrupt object is `KafkaStorageError` (retriable).
Reads wait for the remote fetch quota (`yak.tiered.quota`, KIP-956) at most that long too.
The counters are exported by `yak.tiered.metrics`; the disk guard (`yak.tiered.guard`) is
checked once per tick. (Past ~600 lines: one partition's copy, retention and reads share
its state; what stands alone is in deletion, orphans, aux_state, quota, guard, metrics.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from yak.errors import (
    KafkaStorageError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
)
from yak.storage import PartitionLog
from yak.tiered.aux_state import RemoteAuxState, remote_aux_state
from yak.tiered.config import TieredConfig
from yak.tiered.deletion import delete_remote_topic
from yak.tiered.guard import DiskGuard
from yak.tiered.metadata import (
    Manifest,
    ManifestStore,
    RemoteLogSegmentMetadata,
    SegmentState,
    partition_dir,
    topic_prefix,
)
from yak.tiered.orphans import find_orphans
from yak.tiered.quota import RemoteFetchQuota
from yak.tiered.reader import ChunkCache, RemoteRead, RemoteSegmentReader
from yak.tiered.remote_metadata import MAX_CHANGES_PER_COMMIT, MetadataBackend, RemoteLogMetadata
from yak.tiered.segments import segments_to_copy
from yak.tiered.store import RemoteStorageError, RemoteStore, parse_uri

__all__ = ["HostedPartition", "RemoteLogManager", "TieredConfig"]

log = logging.getLogger(__name__)

# How often the task loop looks for leaderships not yet taken up between two rounds: a new
# leader reads the committed metadata (a DeleteRecords' start) within this, not a whole
# `remote.log.manager.task.interval.ms` later. A remote read refused to a leader that has
# not read it yet (`leader_ready`) wakes the loop at once.
_LEADERSHIP_POLL_S = 1.0


class HostedPartition(NamedTuple):
    """What the manager needs of a hosted partition (the composition builds these from the
    replica manager, which this layer may not import)."""

    topic: str
    partition: int
    topic_id: str
    log: PartitionLog
    leader_epoch: int
    is_leader: bool


class _Fenced(Exception):
    """Another writer committed the manifest version this broker meant to write."""


@dataclass
class _State:
    topic_id: str
    manifest: Manifest | None = None
    epoch: int = -2  # leader epoch the manifest was (re)loaded for; -1: as a follower
    failures: int = 0
    backoff_until: float = 0.0
    # DeleteRecords' start: refused to readers at once; committed before the request is
    # answered (`delete_records`), the segments wholly below it deleted by the next round.
    # A request that timed out is still committed by that round.
    requested_start: int = 0
    # Held while the leader reads (`_take_lead`) or commits (`_commit`) the head, so that a
    # DeleteRecords' commit and the round's commits build each version on the one before.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[None] | None = None
    # When the leader next looks for orphan objects (wall ms; `yak.tiered.orphans`): at
    # once when a leadership starts, again when unnamed objects pass the grace period.
    orphans_due_ms: int = 0


class RemoteLogManager:
    def __init__(self, config: TieredConfig, node_id: int,
                 hosted: Callable[[], Iterable[HostedPartition]],
                 store: RemoteStore | None = None,
                 metadata: MetadataBackend | None = None) -> None:
        assert config.uri is not None
        self.config = config
        self.node_id = node_id
        self._hosted = hosted
        self.store = store or RemoteStore(parse_uri(config.uri), {
            "access_key_id": config.access_key_id,
            "secret_access_key": config.secret_access_key})
        # The commit point is the metadata store (`metadata`, the cluster layer's, handed in
        # by the composition); the bucket's manifest follows it (`yak.tiered.remote_metadata`).
        self.manifests = RemoteLogMetadata(ManifestStore(self.store), metadata)
        self.cache = ChunkCache(config.cache_bytes)
        self.reader = RemoteSegmentReader(self.store, self.cache)
        self._states: dict[tuple[str, int], _State] = {}
        self._copy_slots: asyncio.Semaphore | None = None
        self._quota_next = 0.0
        self._loop_task: asyncio.Task[None] | None = None
        # Set by a remote read refused for want of this leadership's metadata: the loop
        # looks for new leaderships now rather than at its next poll.
        self._wake = asyncio.Event()
        # Notified whenever a leadership has read its metadata (`wait_leader_ready`).
        self._led = asyncio.Condition()
        self._reads: set[asyncio.Task[Any]] = set()
        self._deletes: set[asyncio.Task[None]] = set()
        # Kafka's RemoteCopyBytesPerSec / RemoteFetchBytesPerSec and their errors, as totals.
        self.copy_bytes = 0
        self.copy_errors = 0
        self.fetch_bytes = 0
        self.fetch_errors = 0
        self.segments_copied = 0
        self.segments_deleted = 0
        self.orphans_deleted = 0
        self.copy_requests = 0
        self.fetch_requests = 0
        self.last_error: str | None = None
        self.fetch_quota = RemoteFetchQuota(config.fetch_max_bytes_per_second)
        self.guard = DiskGuard(config.copy_lag_max_bytes)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Check the store (RemoteStorageError: the caller exits with one line), read the
        manifests of the tiered partitions hosted now, then run the task loop."""
        self._copy_slots = asyncio.Semaphore(self.config.copier_pool_size)
        await self.store.check()
        # A partition led here already (the single broker leads everything at start-up)
        # reads the metadata as its leader, so its remote reads are served at once.
        await asyncio.gather(*(self._take_lead(h, self._state(h)) if h.is_leader
                               else self._load(h) for h in self._tiered()),
                             return_exceptions=True)
        self._loop_task = asyncio.create_task(self._loop(), name="yak-remote-log-manager")

    async def stop(self) -> None:
        tasks = [t for t in [self._loop_task, *(s.task for s in self._states.values()),
                             *self._reads, *self._deletes] if t is not None]
        self.cache.cancel_prefetches()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        self._loop_task = None

    async def _loop(self) -> None:
        interval = self.config.task_interval_ms / 1000
        next_round = time.monotonic() + interval
        while True:
            with contextlib.suppress(TimeoutError):
                # asyncio.timeout, not wait_for: 3.11's wait_for drops a cancel
                async with asyncio.timeout(max(0.0, min(
                        _LEADERSHIP_POLL_S, next_round - time.monotonic()))):
                    await self._wake.wait()
            self._wake.clear()
            try:
                if time.monotonic() < next_round:
                    self.run_once(new_leaders_only=True)
                    continue
                next_round = time.monotonic() + interval
                self.run_once()
                self.guard.check(sum(s["lag_bytes"] for s in self.status() if s["leader"]),
                                 self.last_error)
            except Exception:  # noqa: BLE001 - the loop must outlive one bad tick
                log.exception("remote log manager: a round could not be started")

    def run_once(self, *, new_leaders_only: bool = False) -> list[asyncio.Task[None]]:
        """Start a round for every tiered partition whose previous round is over (only
        those led here under an epoch whose metadata is not read yet: `new_leaders_only`)."""
        started = []
        hosted = {(h.topic, h.partition): h for h in self._tiered()}
        for key in [k for k in self._states if k not in hosted]:
            st = self._states.pop(key)
            if st.task is not None:
                st.task.cancel()
        now = time.monotonic()
        for key, h in hosted.items():
            st = self._state(h)
            if (st.task is not None and not st.task.done()) or now < st.backoff_until:
                continue
            if new_leaders_only and not (h.is_leader and st.epoch != h.leader_epoch):
                continue
            st.task = asyncio.create_task(self._round(h, st), name=f"yak-rlm-{key[0]}-{key[1]}")
            started.append(st.task)
        return started

    async def wait_idle(self) -> None:
        """Every partition's current round is over (tests, benchmarks)."""
        await asyncio.gather(*(s.task for s in self._states.values() if s.task is not None),
                             return_exceptions=True)

    def _tiered(self) -> list[HostedPartition]:
        return [h for h in self._hosted() if h.log.config.remote_storage_enable]

    def _state(self, h: HostedPartition) -> _State:
        st = self._states.get((h.topic, h.partition))
        if st is None or st.topic_id != h.topic_id:
            st = self._states[(h.topic, h.partition)] = _State(h.topic_id)
        return st

    async def _load(self, h: HostedPartition, *, leader: bool = False) -> Manifest:
        st = self._state(h)
        if leader:  # a leadership starts: repair a crash between commit and publication
            m = await self.manifests.reconcile(h.topic, h.topic_id, h.partition)
        else:
            m = await self.manifests.load(h.topic, h.topic_id, h.partition)
        st.manifest = m
        h.log.tiered_upto = m.copied_upto
        await self._apply_start(h.log, m)
        return m

    @staticmethod
    async def _apply_start(plog: PartitionLog, m: Manifest) -> None:
        """The committed log start is the whole log's: a DeleteRecords into the local part
        that a crash took back locally (the log start checkpoint is periodic) is made
        again here, at start-up or a leadership's first read of the metadata."""
        target = min(m.log_start_offset, plog.high_watermark)
        if target > plog.log_start_offset:
            # Past a high watermark that moved back meanwhile: the next read does it.
            with contextlib.suppress(OffsetOutOfRangeError):
                await asyncio.to_thread(plog.delete_records, target)

    # ------------------------------------------------------------------ one round

    async def _round(self, h: HostedPartition, st: _State) -> None:
        try:
            if h.is_leader:
                await self._leader_round(h, st)
            else:
                st.epoch = -1
                await self._load(h)
            st.failures = 0
        except asyncio.CancelledError:
            raise
        except _Fenced as e:
            log.info("%s-%d: %s", h.topic, h.partition, e)
        except Exception as e:  # noqa: BLE001 - the store's or ours: back off, never crash
            st.failures += 1
            self.copy_errors += 1
            self.last_error = str(e)
            delay = min(self.config.retry_backoff_max_ms,
                        self.config.retry_backoff_ms * 2 ** (st.failures - 1)) / 1000
            st.backoff_until = time.monotonic() + delay
            level = logging.WARNING if isinstance(e, RemoteStorageError) else logging.ERROR
            log.log(level, "%s-%d: remote log task failed (attempt %d, next in %.1fs): %s",
                    h.topic, h.partition, st.failures, delay, e,
                    exc_info=not isinstance(e, RemoteStorageError))

    async def _leader_round(self, h: HostedPartition, st: _State) -> None:
        await self._take_lead(h, st)
        assert st.manifest is not None
        if st.manifest.leader_epoch > h.leader_epoch:
            return  # a newer leader owns the remote log; our leadership is stale
        if _now_ms() >= st.orphans_due_ms:
            await self._sweep_orphans(h, st)
            if st.manifest.leader_epoch > h.leader_epoch:
                return
        await self._sweep(h, st)
        await self._copy(h, st)
        await self._remote_retention(h, st)

    async def _take_lead(self, h: HostedPartition, st: _State) -> None:
        """A new leadership carries on from the committed metadata, whoever wrote it
        (reconciling the two copies); a publication that failed here is retried. Under the
        partition's lock: a DeleteRecords commits only on the head read here."""
        async with st.lock:
            if st.manifest is None or st.epoch != h.leader_epoch:
                await self._load(h, leader=True)
                st.epoch = h.leader_epoch
                st.orphans_due_ms = 0
                async with self._led:
                    self._led.notify_all()
            assert st.manifest is not None
            if self.manifests.unpublished(st.manifest):
                await self.manifests.publish(st.manifest)

    async def _commit(self, h: HostedPartition, st: _State, **changes: Any) -> Manifest:
        """Commit the next version in the metadata store, then publish it to the bucket;
        _Fenced if someone else committed it. A failed publication raises after the
        commit (the round backs off; the next one publishes first): objects are deleted
        only after the version without them is in both copies. Under the partition's
        lock, one commit at a time: the round's and a DeleteRecords' (`delete_records`)
        each build on the version the other committed."""
        async with st.lock:
            return await self._commit_locked(h, st, **changes)

    async def _commit_locked(self, h: HostedPartition, st: _State, **changes: Any) -> Manifest:
        assert st.manifest is not None
        if "log_start_offset" in changes:
            # The log start only moves forward: a retention commit computed before a
            # DeleteRecords' commit must not take that start back.
            changes["log_start_offset"] = max(changes["log_start_offset"],
                                              st.manifest.log_start_offset)
        new = replace(st.manifest, version=st.manifest.version + 1,
                      leader_epoch=max(h.leader_epoch, st.manifest.leader_epoch),
                      broker_id=self.node_id, **changes)
        if not await self.manifests.commit(st.manifest, new):
            latest = await self.manifests.load(h.topic, h.topic_id, h.partition)
            st.manifest = latest
            h.log.tiered_upto = latest.copied_upto
            raise _Fenced(f"manifest version {new.version} was committed by broker"
                          f" {latest.broker_id} at leader epoch {latest.leader_epoch}")
        st.manifest = new
        await self.manifests.publish(new)
        return new

    async def _sweep(self, h: HostedPartition, st: _State) -> None:
        """Entries left COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED (a leader died or
        failed between upload and commit): delete their objects, drop them."""
        assert st.manifest is not None
        stale = [s for s in st.manifest.segments
                 if s.state in (SegmentState.COPY_SEGMENT_STARTED,
                                SegmentState.DELETE_SEGMENT_STARTED)][:MAX_CHANGES_PER_COMMIT]
        if not stale:
            return
        d = partition_dir(h.topic, h.topic_id, h.partition)
        await self.store.delete([s.object_key(d, k) for s in stale for k in s.files])
        self._recheck_orphans(st)  # the dead leader's uploads may still land
        ids = {s.segment_id for s in stale}
        await self._commit(h, st, segments=tuple(
            s for s in st.manifest.segments if s.segment_id not in ids))
        log.info("%s-%d: swept %d unfinished remote segment(s)", h.topic, h.partition,
                 len(stale))

    def _recheck_orphans(self, st: _State) -> None:
        """Objects of entries just dropped may still land: look again after the grace."""
        st.orphans_due_ms = min(st.orphans_due_ms, _now_ms() + self.config.orphan_grace_ms)

    async def _sweep_orphans(self, h: HostedPartition, st: _State) -> None:
        """Delete the partition's segment files no manifest names, once older than the
        grace period (`yak.tiered.orphans`): list first, then read the newest manifest."""
        d = partition_dir(h.topic, h.topic_id, h.partition)
        listing = await self.store.list_objects(f"{d}/")
        async with st.lock:  # not over a DeleteRecords' commit in flight
            await self._load(h)
        assert st.manifest is not None
        now = _now_ms()
        old, due = find_orphans(listing, d, st.manifest, now, self.config.orphan_grace_ms)
        st.orphans_due_ms = 2**62 if due is None else due
        if not old or st.manifest.leader_epoch > h.leader_epoch:
            return
        await self.store.delete(old)
        self.orphans_deleted += len(old)
        log.info("%s-%d: deleted %d orphan remote object(s) no manifest names: %s",
                 h.topic, h.partition, len(old), ", ".join(k.rsplit("/", 1)[-1]
                                                           for k in old[:6]))

    # ------------------------------------------------------------------ copy

    async def _copy(self, h: HostedPartition, st: _State) -> None:
        assert st.manifest is not None
        plog = h.log
        plog.tiered_upto = st.manifest.copied_upto
        bound = min(plog.high_watermark, plog.last_stable_offset, plog.recovery_point)
        todo = await asyncio.to_thread(
            segments_to_copy, plog, st.manifest.copied_upto, bound,
            min(self.config.copier_pool_size, MAX_CHANGES_PER_COMMIT), self.node_id)
        if not todo:
            return
        metas = [m for m, _, _ in todo]
        await self._commit(h, st, segments=st.manifest.segments + tuple(metas))
        d = partition_dir(h.topic, h.topic_id, h.partition)
        results = await asyncio.gather(
            *(self._upload(d, meta, path, small) for meta, path, small in todo),
            return_exceptions=True)
        now = _now_ms()
        done = {m.segment_id for m, r in zip(metas, results, strict=True)
                if not isinstance(r, BaseException)}
        failed = [m for m in metas if m.segment_id not in done]
        # Keep only a prefix of finished uploads: a later segment without the one before it
        # would leave a hole below `tiered_upto`.
        ordered = sorted(metas, key=lambda m: m.base_offset)
        keep: set[str] = set()
        for m in ordered:
            if m.segment_id not in done:
                break
            keep.add(m.segment_id)
        this_round = {m.segment_id for m in metas}  # once, not per entry of a long log
        segs = tuple(s.with_state(SegmentState.COPY_SEGMENT_FINISHED, now)
                     if s.segment_id in keep else s
                     for s in st.manifest.segments
                     if s.segment_id in keep or s.segment_id not in this_round)
        await self._commit(h, st, segments=segs)
        plog.tiered_upto = st.manifest.copied_upto
        self.segments_copied += len(keep)
        dropped = [m for m in metas if m.segment_id not in keep]
        if dropped:
            self._recheck_orphans(st)  # an upload that failed here may still land
            with contextlib.suppress(RemoteStorageError):
                await self.store.delete([m.object_key(d, k) for m in dropped for k in m.files])
        if failed:
            err = next(r for r in results if isinstance(r, BaseException))
            raise err

    async def _upload(self, part_dir: str, meta: RemoteLogSegmentMetadata, log_path: str,
                      small: dict[str, bytes]) -> None:
        assert self._copy_slots is not None
        async with self._copy_slots:
            await self._pace(meta.size + sum(len(b) for b in small.values()))
            self.copy_requests += 1
            await self.store.put_file(meta.object_key(part_dir, "log"), log_path)
            for kind, data in small.items():
                await self.store.put_bytes(meta.object_key(part_dir, kind), data)
            self.copy_bytes += meta.size + sum(len(b) for b in small.values())

    async def _pace(self, nbytes: int) -> None:
        """The copy quota: uploads start no faster than the configured byte rate."""
        rate = self.config.copy_max_bytes_per_second
        if rate >= 2**62:
            return
        now = time.monotonic()
        start = max(now, self._quota_next)
        self._quota_next = start + nbytes / rate
        if start > now:
            await asyncio.sleep(start - now)

    # ------------------------------------------------------------------ remote retention

    async def _remote_retention(self, h: HostedPartition, st: _State) -> None:
        assert st.manifest is not None
        cfg = h.log.config
        done = sorted(st.manifest.copied, key=lambda s: s.base_offset)
        if not done:
            return
        # Below the start (DeleteRecords) first, then retention over the rest, oldest first.
        floor = max(st.requested_start, st.manifest.log_start_offset)
        drop = [s for s in done if s.end_offset < floor]
        rest = [s for s in done if s.end_offset >= floor] if cfg.delete else []
        n = 0
        if cfg.retention_ms >= 0:
            now = _now_ms()
            while n < len(rest) and now - rest[n].max_timestamp > cfg.retention_ms:
                n += 1
        if cfg.retention_bytes >= 0:
            upto = st.manifest.copied_upto
            local_only = sum(seg.size for seg in h.log.segments if seg.base_offset >= upto)
            total = sum(s.size for s in rest[n:]) + local_only
            while n < len(rest) and total - rest[n].size >= cfg.retention_bytes:
                total -= rest[n].size
                n += 1
        drop = (drop + rest[:n])[:MAX_CHANGES_PER_COMMIT]  # the rest next round
        if not drop:
            if st.requested_start > st.manifest.log_start_offset:
                await self._commit(h, st, log_start_offset=st.requested_start)
            return
        new_start = max(max(s.end_offset for s in drop) + 1, st.requested_start)
        ids = {s.segment_id for s in drop}
        now = _now_ms()
        await self._commit(h, st, log_start_offset=max(new_start, st.manifest.log_start_offset),
                           segments=tuple(
                               s.with_state(SegmentState.DELETE_SEGMENT_STARTED, now)
                               if s.segment_id in ids else s for s in st.manifest.segments))
        d = partition_dir(h.topic, h.topic_id, h.partition)
        await self.store.delete([s.object_key(d, k) for s in drop for k in s.files])
        self.cache.drop_prefix(f"{d}/")
        await self._commit(h, st, segments=tuple(
            s for s in st.manifest.segments if s.segment_id not in ids))
        self.segments_deleted += len(drop)
        if new_start > h.log.log_start_offset:
            # The whole log's start moved past data still held locally: drop it too.
            await asyncio.to_thread(h.log.delete_records, min(new_start, h.log.high_watermark))
        log.info("%s-%d: remote retention deleted %d segment(s); log start offset now %d",
                 h.topic, h.partition, len(drop), new_start)

    # ------------------------------------------------------------------ topic deletion

    def delete_topic(self, topic: str, topic_id: str) -> asyncio.Task[None]:
        """The topic was deleted (called by the cluster layer once its partitions are no
        longer hosted here): stop its rounds and delete its remote log in the background.
        Every broker that hosted a replica does it; deletes are idempotent."""
        stopping = []
        for key in [k for k, st in self._states.items()
                    if k[0] == topic and st.topic_id == topic_id]:
            st = self._states.pop(key)
            if st.task is not None:
                st.task.cancel()
                stopping.append(st.task)
        self.cache.drop_prefix(topic_prefix(topic, topic_id))
        task = asyncio.create_task(self._delete_topic(topic, topic_id, stopping),
                                   name=f"yak-rlm-delete-{topic}")
        self._deletes.add(task)
        task.add_done_callback(self._deletes.discard)
        return task

    async def _delete_topic(self, topic: str, topic_id: str,
                            stopping: list[asyncio.Task[None]]) -> None:
        """The objects first, the metadata store's records last (as the manifests are the
        last objects deleted): a deletion cut short leaves metadata naming what is gone,
        never objects nothing names. The metadata store's topic deletion drops the records
        too; this catches a commit that raced it."""
        await delete_remote_topic(self.store, self.config, topic, topic_id, stopping)
        try:
            await self.manifests.delete_topic(topic_id)
        except Exception as e:  # noqa: BLE001 - the metadata store's; the topic is gone
            log.warning("%s: dropping the deleted topic's remote log metadata failed: %s",
                        topic, e)

    # ------------------------------------------------------------------ reads

    def leader_ready(self, topic: str, partition: int, leader_epoch: int | None) -> bool:
        """Whether this broker's copy of the remote log metadata may answer remote reads:
        `leader_epoch` is the partition's current one if this broker leads it, None if it
        does not (a follower answers from its copy, re-read each round). A leader answers
        only from the metadata it (re)read for this leadership: the copy it held as a
        follower may predate a DeleteRecords its predecessor answered, whose records must
        never be served again. False wakes the task loop, which reads it at once; the
        caller answers a retriable error meanwhile (Kafka's remote log metadata "not yet
        initialized" for a new leader)."""
        if leader_epoch is None:
            return True
        st = self._states.get((topic, partition))
        if st is not None and st.manifest is not None and st.epoch == leader_epoch:
            return True
        self._wake.set()
        return False

    async def wait_leader_ready(self, topic: str, partition: int,
                                leader_epoch: int | None) -> bool:
        """`leader_ready`, waiting at most `remote.fetch.max.wait.ms` for the task loop
        (woken) to read the metadata: a request that comes right after the election is
        answered, not refused, when that read is quick."""
        if self.leader_ready(topic, partition, leader_epoch):
            return True
        with contextlib.suppress(TimeoutError):
            async with self._led:
                await asyncio.wait_for(self._led.wait_for(
                    lambda: self.leader_ready(topic, partition, leader_epoch)),
                    self.config.fetch_max_wait_ms / 1000)
        return self.leader_ready(topic, partition, leader_epoch)

    async def check_leader_ready(self, topic: str, partition: int,
                                 leader_epoch: int | None) -> None:
        """`wait_leader_ready` or KafkaStorageError (retriable: consumers back off and fetch
        again)."""
        if not await self.wait_leader_ready(topic, partition, leader_epoch):
            raise KafkaStorageError(
                f"{topic}-{partition}: the remote log metadata of leader epoch {leader_epoch}"
                " is not read yet")

    def log_start_offset(self, topic: str, partition: int, *,
                         leader_epoch: int | None = None) -> int | None:
        """The remote log's start (the whole log's start), None if nothing is remote, or
        if `leader_epoch` (this broker leads the partition) is given and its metadata is
        not read yet (`leader_ready`): the caller answers from the local log then."""
        st = self._states.get((topic, partition))
        if st is None or st.manifest is None:
            return None
        if leader_epoch is not None and not self.leader_ready(topic, partition, leader_epoch):
            return None
        start = st.manifest.start_offset
        return None if start is None else max(start, st.requested_start)

    def request_log_start(self, topic: str, partition: int, offset: int) -> None:
        """Move the whole log's start to `offset` without waiting (the broker's own
        pruning, which repeats itself): nothing below it is served from now on and the
        next round commits it. A client's DeleteRecords goes through `delete_records`."""
        st = self._states.get((topic, partition))
        if st is None:
            return
        st.requested_start = max(st.requested_start, offset)
        self.run_once()

    async def delete_records(self, topic: str, partition: int, offset: int,
                             timeout_s: float) -> int | None:
        """DeleteRecords on a tiered partition's leader: nothing below `offset` is served
        from now on, and the call returns (the remote log's start, None while it holds
        nothing readable) only once that start is committed to the remote log metadata
        and published to the bucket, so that neither a restart nor a new leader serves
        those records again (Kafka answers once the log start offset is durable). The
        segments wholly below it are deleted by the next round.

        NotLeaderOrFollowerError if this broker does not lead the partition (or a newer
        leader owns the remote log); KafkaStorageError if the metadata store or the bucket
        fails; RequestTimedOutError after `timeout_s` (both retriable: a retry commits
        nothing twice, and the next round commits the start anyway)."""
        h = next((h for h in self._tiered() if (h.topic, h.partition) == (topic, partition)),
                 None)
        if h is None or not h.is_leader:
            raise NotLeaderOrFollowerError(f"this broker does not lead {topic}-{partition}")
        st = self._state(h)
        st.requested_start = max(st.requested_start, offset)  # refused to readers at once
        try:
            await asyncio.wait_for(self._commit_start(h, st, offset), timeout_s)
        except TimeoutError:
            raise RequestTimedOutError(
                f"the log start offset {offset} of {topic}-{partition} was not committed"
                f" to the remote log metadata within {timeout_s:.1f}s") from None
        except RemoteStorageError as e:
            raise KafkaStorageError(
                f"committing the log start offset {offset} of {topic}-{partition}: {e}"
            ) from e
        return self.log_start_offset(topic, partition)

    async def _commit_start(self, h: HostedPartition, st: _State, offset: int) -> None:
        """Commit `offset` as the remote log's start on the current head (read by a new
        leadership first), once: a version another writer committed meanwhile is read and
        the check made again on it."""
        while True:
            await self._take_lead(h, st)
            async with st.lock:
                m = st.manifest
                assert m is not None
                if m.leader_epoch > h.leader_epoch:
                    raise NotLeaderOrFollowerError(
                        f"{h.topic}-{h.partition}: leader epoch {m.leader_epoch} owns the"
                        f" remote log (this broker leads epoch {h.leader_epoch})")
                if m.log_start_offset >= offset:
                    if self.manifests.unpublished(m):
                        await self.manifests.publish(m)
                    return
                try:
                    await self._commit_locked(h, st, log_start_offset=offset)
                except _Fenced as e:
                    log.info("%s-%d: %s; DeleteRecords reads it and tries again",
                             h.topic, h.partition, e)
                    continue
                log.info("%s-%d: DeleteRecords committed log start offset %d (version %d)",
                         h.topic, h.partition, offset, st.manifest.version)
                return

    def highest_copied_offset(self, topic: str, partition: int) -> int | None:
        """The last offset in the remote log (ListOffsets LATEST_TIERED_TIMESTAMP)."""
        st = self._states.get((topic, partition))
        if st is None or st.manifest is None or not st.manifest.copied:
            return None
        return st.manifest.copied_upto - 1

    def epoch_for(self, topic: str, partition: int, offset: int) -> int:
        st = self._states.get((topic, partition))
        seg = None if st is None or st.manifest is None else st.manifest.find(offset)
        if seg is None:
            return -1
        epoch = -1
        for e, start in seg.leader_epochs:
            if start <= offset:
                epoch = e
        return epoch

    async def offset_for_timestamp(self, topic: str, partition: int, log_: PartitionLog,
                                   timestamp: int, *,
                                   leader_epoch: int | None = None) -> tuple[int, int] | None:
        """ListOffsets by time below the local log start: (offset, timestamp) of the first
        remote record at or after `timestamp` in a segment older than the local log, None
        if the answer is local (or nothing qualifies remotely). KafkaStorageError if the
        store fails, or if `leader_epoch`'s metadata is not read yet (`leader_ready`)."""
        await self.check_leader_ready(topic, partition, leader_epoch)
        st = self._states.get((topic, partition))
        if st is None or st.manifest is None:
            return None
        local_start = log_.log_start_offset
        start = st.manifest.start_offset
        for seg in sorted(st.manifest.copied, key=lambda s: s.base_offset):
            if seg.base_offset >= local_start:
                break
            if seg.max_timestamp < timestamp or (start is not None and seg.end_offset < start):
                continue
            d = partition_dir(topic, st.topic_id, partition)
            try:
                found = await self.reader.offset_for_timestamp(seg, d, timestamp)
            except RemoteStorageError as e:
                self.fetch_errors += 1
                raise KafkaStorageError(f"remote time lookup in {topic}-{partition}: {e}") from e
            if found is not None and (start is None or found[0] >= start):
                return found
        return None

    async def follower_aux_state(self, topic: str, topic_id: str, partition: int,
                                 leader_local_start: int) -> RemoteAuxState | None:
        """A follower below its leader's local log start (OFFSET_MOVED_TO_TIERED_STORAGE):
        where to restart its log and the producer snapshot and leader epochs to restart
        it with (`yak.tiered.aux_state`); None if no remote segment holds the offset before
        the leader's local start. KafkaStorageError (retriable) if the store fails or an
        object does not match the manifest."""
        try:
            return await remote_aux_state(self.manifests, self.reader, topic, topic_id,
                                          partition, leader_local_start)
        except RemoteStorageError as e:
            self.fetch_errors += 1
            raise KafkaStorageError(
                f"remote state of {topic}-{partition} for a follower: {e}") from e

    def tiered(self, log_: PartitionLog) -> bool:
        return log_.config.remote_storage_enable

    async def read(self, topic: str, partition: int, topic_id: str, log_: PartitionLog,
                   offset: int, max_bytes: int, upper: int, min_one: bool,
                   committed: bool, *, leader_epoch: int | None = None,
                   ) -> tuple[RemoteRead, list[tuple[int, int]] | None]:
        """A Fetch below the local log start. OffsetOutOfRangeError if no remote segment
        holds `offset`; KafkaStorageError (retriable) if the store fails or an object is
        corrupt, or if this broker leads the partition (`leader_epoch`) and has not read
        the metadata for that leadership yet (`leader_ready`); an empty read if the store,
        or the fetch quota, takes longer than remote.fetch.max.wait.ms."""
        st = self._states.get((topic, partition))
        if st is not None and offset < st.requested_start:
            # Below a start this broker was asked for (it only grows): out of range
            # whether or not this leadership's metadata is read yet.
            raise OffsetOutOfRangeError(
                f"offset {offset} of {topic}-{partition} is below the log start offset"
                f" {st.requested_start}")
        await self.check_leader_ready(topic, partition, leader_epoch)
        if not await self.fetch_quota.admit(self.config.fetch_max_wait_ms / 1000):
            return RemoteRead(), [] if committed else None  # KIP-956: the quota is spent
        task = asyncio.create_task(self._read(topic, partition, topic_id, log_, offset,
                                              max_bytes, upper, min_one, committed))
        self._reads.add(task)
        task.add_done_callback(self._read_done)
        done, _ = await asyncio.wait({task}, timeout=self.config.fetch_max_wait_ms / 1000)
        if not done:
            return RemoteRead(), [] if committed else None
        return task.result()

    def _read_done(self, task: asyncio.Task[Any]) -> None:
        self._reads.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a fetch that gave up waiting never will

    async def _read(self, topic: str, partition: int, topic_id: str, log_: PartitionLog,
                    offset: int, max_bytes: int, upper: int, min_one: bool,
                    committed: bool) -> tuple[RemoteRead, list[tuple[int, int]] | None]:
        st = self._states.get((topic, partition))
        try:
            if st is None or st.manifest is None:
                h = HostedPartition(topic, partition, topic_id, log_, -1, False)
                m = await self._load(h)
            else:
                m = st.manifest
            seg = m.find(offset)
            start = self.log_start_offset(topic, partition)
            if seg is None or start is None or offset < start:
                raise OffsetOutOfRangeError(
                    f"offset {offset} of {topic}-{partition} is in neither the remote log"
                    f" (from {start}) nor the local one (from {log_.log_start_offset})")
            d = partition_dir(topic, topic_id, partition)
            before = self.reader.bytes_fetched
            rr = await self.reader.read(seg, d, offset, max_bytes, upper, min_one)
            aborted = None
            if committed:
                aborted_txns: list[Any] = []
                if rr.size:
                    later = sorted((s for s in m.copied if s.base_offset >= seg.base_offset),
                                   key=lambda s: s.base_offset)
                    found, complete = await self.reader.aborted(later, d, offset,
                                                                rr.next_offset)
                    aborted_txns = found
                    if not complete:
                        aborted_txns += log_.collect_aborted_txns(offset, rr.next_offset)
                aborted = sorted({(a.producer_id, a.first_offset) for a in aborted_txns},
                                 key=lambda a: a[1])
            self.fetch_bytes += self.reader.bytes_fetched - before
            self.fetch_requests += 1
            self.fetch_quota.record(rr.size)
            return rr, aborted
        except RemoteStorageError as e:
            self.fetch_errors += 1
            log.warning("%s-%d: remote read at %d failed: %s", topic, partition, offset, e)
            raise KafkaStorageError(f"remote read of {topic}-{partition} failed: {e}") from e

    # ------------------------------------------------------------------ status

    def status(self) -> list[dict[str, Any]]:
        """Per tiered partition: remote start, copied up to, lag in bytes and segments
        (the data of `yak tiered status`)."""
        out = []
        for h in self._tiered():
            st = self._states.get((h.topic, h.partition))
            m = st.manifest if st is not None else None
            upto = m.copied_upto if m is not None else 0
            pending = [s for s in h.log.segments[:-1] if s.base_offset >= upto]
            out.append({
                "topic": h.topic, "partition": h.partition, "leader": h.is_leader,
                "remote_start": m.start_offset if m else None, "copied_upto": upto,
                "remote_segments": len(m.copied) if m else 0,
                "remote_bytes": sum(s.size for s in m.copied) if m else 0,
                "local_start": h.log.log_start_offset,
                "lag_segments": len(pending), "lag_bytes": sum(s.size for s in pending),
            })
        return out


def _now_ms() -> int:
    return int(time.time() * 1000)
