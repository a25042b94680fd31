"""Replica fetchers: how a follower copies its leaders' logs (Kafka's ReplicaFetcherManager).

The broker's metadata publisher tells the `ReplicaFetcherManager` which partitions this
broker follows and who leads them (`follow(topic, partition, leader_id, leader_epoch)`,
`unfollow(topic, partition)`). Partitions are grouped by source broker (and spread over
`num.replica.fetchers` connections to it); each group is one asyncio task with one TCP
connection to the leader's inter-broker listener, sending one Fetch at a time with every
partition it copies:

- each partition asks from its log end offset, with the leader epoch it follows
  (`current_leader_epoch`: a leader that moved on answers FENCED_LEADER_EPOCH, one that has
  not yet heard UNKNOWN_LEADER_EPOCH) and the epoch of its last batch
  (`last_fetched_epoch`); the request also carries this broker's id and broker epoch
  (KIP-903 `replica_state`), which is how the leader knows a replica is fetching;
- the leader long-polls the request (`replica.fetch.wait.max.ms`) until it has new data, so
  an acks=all produce on the leader is followed at once by the fetch that copies it, and
  the next fetch (from the new log end) is what lets the leader's high watermark pass it;
- the answer is appended as it is (`ReplicaManager.append_as_follower`: the leader's offsets
  and epochs, producer state rebuilt from the batches), and the follower's high watermark
  becomes min(leader's, own log end);
- a `diverging_epoch` means this log has records the leader does not (a former leader's
  uncommitted tail): the follower truncates where the two agree (Kafka's
  `truncateOnFetchResponse`) and fetches again; OFFSET_OUT_OF_RANGE means the leader's log
  starts after ours ends (restart there: a wiped data dir rejoins this way, as an empty
  follower) or ends before ours (truncate to it, learnt with ListOffsets);
- on a tiered topic (issue 25), a follower below the leader's local log start (answered
  OFFSET_MOVED_TO_TIERED_STORAGE, or OFFSET_OUT_OF_RANGE with a log ending below the
  leader's start) does not copy the remote part: as Kafka's tier state machine does, it
  asks the leader's local start (ListOffsets EARLIEST_LOCAL_TIMESTAMP, -4) and restarts its
  log after the remote segment before it, with that segment's producer snapshot and leader
  epoch (`ReplicaManager.build_remote_log_aux_state`), then fetches from there. The remote
  reads run in a task of their own while the partition waits, so the other partitions
  fetched from the same leader go on;
- errors back the partition off for `replica.fetch.backoff.ms`; a broken or silent
  connection (`replica.socket.timeout.ms`) is closed and opened again, re-resolving the
  leader's address. The publisher's next `follow` with a newer epoch clears a back-off.

Data of a fetch answered under an older leadership than the one followed now is dropped.
A replica that is not in sync and that its topic names in
`follower.replication.throttled.replicas` is copied under the follower quota
(`replication_throttle.py`, KIP-73): left out of the fetches while the quota is spent.
This module is in the cluster layer: it reaches other brokers through
`yak.wire.KafkaConnection` (the Fetch frame hand-encoded, the response decoded by
`fetch_client_codec` with the records left as slices of the received frame) and the
partitions only through the ReplicaManager. Inter-broker security (TLS/SASL) plugs in as
the `Dialer` the composition hands in (plain TCP by default). Over 600 lines on purpose:
the fetch loop and its recoveries (truncation, out of range, the tiered rebuild) share the
per-partition state and are read together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from yak.errors import ErrorCode, KafkaError
from yak.protocol import kio_compat
from yak.protocol.fetch_client_codec import (
    FetchDecodeError,
    FetchRequestPartition,
    FetchRequestTopic,
    decode_fetch_response,
    encode_fetch_request,
)
from yak.wire import PLAIN, BrokerConnectionError, Dialer, KafkaConnection

if TYPE_CHECKING:
    from yak.cluster.replication_throttle import ReplicationThrottle
    from yak.partition import ReplicaManager
    from yak.protocol.fetch_codec import FetchPartitionResult

__all__ = ["FetcherConfig", "ReplicaFetcherManager", "Resolve"]

log = logging.getLogger(__name__)

# node id -> (host, port) of its inter-broker listener, or None if it is not known/live.
Resolve = Callable[[int], "tuple[str, int] | None"]

MAX_RESPONSE_BYTES = 256 << 20  # a frame announcing more is a broken peer
FETCH_VERSION = 15
LIST_OFFSETS_VERSION = 7
EARLIEST_LOCAL_VERSION = 8  # ListOffsets v8+: EARLIEST_LOCAL_TIMESTAMP (KIP-405)
LATEST_TIMESTAMP = -1
EARLIEST_LOCAL_TIMESTAMP = -4
_EMPTY = memoryview(b"")
_NONE = int(ErrorCode.none)
_OUT_OF_RANGE = int(ErrorCode.offset_out_of_range)
_MOVED_TO_TIERED = int(ErrorCode.offset_moved_to_tiered_storage)


@dataclass(frozen=True)
class FetcherConfig:
    """Kafka's replica.* settings, and who this broker is."""

    node_id: int
    broker_epoch: Callable[[], int] = lambda: -1
    fetch_wait_max_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 4 << 20  # replica.fetch.max.bytes: Yak's default (yak/settings.py)
    fetch_response_max_bytes: int = 10 << 20
    fetch_backoff_ms: int = 1000
    socket_timeout_ms: int = 30_000
    num_fetchers: int = 1
    fetch_version: int = FETCH_VERSION

    @classmethod
    def from_broker_config(cls, config: Any, broker_epoch: Callable[[], int] = lambda: -1
                           ) -> FetcherConfig:
        """From a `yak.config.BrokerConfig` (duck-typed: the cluster layer does not import
        the loader)."""
        return cls(
            node_id=config.node_id,
            broker_epoch=broker_epoch,
            fetch_wait_max_ms=config.replica_fetch_wait_max_ms,
            fetch_min_bytes=config.replica_fetch_min_bytes,
            fetch_max_bytes=config.replica_fetch_max_bytes,
            fetch_response_max_bytes=config.replica_fetch_response_max_bytes,
            fetch_backoff_ms=config.replica_fetch_backoff_ms,
            socket_timeout_ms=config.replica_socket_timeout_ms,
            num_fetchers=config.num_replica_fetchers,
        )


