"""The transaction coordinator's log and leadership on `__transaction_state`, through the
partition layer.

`TopicTransactionLog` implements `yak.txn.log.TransactionLog`: an append is one record in
one uncompressed batch, appended with acks=all on the coordinator's behalf, and refused
(NOT_LEADER_OR_FOLLOWER) unless this broker leads the partition at the coordinator epoch
the coordinator loaded it with: the coordinator epoch is the partition's leader epoch, so
a deposed coordinator's late write can never land. A replay reads the partition up to its
log end, as Kafka's loader does (see `replay`: a new leader's high watermark can lag a
decision the old leader acknowledged).

`TransactionStateHost` keeps the coordinator's partitions in step with this broker's
leadership of `__transaction_state`. The topic is created on first use (the first
FindCoordinator or InitProducerId for a transactional id), as Kafka does, so brokers that
never see a transaction list no internal topic. On one broker, every partition is led
here: they are all loaded at start-up if the topic exists, or right after it is created.
In a cluster (issue 11) the partition layer's leadership changes call `on_election` /
`on_resignation`, as for `__consumer_offsets`.

Neither imports `yak.broker`: creating the topic is a callable the composition hands in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from yak.errors import ErrorCode, KafkaError, NotLeaderOrFollowerError, error_for_code
from yak.partition import AppendOrigin, FetchIsolation
from yak.protocol import records as batches
from yak.txn.log import Record
from yak.txn.records import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from yak.partition import ReplicaManager
    from yak.txn.coordinator import TransactionCoordinator

__all__ = ["TopicTransactionLog", "TransactionStateHost", "transaction_topic_configs"]

log = logging.getLogger(__name__)

_READ_CHUNK = 1 << 20
# Kafka bounds a `__transaction_state` append by the broker's request timeout (30 s).
APPEND_TIMEOUT_MS = 30_000


def transaction_topic_configs(segment_bytes: int, min_isr: int) -> dict[str, str]:
    """Kafka's `transactionTopicConfigs`."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": str(min_isr),
        "segment.bytes": str(segment_bytes),
    }


