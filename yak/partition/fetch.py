"""The read side of the ReplicaManager: Fetch (Kafka's `fetchMessages`, `readFromLog` and
`DelayedFetch`), for consumers and for followers.

A consumer's fetch reads every wanted partition within Kafka's byte limits and, with fewer
than `min_bytes`, parks in the fetch purgatory until new data or `max_wait_ms`, then reads
again. A follower's fetch (`FetchParams.replica_id >= 0`) is the leader's side of
replication: its epochs are checked (a `diverging_epoch` tells it where to truncate), its
fetch offset becomes its known log end offset (which moves the high watermark and may
add it to the ISR), and it reads up to the log end, under the leader's replication
throttle (KIP-73) when the composition hands one in (`leader_throttle`). Tiered partitions (issue 25) read
below the local log start from the remote log, after the local reads; a follower fetching
there is answered OFFSET_MOVED_TO_TIERED_STORAGE and rebuilds from the remote log itself.

Fetch from follower (KIP-392, issue 23): a consumer's Fetch v11+ (`FetchParams.client_rack`
not None) may read a partition this broker follows, up to the follower's own high
watermark (read_uncommitted) or last stable offset (read_committed; both learnt from the
leader's fetch responses and the markers replicated here), with Kafka's answers: an
offset past the follower's log end is OFFSET_OUT_OF_RANGE (the client falls back to the
leader), one between its high watermark and log end gets no records yet. Older consumers
read from leaders only (NOT_LEADER_OR_FOLLOWER). On the leader, a consumer with a
non-empty rack is asked about: the composition's `replica_selector` (Kafka's
`replica.selector.class`, `yak/cluster/replica_selector.py`) picks among the in-sync
followers holding the fetch offset (`Partition._followers`, read here); a choice other
than the leader is answered at once as `preferred_read_replica` with no records, as Kafka
does.

`FetchPath` is a part of `ReplicaManager` (a class it extends, not a field): the Fetch hot
path reads the ReplicaManager's own attributes, with no extra call per request, and the
handlers keep calling `replica_manager.fetch_messages`. It declares what it reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from yak.errors import ErrorCode, KafkaError, OffsetOutOfRangeError
from yak.partition.partition import FetchIsolation

if TYPE_CHECKING:
    from yak.clock import Clock
    from yak.partition.ordering import EffectTurn
    from yak.partition.partition import Partition
    from yak.partition.purgatory import FetchPurgatory
    from yak.tiered import RemoteLogManager

__all__ = ["FetchParams", "FetchPartition", "FetchPath", "LeaderThrottle",
           "PartitionReadResult", "ReadReplicaSelector"]

_NONE = int(ErrorCode.none)
_OUT_OF_RANGE = int(ErrorCode.offset_out_of_range)
_UNKNOWN_TP = int(ErrorCode.unknown_topic_or_partition)
_NOT_LEADER = int(ErrorCode.not_leader_or_follower)
_FENCED_EPOCH = int(ErrorCode.fenced_leader_epoch)
_MOVED_TO_TIERED = int(ErrorCode.offset_moved_to_tiered_storage)
_STORAGE_ERROR = int(ErrorCode.kafka_storage_error)


class LeaderThrottle(Protocol):
    """KIP-73's leader side, handed in by the composition (the cluster layer's
    `replication_throttle.ReplicationThrottle`): which replicas it applies to, and its
    quota (`wait_s()` > 0: spent; `record(bytes)`)."""

    quota: Any

    def applies(self, topic: str, partition: int, in_sync: bool) -> bool: ...

    def max_bytes(self, fetch_max_bytes: int) -> int:
        """A throttled partition's read size (a tenth of a second of the rate)."""
        ...


class ReadReplicaSelector(Protocol):
    """KIP-392's `replica.selector.class`, handed in by the composition (the cluster
    layer's `replica_selector.RackAwareReplicaSelector`, which knows the brokers' racks)."""

    def select(self, client_rack: str, leader: int,
               candidates: Sequence[tuple[int, int, int]]) -> int:
        """`leader` or one of `candidates` (node id, log end offset, ms since caught up)."""
        ...