class _PartitionFetch:
    """One followed partition: the leadership it follows and whether it is backing off."""

    __slots__ = ("topic", "partition", "key", "leader_epoch", "delayed_until", "lag",
                 "last_error", "in_sync", "rebuild", "seen")

    def __init__(self, topic: str, partition: int, leader_epoch: int) -> None:
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)  # in `_SourceFetcher.partitions`: built once
        self.leader_epoch = leader_epoch
        self.delayed_until = 0.0
        self.lag = 0
        self.last_error = _NONE
        self.in_sync = False  # caught up with the leader's high watermark at the last fetch
        # Rebuilding from the remote log (issue 25): the partition waits until it is done.
        self.rebuild: asyncio.Task[None] | None = None
        # The last answer taken without error: (partition, leader's high watermark, leader's
        # log start, our log end after it). An answer with no records that repeats it
        # changes nothing, so it is not applied again (see `_SourceFetcher._take`).
        self.seen: tuple[Any, int, int, int] | None = None

    def stop_rebuild(self) -> None:
        if self.rebuild is not None:
            self.rebuild.cancel()
            self.rebuild = None


class ReplicaFetcherManager:
    # Set by the composition: told the record bytes each fetch copied (reassignment metrics).
    copied: Callable[[str, int, int], None] | None = None

    def __init__(self, replica_manager: ReplicaManager, resolve: Resolve,
                 config: FetcherConfig, dialer: Dialer | None = None,
                 throttle: ReplicationThrottle | None = None) -> None:
        self.replica_manager = replica_manager
        self.throttle = throttle  # KIP-73's follower quota (replication_throttle.py)
        self.resolve = resolve
        self.config = config
        self.dialer = dialer or PLAIN
        self._fetchers: dict[tuple[int, int], _SourceFetcher] = {}
        self._assigned: dict[tuple[str, int], tuple[int, int]] = {}
        self._retired: set[_SourceFetcher] = set()  # shut down, task not yet finished
        self._stopped = False
        replica_manager.follower_lags = self.lags  # for the broker's metrics

    # ------------------------------------------------------------------ the publisher's API

    def follow(self, topic: str, partition: int, leader_id: int, leader_epoch: int) -> None:
        """Copy `topic-partition` from `leader_id` under `leader_epoch` (called again on
        every change of leadership; the same leadership again is a no-op)."""
        if self._stopped:
            return
        if leader_id < 0 or leader_id == self.config.node_id:
            self.unfollow(topic, partition)
            return
        tp = (topic, partition)
        key = (leader_id, self._fetcher_id(topic, partition))
        current = self._assigned.get(tp)
        if current is not None and current != key:
            self._remove(tp, current)
        fetcher = self._fetchers.get(key)
        if fetcher is None:
            fetcher = _SourceFetcher(self, leader_id, key[1])
            self._fetchers[key] = fetcher
        self._assigned[tp] = key
        fetcher.add(topic, partition, leader_epoch)

    def unfollow(self, topic: str, partition: int) -> None:
        """Stop copying `topic-partition` (this broker leads it now, or no longer hosts it)."""
        tp = (topic, partition)
        key = self._assigned.pop(tp, None)
        if key is not None:
            self._remove(tp, key)

    def _remove(self, tp: tuple[str, int], key: tuple[int, int]) -> None:
        fetcher = self._fetchers.get(key)
        if fetcher is None:
            return
        fetcher.remove(tp)
        if not fetcher.partitions:
            del self._fetchers[key]
            fetcher.shutdown()
            # Its cancelled task still has to run to its end: `stop` awaits it, so the loop
            # never closes on a pending fetcher task ("Task was destroyed but it is pending").
            self._retired.add(fetcher)
            fetcher._task.add_done_callback(lambda _t, f=fetcher: self._retired.discard(f))

    def _fetcher_id(self, topic: str, partition: int) -> int:
        n = self.config.num_fetchers
        return 0 if n <= 1 else (zlib.crc32(topic.encode()) * 31 + partition) % n

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        self._stopped = False

    async def stop(self) -> None:
        self._stopped = True
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        self._assigned.clear()
        for f in fetchers:
            f.shutdown()
        for f in [*fetchers, *self._retired]:
            await f.wait_closed()
        self._retired.clear()

    # ------------------------------------------------------------------ observability

    def followed(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) -> (leader id, leader epoch) of every followed partition."""
        out = {}
        for (leader, _), f in self._fetchers.items():
            for tp, pf in f.partitions.items():
                out[tp] = (leader, pf.leader_epoch)
        return out

    def lags(self) -> dict[tuple[str, int], int]:
        """Per followed partition: the leader's high watermark minus this log end at the
        last fetch (Kafka's follower ConsumerLag metric)."""
        return {tp: pf.lag for f in self._fetchers.values() for tp, pf in f.partitions.items()}

    def max_lag(self) -> int:
        return max(self.lags().values(), default=0)


class _SourceFetcher:
    """All the partitions this broker copies from one leader (one connection)."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int, fetcher_id: int
                 ) -> None:
        self.manager = manager
        self.rm = manager.replica_manager
        self.cfg = manager.config
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.partitions: dict[tuple[str, int], _PartitionFetch] = {}
        self._client_id = f"yak-replica-{self.cfg.node_id}"
        # A long poll's answer may take the leader's wait on top of the socket timeout.
        self._request_timeout_s = (self.cfg.socket_timeout_ms + self.cfg.fetch_wait_max_ms) / 1000
        self._changed = asyncio.Event()
        self._conn: KafkaConnection | None = None
        self._down_logged = False
        # For metrics and diagnosis: fetch round trips, bytes copied, time waiting for them.
        self.rounds = 0
        self.bytes = 0
        self.wait_s = 0.0
        self._shut = False
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{leader_id}-{fetcher_id}")

    def add(self, topic: str, partition: int, leader_epoch: int) -> None:
        tp = (topic, partition)
        pf = self.partitions.get(tp)
        if pf is None:
            self.partitions[tp] = _PartitionFetch(topic, partition, leader_epoch)
        elif leader_epoch != pf.leader_epoch:
            pf.leader_epoch = leader_epoch
            pf.stop_rebuild()  # it was for the old leadership
            pf.delayed_until = 0.0  # a new leadership: try at once
        else:
            return
        self._changed.set()

    def remove(self, tp: tuple[str, int]) -> None:
        pf = self.partitions.pop(tp, None)
        if pf is not None:
            pf.stop_rebuild()
            self._changed.set()

    def shutdown(self) -> None:
        log.info("replica fetcher from broker %d: %d fetches, %d bytes, %.1f s waiting",
                 self.leader_id, self.rounds, self.bytes, self.wait_s)
        # The flag as well as the cancel: Python 3.11's asyncio.wait_for can swallow a
        # cancellation that meets its inner call's completion (gh-86296), and a fetcher
        # whose last partition left would then wait for a change forever.
        self._shut = True
        self._changed.set()
        self._task.cancel()
        for pf in self.partitions.values():
            pf.stop_rebuild()
        self._close()

    async def wait_closed(self, timeout_s: float = 5.0) -> None:
        with contextlib.suppress(asyncio.CancelledError, TimeoutError, Exception):
            await asyncio.wait_for(asyncio.shield(self._task), timeout_s)

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        backoff = self.cfg.fetch_backoff_ms / 1000
        try:
            while not self._shut:
                now = time.monotonic()
                ready = [pf for pf in self.partitions.values() if pf.delayed_until <= now]
                if not ready:
                    wake = min((pf.delayed_until for pf in self.partitions.values()
                                if pf.rebuild is None), default=None)
                    await self._wait_changed(None if wake is None else wake - now)
                    continue
                if (self._conn is None or not self._conn.is_open) \
                        and not await self._connect():
                    self._delay(ready, backoff)
                    continue
                try:
                    await self._fetch(ready)
                except (BrokerConnectionError, FetchDecodeError) as e:
                    self._connection_failed(e)
                    self._delay(ready, backoff)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("replica fetcher for broker %d failed", self.leader_id)
        finally:
            self._close()

    async def _wait_changed(self, timeout: float | None) -> None:
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # not wait_for: 3.11's drops a cancel
                await self._changed.wait()

    def _delay(self, partitions: list[_PartitionFetch], seconds: float) -> None:
        until = time.monotonic() + seconds
        for pf in partitions:
            pf.delayed_until = until

    async def _connect(self) -> bool:
        """(Re)open the connection to the leader's address as resolved now."""
        address = self.manager.resolve(self.leader_id)
        if address is None:
            self._report_down(f"broker {self.leader_id} has no known address")
            return False
        conn = self._conn
        if conn is None or (conn.host, conn.port) != tuple(address):
            self._close()
            conn = self._conn = KafkaConnection(
                address[0], address[1], client_id=f"yak-replica-{self.cfg.node_id}",
                dialer=self.manager.dialer, timeout_s=self.cfg.socket_timeout_ms / 1000,
                max_frame=MAX_RESPONSE_BYTES)
        try:
            await conn.open()
        except KafkaError as e:  # unreachable, or the login refused (SASL)
            self._report_down(f"cannot connect to broker {self.leader_id}: {e}")
            return False
        if self._down_logged:
            log.info("replica fetcher connected to broker %d at %s:%d", self.leader_id,
                     *address)
        self._down_logged = False
        return True

    def _report_down(self, message: str) -> None:
        """Logged once per outage, not once per retry."""
        if not self._down_logged:
            log.warning("replica fetcher: %s; retrying every %d ms", message,
                        self.cfg.fetch_backoff_ms)
            self._down_logged = True

    def _connection_failed(self, e: BaseException) -> None:
        self._report_down(f"fetch from broker {self.leader_id} failed: {e!r}")
        self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # ------------------------------------------------------------------ one fetch

    async def _fetch(self, ready: list[_PartitionFetch]) -> None:
        """One round trip: ask for every ready partition, apply what comes back. Once per
        produce on the leader in the steady state, so the per-fetch and per-partition work
        is kept to plain reads: the request's fixed part is built once (the codec keeps it),
        answers are matched per topic and then by partition index, and answers without
        error are applied by plain calls."""
        cfg = self.cfg
        rm = self.rm
        # topic name -> (the request's topic, its partitions by index: (fetch, epoch))
        by_topic: dict[str, tuple[FetchRequestTopic, dict[int, tuple[_PartitionFetch, int]]]]
        by_topic = {}
        request: list[FetchRequestTopic] = []  # by_topic's request topics, in order
        throttle = self.manager.throttle
        throttled: set[tuple[str, int]] = set()
        held_back = False
        max_bytes = cfg.fetch_max_bytes
        for pf in ready:
            topic = pf.topic
            p = rm.get_partition(topic, pf.partition)
            if p is None or p.is_leader:
                continue  # the publisher has not caught up with this change yet
            part_max = max_bytes
            if throttle is not None and throttle.applies(topic, pf.partition, pf.in_sync):
                wait = throttle.quota.wait_s()
                if wait > 0:  # the quota is spent: this partition waits for it to refill
                    self._delay([pf], wait)
                    held_back = True
                    continue
                throttled.add((topic, pf.partition))
                part_max = throttle.max_bytes(max_bytes)
            entry = by_topic.get(topic)
            if entry is None:
                entry = by_topic[topic] = (FetchRequestTopic(p.topic_id, topic, []), {})
                request.append(entry[0])
            t, sent = entry
            if t.topic_id is not p.topic_id and t.topic_id != p.topic_id:
                continue  # another incarnation of the topic: asked once the publisher settles
            t.partitions.append(FetchRequestPartition(
                pf.partition, p.log_end_offset, pf.leader_epoch, p.latest_epoch,
                p.log_start_offset, part_max))
            sent[pf.partition] = (pf, pf.leader_epoch)
        if not by_topic:
            if not held_back:
                self._delay(ready, cfg.fetch_backoff_ms / 1000)
            return
        conn = self._conn
        assert conn is not None
        cid = conn.next_correlation_id()
        frame = encode_fetch_request(
            cfg.fetch_version, cid, self._client_id,
            cfg.node_id, cfg.broker_epoch(), cfg.fetch_wait_max_ms, cfg.fetch_min_bytes,
            cfg.fetch_response_max_bytes, request)
        sent_at = time.monotonic()
        body = await conn.request_frame(frame, cid, self._request_timeout_s)
        self.rounds += 1
        self.bytes += len(body)
        self.wait_s += time.monotonic() - sent_at
        response = decode_fetch_response(cfg.fetch_version, body)
        if response.error_code != _NONE:
            log.info("fetch from broker %d failed: %s", self.leader_id,
                     ErrorCode(response.error_code).name)
            self._delay(ready, cfg.fetch_backoff_ms / 1000)
            return
        # The answers' topics are named by id from v13 on: one lookup per topic.
        by_id = cfg.fetch_version >= 13
        by_key: dict[Any, dict[int, tuple[_PartitionFetch, int]]] = {}
        for name, (t, sent) in by_topic.items():  # (a loop: a comprehension is a call)
            by_key[t.topic_id if by_id else name] = sent
        partitions = self.partitions
        copied = self.manager.copied
        for t in response.topics:
            sent = by_key.get(t.topic_id if by_id else t.name)
            if sent is None:
                continue
            for r in t.partitions:
                entry = sent.get(r.partition_index)
                if entry is None:
                    continue
                pf, epoch = entry
                if partitions.get(pf.key) is not pf or pf.leader_epoch != epoch:
                    continue  # followed differently since the request left: drop it
                if throttled and pf.key in throttled:
                    throttle.quota.record(r.records_size)  # type: ignore[union-attr]
                if r.records_size and copied is not None:  # metrics, issue 23
                    copied(pf.topic, pf.partition, r.records_size)
                if r.error_code == _NONE and r.diverging_epoch is None:
                    self._take(pf, epoch, r)  # the steady state: no coroutine per partition
                else:
                    await self._partition_result(pf, epoch, r)

    def _take(self, pf: _PartitionFetch, epoch: int, r: FetchPartitionResult) -> None:
        """Apply an answer without error: append its records (if any) and take the
        leader's high watermark and log start offset. Per partition per response, so it
        is kept to the least: an answer with no records whose high watermark and log
        start are those of the last one taken, on a log that has not moved since, would
        change nothing (the follower's high watermark is min(leader's, own log end) and
        only advances; the log start follows the same min) and is skipped; at 100 B most
        partitions of most responses are such."""
        rm = self.rm
        hw, start = r.high_watermark, r.log_start_offset
        try:
            if r.records_size:
                p = rm.apply_follower_fetch(pf.topic, pf.partition, epoch, r.records[0], hw,
                                            start)
            else:
                p = rm.follower_partition(pf.topic, pf.partition, epoch)
                seen = pf.seen
                if seen is not None and seen[0] is p and seen[1] == hw and seen[2] == start \
                        and seen[3] == p.log_end_offset:
                    return  # lag, in_sync and last_error are as the last answer left them
                # Nothing to append: the leader's high watermark and log start only.
                rm.apply_follower_fetch(pf.topic, pf.partition, epoch, _EMPTY, hw, start)
        except KafkaError as e:
            log.warning("%s-%d: replication from broker %d failed: %s", pf.topic,
                        pf.partition, self.leader_id, e)
            self._failed(pf, int(e.code))
            return
        end = p.log_end_offset
        pf.seen = (p, hw, start, end)
        lag = hw - end
        pf.lag = lag if lag > 0 else 0
        pf.in_sync = lag <= 0
        if pf.last_error != _NONE:
            log.info("%s-%d: fetching from broker %d again", pf.topic, pf.partition,
                     self.leader_id)
            pf.last_error = _NONE

    async def _partition_result(self, pf: _PartitionFetch, epoch: int,
                                r: FetchPartitionResult) -> None:
        """An answer `_take` does not apply: an error, or a diverging epoch."""
        code = r.error_code
        pf.seen = None
        try:
            if code == _NONE:  # a diverging epoch: answers without one went to `_take`
                self._truncate_diverging(pf, epoch, r.diverging_epoch)
                return
            if code == _OUT_OF_RANGE:
                await self._out_of_range(pf, epoch, r)
                return
            if code == _MOVED_TO_TIERED:
                self._start_rebuild(pf, epoch)
                return
        except KafkaError as e:
            code = int(e.code)
            log.warning("%s-%d: replication from broker %d failed: %s", pf.topic,
                        pf.partition, self.leader_id, e)
        self._failed(pf, code)

    def _failed(self, pf: _PartitionFetch, code: int) -> None:
        """The partition's answer was an error (or applying it failed): back it off."""
        if code != pf.last_error:
            log.info("%s-%d: broker %d answered %s; retrying in %d ms", pf.topic,
                     pf.partition, self.leader_id, _name(code), self.cfg.fetch_backoff_ms)
        pf.last_error = code
        pf.seen = None
        self._delay([pf], self.cfg.fetch_backoff_ms / 1000)

    def _truncate_diverging(self, pf: _PartitionFetch, epoch: int,
                            diverging: tuple[int, int]) -> None:
        """Kafka's getOffsetTruncationState for a diverging epoch (leader_epoch E, end
        offset O on the leader): if this log has E, it agrees with the leader up to
        min(O, where E ends here); if its largest epoch below E is E' < E, everything after
        E' ends is not the leader's: truncate there and let the next fetch check again."""
        leader_epoch, leader_end = diverging
        p = self.rm.follower_partition(pf.topic, pf.partition, epoch)
        mine, my_end = p.end_offset_for_epoch(leader_epoch)
        if mine < 0:
            target = min(leader_end, p.log_end_offset)
        elif mine == leader_epoch:
            target = min(leader_end, my_end)
        else:
            target = min(my_end, p.log_end_offset)
        self.rm.truncate(pf.topic, pf.partition, epoch, target)

    async def _out_of_range(self, pf: _PartitionFetch, epoch: int,
                            r: FetchPartitionResult) -> None:
        """The leader has no records at our log end: either its log starts after ours ends
        (restart ours there), or it ends before ours (truncate to its end)."""
        p = self.rm.follower_partition(pf.topic, pf.partition, epoch)
        leader_start = r.log_start_offset
        if leader_start >= 0 and p.log_end_offset < leader_start:
            if self.rm.tiered_follower(pf.topic, pf.partition):
                self._start_rebuild(pf, epoch)  # below the leader's local start: issue 25
                return
            self.rm.truncate_fully_and_start_at(pf.topic, pf.partition, epoch, leader_start)
            return
        found = await self._leader_offset(pf, epoch, LATEST_TIMESTAMP)
        leader_end = None if found is None else found[0]
        if leader_end is None:
            self._delay([pf], self.cfg.fetch_backoff_ms / 1000)
            return
        if p.log_end_offset > leader_end:
            self.rm.truncate(pf.topic, pf.partition, epoch, leader_end)
        elif leader_start >= 0:
            # Within the leader's range and still refused: this log's epochs are older than
            # any the leader has, so nothing here can be matched with it. Copy it afresh.
            log.warning("%s-%d: no common epoch with broker %d's log; copying it from %d",
                        pf.topic, pf.partition, self.leader_id, leader_start)
            self.rm.truncate_fully_and_start_at(pf.topic, pf.partition, epoch, leader_start)

    def _start_rebuild(self, pf: _PartitionFetch, epoch: int) -> None:
        """Rebuild a tiered partition's log from the remote log (see the module's
        docstring) in a task of its own; the partition is not fetched meanwhile."""
        if pf.rebuild is not None and not pf.rebuild.done():
            return
        pf.delayed_until = float("inf")
        pf.rebuild = asyncio.get_running_loop().create_task(
            self._rebuild(pf, epoch), name=f"replica-rebuild-{pf.topic}-{pf.partition}")

    async def _rebuild(self, pf: _PartitionFetch, epoch: int) -> None:
        ok = False
        try:
            found = await self._leader_offset(pf, epoch, EARLIEST_LOCAL_TIMESTAMP)
            if found is not None:
                await self.rm.build_remote_log_aux_state(pf.topic, pf.partition, epoch, *found)
                ok = True
        except asyncio.CancelledError:
            raise
        except KafkaError as e:
            log.warning("%s-%d: rebuilding from the remote log to follow broker %d failed:"
                        " %s; retrying in %d ms", pf.topic, pf.partition, self.leader_id, e,
                        self.cfg.fetch_backoff_ms)
        except Exception:
            log.exception("%s-%d: rebuilding from the remote log failed", pf.topic,
                          pf.partition)
        if self.partitions.get((pf.topic, pf.partition)) is pf and pf.leader_epoch == epoch:
            pf.rebuild = None
            pf.delayed_until = 0.0 if ok else time.monotonic() + self.cfg.fetch_backoff_ms / 1000
            self._changed.set()

    async def _leader_offset(self, pf: _PartitionFetch, epoch: int, timestamp: int
                             ) -> tuple[int, int] | None:
        """ListOffsets as a replica: (offset, its leader epoch) for LATEST_TIMESTAMP (the
        leader's log end) or EARLIEST_LOCAL_TIMESTAMP (its local log start); None if the
        leader refused."""
        v = EARLIEST_LOCAL_VERSION if timestamp == EARLIEST_LOCAL_TIMESTAMP \
            else LIST_OFFSETS_VERSION
        mod = kio_compat.schema_module("list_offsets", v, "request")
        req = kio_compat.build(
            kio_compat.request_class(2, v), replica_id=self.cfg.node_id, isolation_level=0,
            topics=(mod.ListOffsetsTopic(name=pf.topic, partitions=(
                kio_compat.build(mod.ListOffsetsPartition, partition_index=pf.partition,
                                 current_leader_epoch=epoch, timestamp=timestamp,
                                 max_num_offsets=1),)),))
        conn = self._conn
        if conn is None:
            raise BrokerConnectionError(f"broker {self.leader_id}: the connection was closed")
        resp = await conn.request(req, self.cfg.socket_timeout_ms / 1000)
        for t in resp.topics:
            for part in t.partitions:
                if part.error_code == ErrorCode.none and part.offset >= 0:
                    return int(part.offset), int(part.leader_epoch)
                log.info("%s-%d: ListOffsets on broker %d answered %s", pf.topic,
                         pf.partition, self.leader_id, part.error_code.name)
        return None


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