class TopicTransactionLog:
    """`TransactionLog` on the partitions of `__transaction_state`."""

    def __init__(
        self,
        replicas: ReplicaManager,
        topic_partitions: Callable[[str], int | None],
        create_topic: Callable[[str, int, Mapping[str, str]], Awaitable[object]],
        default_partitions: int,
        topic_configs: Mapping[str, str],
        timeout_ms: int = APPEND_TIMEOUT_MS,
    ) -> None:
        self._replicas = replicas
        self._topic_partitions = topic_partitions
        self._create_topic = create_topic
        self._configs = dict(topic_configs)
        self._timeout_ms = timeout_ms
        existing = topic_partitions(TRANSACTION_STATE_TOPIC)
        self._num_partitions = existing if existing is not None else default_partitions
        self._loaded_end: dict[int, int] = {}  # partition -> log end its last replay read

    @property
    def num_partitions(self) -> int:
        # The topic's own count once it exists (in a cluster the metadata arrives after
        # this adapter is built).
        existing = self._topic_partitions(TRANSACTION_STATE_TOPIC)
        return existing if existing is not None else self._num_partitions

    def exists(self) -> bool:
        return self._topic_partitions(TRANSACTION_STATE_TOPIC) is not None

    async def create(self) -> None:
        log.info("creating %s with %d partitions", TRANSACTION_STATE_TOPIC, self._num_partitions)
        await self._create_topic(TRANSACTION_STATE_TOPIC, self._num_partitions, self._configs)

    def leader_epoch(self, partition: int) -> int | None:
        """The leader epoch of a partition this broker leads (the coordinator epoch), else
        None."""
        p = self._replicas.get_partition(TRANSACTION_STATE_TOPIC, partition)
        if p is None or not p.is_leader:
            return None
        return p.leader_epoch

    def recovered_uncleanly(self, partition: int) -> bool:
        """Was the partition loaded after an unclean shutdown of this broker? (Then the
        transactions it holds Ongoing were open at a crash, and Yak aborts them.)"""
        p = self._replicas.get_partition(TRANSACTION_STATE_TOPIC, partition)
        return p is not None and p.recovered_uncleanly

    def crashed_leading(self, partition: int, leader_epoch: int) -> bool:
        """In a cluster: was this broker the partition's coordinator at `leader_epoch` when
        it stopped uncleanly, with nobody leading it since? Its log then holds records of
        that very leader term (one leader per epoch: they are its own). Only then were
        the transactions found Ongoing open at this coordinator's crash; after a failover
        (a new epoch) they belong to live producers, which a broker that merely crashed
        at some point before must not fence (Kafka leaves them to the producer or the
        timeout)."""
        p = self._replicas.get_partition(TRANSACTION_STATE_TOPIC, partition)
        return p is not None and p.recovered_uncleanly and p.latest_epoch == leader_epoch

    async def append(self, partition: int, record: Record, coordinator_epoch: int) -> None:
        if self.leader_epoch(partition) != coordinator_epoch:
            raise NotLeaderOrFollowerError(
                f"{TRANSACTION_STATE_TOPIC}-{partition} is not led here at epoch"
                f" {coordinator_epoch}"
            )
        key, value = record
        batch = batches.build_batch([batches.Record(key, value)])
        (result,) = await self._replicas.append_records(
            [(TRANSACTION_STATE_TOPIC, partition, memoryview(batch))],
            required_acks=-1,
            origin=AppendOrigin.COORDINATOR,
            timeout_ms=self._timeout_ms,
        )
        if result.error:
            raise error_for_code(result.error, result.error_message or "")

    async def replay(self, partition: int) -> list[Record]:
        """Every record up to the log end, not the high watermark (Kafka's
        `loadTransactionMetadata` reads to the log end too). A new leader's high
        watermark lags what the old leader had acknowledged: followers learn it from the
        old leader's next fetch response, and here it only moves again once followers
        fetch from the new leader with min.insync.replicas of them. A PrepareCommit that
        every in-sync replica has (so EndTxn answered success) may lie above it; loading
        to the high watermark then found the transaction still Ongoing, and the timeout
        sweep aborted a commit the producer had been told succeeded (issue 16, CI run
        seed 16). Records above the high watermark are in this leader's log, which the
        followers now copy: they become committed with the next write."""
        p = self._replicas.get_partition(TRANSACTION_STATE_TOPIC, partition)
        if p is None:
            return []
        out: list[Record] = []
        offset = p.log_start_offset
        end = p.log_end_offset
        self._loaded_end[partition] = end
        while offset < end:
            info = p.read(offset, _READ_CHUNK, FetchIsolation.LOG_END, True)
            data = b"".join(bytes(b) for b in info.buffers)
            if not data:
                break
            nxt = offset
            for pos, h in batches.iter_batches(data):
                nxt = h.next_offset
                if h.next_offset <= offset or h.is_control:
                    continue
                for r in batches.decode_records(batches.batch_bytes(data, pos, h)):
                    if r.key is not None and r.offset is not None and r.offset >= offset:
                        out.append((r.key, r.value))
            if nxt <= offset:
                break
            offset = nxt
        return out


    async def wait_loaded_committed(self, partition: int, coordinator_epoch: int) -> bool:
        end = self._loaded_end.get(partition, 0)
        while True:
            if self.leader_epoch(partition) != coordinator_epoch:
                return False
            p = self._replicas.get_partition(TRANSACTION_STATE_TOPIC, partition)
            if p is None:
                return False
            if p.high_watermark >= end:
                return True
            # Woken when the high watermark moves; look again at least every second (a
            # leadership change fails no watch here).
            watch = self._replicas.produce_purgatory.watch(TRANSACTION_STATE_TOPIC,
                                                           partition, end)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watch, 1.0)


class TransactionStateHost:
    """Loads the coordinator's partitions when this broker leads them."""

    def __init__(self, coordinator: TransactionCoordinator, txn_log: TopicTransactionLog) -> None:
        self.coordinator = coordinator
        self.txn_log = txn_log
        self._ready: asyncio.Future[None] | None = None

    async def start(self) -> None:
        await self.coordinator.start()
        if self.txn_log.exists():
            await self._load_led_partitions()

    async def stop(self) -> None:
        await self.coordinator.stop()

    async def _load_led_partitions(self) -> None:
        for partition in range(self.txn_log.num_partitions):
            epoch = self.txn_log.leader_epoch(partition)
            if epoch is not None and not self.coordinator.owns(partition):
                await self.coordinator.on_election(
                    partition, epoch, abort_ongoing=self.txn_log.recovered_uncleanly(partition))

    async def ensure_ready(self) -> ErrorCode:
        """Create `__transaction_state` if it does not exist yet and load its partitions;
        COORDINATOR_NOT_AVAILABLE (the client retries) if that failed. Concurrent callers
        share one attempt."""
        if self.txn_log.exists() and self._ready is None:
            return ErrorCode.none
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            try:
                if not self.txn_log.exists():
                    await self.txn_log.create()
                await self._load_led_partitions()
                self._ready.set_result(None)
            except (KafkaError, OSError) as e:
                log.error("cannot create %s: %s", TRANSACTION_STATE_TOPIC, e)
                self._ready.set_exception(e)
            ready, self._ready = self._ready, None
        else:
            ready = self._ready
        try:
            await asyncio.shield(ready)
        except (KafkaError, OSError):
            return ErrorCode.coordinator_not_available
        return ErrorCode.none