class PartitionReadResult:
    """One partition's answer to a fetch. Offsets are -1 where the partition is unknown.

    `diverging_epoch` (a follower's fetch only): (epoch, end offset) where the follower's
    log stops matching this leader's; `current_leader`: (leader id, leader epoch) sent with
    NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH so the fetcher need not ask for metadata
    (KIP-951); `preferred_read_replica` (a consumer's fetch on the leader, KIP-392): the
    replica it should read from instead, -1 none."""

    __slots__ = ("error", "high_watermark", "last_stable_offset", "log_start_offset",
                 "buffers", "size", "aborted_transactions", "diverging_epoch",
                 "current_leader", "preferred_read_replica")

    def __init__(self, error: int, high_watermark: int = -1, last_stable_offset: int = -1,
                 log_start_offset: int = -1, buffers: list[Any] | None = None, size: int = 0,
                 aborted_transactions: list[tuple[int, int]] | None = None,
                 diverging_epoch: tuple[int, int] | None = None,
                 current_leader: tuple[int, int] | None = None,
                 preferred_read_replica: int = -1) -> None:
        self.error = error
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.buffers = buffers if buffers is not None else []
        self.size = size
        self.aborted_transactions = aborted_transactions
        self.diverging_epoch = diverging_epoch
        self.current_leader = current_leader
        self.preferred_read_replica = preferred_read_replica


@dataclass(slots=True)
class FetchPartition:
    """One partition a Fetch asks for."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1  # a follower's: the epoch of the last batch it has
    log_start_offset: int = -1  # a follower's log start offset


@dataclass(slots=True)
class FetchParams:
    """The request-wide part of a Fetch (Kafka's FetchParams)."""

    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK
    replica_id: int = -1  # -1: a consumer; a broker id: a follower (issue 11)
    replica_epoch: int = -1  # the follower's broker epoch (KIP-903), -1 unknown
    # The connection sends file data with sendfile: storage may return `FileRegion`s.
    zero_copy: bool = False
    # A consumer's Fetch v11+ (KIP-392): its rack ("" none); such a consumer may read from
    # a follower. None: an older consumer or a follower, served by leaders only.
    client_rack: str | None = None


class FetchPath:
    """Fetch on the ReplicaManager (see the module's docstring)."""

    # The ReplicaManager's, read here.
    _partitions: dict[tuple[str, int], Partition]
    fetch_purgatory: FetchPurgatory
    clock: Clock
    remote_log: RemoteLogManager | None
    # Set by the composition; None (the class default) throttles nothing.
    leader_throttle: LeaderThrottle | None = None
    # Set by the composition from `replica.selector.class`; None: no preferred replicas.
    replica_selector: ReadReplicaSelector | None = None

    async def fetch_messages(
        self, params: FetchParams, wanted: Sequence[FetchPartition],
        turn: EffectTurn | None = None,
    ) -> list[PartitionReadResult]:
        """Read every wanted partition; if together they have fewer than `min_bytes` and
        no error, park in the fetch purgatory until new data or `max_wait_ms`, then read
        again (Kafka's DelayedFetch). Results are in the order of `wanted`.

        `turn`: the request's place in its connection's order of effects: the first read
        (and a follower's fetch state) comes after every earlier request's effects, as if
        the connection were handled one request at a time; the long poll holds no one."""
        try:
            if turn is not None and not turn.ready:
                await turn.wait()
            resolved = [self._partitions.get((w.topic, w.partition)) for w in wanted]
            remote: list[int] = []  # indexes of tiered reads below the local log start
            if params.replica_id >= 0:
                results, total, errors = self._read_for_follower(params, wanted, resolved)
            else:
                results, total, errors = self._read_all(params, wanted, resolved, remote)
        finally:
            if turn is not None:
                turn.release()
        # A follower is fetching (alive) until this fetch is answered or dropped with its
        # connection; then silent until its next one (`replica.fetch.dead.ms`, issue 27).
        followed: list[Partition] = []
        if params.replica_id >= 0:
            followed = [p for p in resolved if p is not None and p.is_leader]
            for p in followed:
                p.follower_fetch_started(params.replica_id)
        try:
            if remote:
                await self._read_remote(params, wanted, resolved, results, remote, total)
                return results
            if total >= params.min_bytes or errors or not wanted or params.max_wait_ms <= 0:
                return results
            loop = asyncio.get_running_loop()
            deadline = loop.time() + params.max_wait_ms / 1000
            keys = [(w.topic, w.partition) for w in wanted]
            # A follower's fetch that no throttle holds back read nothing because it is at
            # the log end of every partition: only new data (or a change of a partition)
            # gives it more, never a high watermark move alone.
            log_end = params.replica_id >= 0 and not self._throttled(params, wanted, resolved)
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return results
                woken = await self.fetch_purgatory.wait(keys, remaining, log_end)
                resolved = [self._partitions.get(k) for k in keys]
                results, total, errors = (
                    self._read_followed(params, wanted, resolved) if params.replica_id >= 0
                    else self._read_all(params, wanted, resolved))
                if not woken or total >= params.min_bytes or errors:
                    return results
        finally:
            if followed:
                now = self.clock.now_ms()
                for p in followed:
                    p.follower_fetch_ended(params.replica_id, now)

    def _throttled(self, params: FetchParams, wanted: Sequence[FetchPartition],
                   resolved: Sequence[Partition | None]) -> bool:
        """Does the leader's replication throttle apply to one of a follower's partitions
        (as `_read_followed` decides it)?"""
        throttle = self.leader_throttle
        if throttle is None:
            return False
        replica = params.replica_id
        for w, p in zip(wanted, resolved, strict=True):  # (a loop: `any` is a generator)
            if p is not None and throttle.applies(w.topic, w.partition, replica in p.state.isr):
                return True
        return False

    def _read_for_follower(
        self, params: FetchParams, wanted: Sequence[FetchPartition],
        resolved: Sequence[Partition | None],
    ) -> tuple[list[PartitionReadResult], int, bool]:
        """A follower's fetch, first pass (Kafka's leader side of replication): check its
        epochs, answer a diverging epoch where its log stops matching ours, record its log
        end offset (moving the high watermark, maybe adding it to the ISR), then read up to
        the log end. A later pass after a long-poll wake-up is a plain read.

        A partition fetched at its log end is answered here, without the read (see
        below); a throttled or tiered one takes the read, which may count or change it."""
        now = self.clock.now_ms()
        replica = params.replica_id
        epoch = params.replica_epoch
        throttle = self.leader_throttle
        rl = self.remote_log
        early = False  # an error or a diverging epoch: answer at once, never long-poll
        plain_wanted: list[FetchPartition] = []
        plain_resolved: list[Partition | None] = []
        slots: list[int | PartitionReadResult] = []
        for w, p in zip(wanted, resolved, strict=True):
            if p is None:
                slots.append(PartitionReadResult(_UNKNOWN_TP))
                early = True
                continue
            try:
                p.check_epoch(w.current_leader_epoch)
            except KafkaError as e:
                slots.append(PartitionReadResult(int(e.code), current_leader=(
                    p.state.leader, p.leader_epoch)))
                early = True
                continue
            offset = w.fetch_offset
            log_end = p.log_end_offset
            last_epoch = w.last_fetched_epoch
            if last_epoch >= 0:
                # Kafka's Partition.fetchRecords: the follower's last epoch must end here
                # at or after its fetch offset, or it must truncate first. The usual case,
                # its last epoch our latest (or newer): that epoch ends at our log end, as
                # `end_offset_for_epoch` answers, without the epoch cache's lock.
                latest = p.latest_epoch
                if last_epoch >= latest >= 0:
                    end_epoch, end_offset = latest, log_end
                else:
                    end_epoch, end_offset = p.end_offset_for_epoch(last_epoch)
                if end_epoch < 0 or end_offset < 0:
                    # No epoch of ours is that old: nothing to compare; the follower
                    # learns our log's bounds from OFFSET_OUT_OF_RANGE (Kafka's answer).
                    early = True
                    slots.append(PartitionReadResult(_OUT_OF_RANGE, p.high_watermark,
                                                     p.last_stable_offset, p.log_start_offset))
                    continue
                if end_epoch < last_epoch or end_offset < offset:
                    early = True
                    slots.append(PartitionReadResult(
                        _NONE, p.high_watermark, p.last_stable_offset, p.log_start_offset,
                        diverging_epoch=(end_epoch, end_offset)))
                    continue
            if p.log_start_offset <= offset <= log_end:
                p.update_follower_fetch_state(replica, offset, now, epoch, w.log_start_offset)
                if offset == log_end and (
                        throttle is None
                        or not throttle.applies(w.topic, w.partition, replica in p.state.isr)) \
                        and (rl is None or not p.log.config.remote_storage_enable):
                    # At the log end (a caught-up follower's every other fetch): the read
                    # would find nothing and answer the offsets below (`Partition.read`),
                    # with no throttle to count and no remote log start to put in.
                    slots.append(PartitionReadResult(_NONE, p.high_watermark,
                                                     p.last_stable_offset, p.log_start_offset))
                    continue
            slots.append(len(plain_wanted))
            plain_wanted.append(w)
            plain_resolved.append(p)
        if len(plain_wanted) == len(wanted):  # every partition reads: nothing to merge
            return self._read_followed(params, wanted, resolved)
        read, total, errors = (self._read_followed(params, plain_wanted, plain_resolved)
                               if plain_wanted else ([], 0, False))
        out = [s if isinstance(s, PartitionReadResult) else read[s] for s in slots]
        return out, total, errors or early

    def _read_followed(
        self, params: FetchParams, wanted: Sequence[FetchPartition],
        resolved: Sequence[Partition | None],
    ) -> tuple[list[PartitionReadResult], int, bool]:
        """A follower's read under the leader's replication throttle (KIP-73): a partition
        it applies to (the follower not in the ISR, the replica named in the topic's
        `leader.replication.throttled.replicas`) answers no records while the quota is
        spent, and its bytes count against the quota otherwise."""
        if not self._throttled(params, wanted, resolved):  # the usual case: in sync
            return self._read_all(params, wanted, resolved)
        throttle = self.leader_throttle
        assert throttle is not None
        replica = params.replica_id
        held = [p is not None and throttle.applies(w.topic, w.partition,
                                                   replica in p.state.isr)
                for w, p in zip(wanted, resolved, strict=True)]
        spent = throttle.quota.wait_s() > 0
        read_wanted: list[FetchPartition] = []
        read_resolved: list[Partition | None] = []
        slots: list[int | PartitionReadResult] = []
        for w, p, h in zip(wanted, resolved, held, strict=True):
            if h and spent:
                assert p is not None
                slots.append(PartitionReadResult(_NONE, p.high_watermark,
                                                 p.last_stable_offset, p.log_start_offset))
                continue
            slots.append(len(read_wanted))
            # A throttled partition reads in small steps, not a whole replica.fetch.max.bytes
            # (4 MiB by default: one such burst alone is four seconds of a 1 MB/s quota).
            read_wanted.append(replace(w, max_bytes=throttle.max_bytes(w.max_bytes))
                               if h else w)
            read_resolved.append(p)
        read, total, errors = self._read_all(params, read_wanted, read_resolved)
        out = [s if isinstance(s, PartitionReadResult) else read[s] for s in slots]
        if not spent:
            throttle.quota.record(sum(r.size for r, h in zip(out, held, strict=True) if h))
        return out, total, errors

    def _read_all(
        self, params: FetchParams, wanted: Sequence[FetchPartition],
        resolved: Sequence[Partition | None], remote: list[int] | None = None,
    ) -> tuple[list[PartitionReadResult], int, bool]:
        """Kafka's byte limits: each partition at most its `max_bytes`, the response at
        most `params.max_bytes`, except that the first partition with data returns at
        least one whole batch, so a batch bigger than the limits can still be consumed.

        A consumer's Fetch v11+ may read a follower; on the leader, a consumer with a rack
        may be sent to a preferred read replica instead (see the module's docstring).
        `errors` (the third value) also means "answer now": nothing to long-poll for."""
        total = 0
        errors = False
        out: list[PartitionReadResult] = []
        isolation = params.isolation
        max_bytes = params.max_bytes
        rl = self.remote_log
        rack = params.client_rack
        leader_only = rack is None
        selector = self.replica_selector if rack else None
        for w, p in zip(wanted, resolved, strict=True):
            if p is None:
                out.append(PartitionReadResult(_UNKNOWN_TP))
                errors = True
                continue
            try:
                p.check_epoch(w.current_leader_epoch, leader_only)
                if selector is not None and p.is_leader:
                    preferred = _preferred_replica(selector, rack or "", p, w.fetch_offset,
                                                   self.clock.now_ms())
                    if preferred >= 0:
                        out.append(PartitionReadResult(
                            _NONE, p.high_watermark, p.last_stable_offset,
                            p.log_start_offset, preferred_read_replica=preferred))
                        errors = True  # answered at once: the consumer moves there
                        continue
                info = p.read(w.fetch_offset, min(w.max_bytes, max_bytes - total), isolation,
                              total == 0, params.zero_copy)
            except OffsetOutOfRangeError:
                if (remote is not None and self.remote_log is not None
                        and p.log.config.remote_storage_enable
                        and w.fetch_offset < p.log_start_offset):
                    remote.append(len(out))  # tiered: read by _read_remote
                    out.append(PartitionReadResult(_NONE))
                    continue
                if (params.replica_id >= 0 and rl is not None
                        and p.log.config.remote_storage_enable
                        and w.fetch_offset < p.log_start_offset):
                    # A follower below our local start, in the remote log: it rebuilds
                    # its state from there (KIP-405; yak/cluster/replica_fetcher.py),
                    # once this leadership has read the remote log metadata (retriable).
                    epoch = p.leader_epoch if p.is_leader else None
                    if not rl.leader_ready(w.topic, w.partition, epoch):
                        out.append(PartitionReadResult(_STORAGE_ERROR))
                        errors = True
                        continue
                    start = rl.log_start_offset(w.topic, w.partition)
                    if start is not None and start <= w.fetch_offset:
                        out.append(PartitionReadResult(_MOVED_TO_TIERED, p.high_watermark,
                                                       p.last_stable_offset, start))
                        errors = True
                        continue
                out.append(PartitionReadResult(_OUT_OF_RANGE, p.high_watermark,
                                               p.last_stable_offset, p.log_start_offset))
                errors = True
                continue
            except KafkaError as e:
                code = int(e.code)
                out.append(PartitionReadResult(
                    code, current_leader=(p.state.leader, p.leader_epoch)
                    if code in (_NOT_LEADER, _FENCED_EPOCH) else None))
                errors = True
                continue
            total += info.size
            log_start = info.log_start_offset
            if rl is not None and p.log.config.remote_storage_enable:
                # Tiered: the whole log's start (the remote one), as Kafka answers; the
                # local one until a new leader has read the remote log metadata.
                remote_start = rl.log_start_offset(
                    w.topic, w.partition, leader_epoch=p.leader_epoch if p.is_leader else None)
                if remote_start is not None:
                    log_start = remote_start
            out.append(PartitionReadResult(_NONE, info.high_watermark, info.last_stable_offset,
                                           log_start, info.buffers, info.size,
                                           info.aborted_transactions))
        return out, total, errors

    async def _read_remote(
        self, params: FetchParams, wanted: Sequence[FetchPartition],
        resolved: Sequence[Partition | None], results: list[PartitionReadResult],
        slots: list[int], total: int,
    ) -> None:
        """Fill `results[i]` for the tiered partitions whose fetch offset is below the local
        log start (issue 25): from the remote log, after the local reads, within what is
        left of the response's byte budget. The remote log holds only records below the
        high watermark that nothing can change any more, so no order of effects applies."""
        rl = self.remote_log
        assert rl is not None
        committed = params.isolation is FetchIsolation.TXN_COMMITTED
        for i in slots:
            w, p = wanted[i], resolved[i]
            assert p is not None
            log_ = p.log
            hw = log_.high_watermark
            lso = min(log_.last_stable_offset, hw)
            # A new leader serves nothing remote before it has read the remote log
            # metadata for its leadership (KAFKA_STORAGE_ERROR, retriable): its copy as a
            # follower may predate a DeleteRecords its predecessor answered.
            epoch = p.leader_epoch if p.is_leader else None
            start = rl.log_start_offset(w.topic, w.partition, leader_epoch=epoch)
            low = log_.log_start_offset if start is None else start
            try:
                rr, aborted = await rl.read(
                    w.topic, w.partition, str(p.topic_id), log_, w.fetch_offset,
                    min(w.max_bytes, params.max_bytes - total), lso if committed else hw,
                    total == 0, committed, leader_epoch=epoch)
            except OffsetOutOfRangeError:
                results[i] = PartitionReadResult(_OUT_OF_RANGE, hw, lso, low)
                continue
            except KafkaError as e:
                results[i] = PartitionReadResult(int(e.code), hw, lso, low)
                continue
            total += rr.size
            results[i] = PartitionReadResult(_NONE, hw, lso, low, rr.buffers, rr.size, aborted)


def _preferred_replica(selector: ReadReplicaSelector, rack: str, p: Partition,
                       fetch_offset: int, now_ms: int) -> int:
    """Kafka's `findPreferredReadReplica`: the selector's choice among the leader and the
    in-sync followers whose logs hold `fetch_offset` (a follower out of the ISR may lag
    for ever); -1 when it is the leader itself. Per partition, never per record."""
    leader = p.node_id
    isr = p.state.isr
    candidates = [(node, f.log_end_offset, now_ms - f.last_caught_up_ms)
                  for node, f in p._followers.items()
                  if node in isr and f.log_start_offset <= fetch_offset <= f.log_end_offset]
    chosen = selector.select(rack, leader, candidates)
    return -1 if chosen == leader else chosen
