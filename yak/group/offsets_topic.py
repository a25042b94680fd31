"""`OffsetsLog` on the internal compacted topic `__consumer_offsets`, through the partition layer.

The group coordinator only sees `OffsetsLog`; this adapter, built by the broker's
composition (`yak.broker.compose`), implements it with the ReplicaManager: an append is one
RecordBatch (built with the storage format's own builder) appended with acks=all on the
coordinator's behalf, and a replay reads the partition back up to its log end. It never
imports `yak.broker`; the one thing it needs from above, creating the topic, is handed in.

The topic is created on first use, as Kafka does, so brokers that never see a consumer
group do not list an internal topic. Its partition count is `offsets.topic.num.partitions`
(Kafka's default of 50, which keeps the group -> partition mapping identical to Kafka's) or,
if the topic already exists, whatever it was created with.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from yak.errors import error_for_code
from yak.group.offsets_log import Record
from yak.partition import AppendOrigin, FetchIsolation
from yak.protocol import records as batches

if TYPE_CHECKING:
    from yak.partition import Partition, ReplicaManager

__all__ = ["OFFSETS_TOPIC", "TopicOffsetsLog", "offsets_topic_configs"]

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
_READ_CHUNK = 1 << 20


def offsets_topic_configs(segment_bytes: int) -> dict[str, str]:
    """Kafka's configs for `__consumer_offsets` (`offsets.topic.segment.bytes`)."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "segment.bytes": str(segment_bytes),
    }


class TopicOffsetsLog:
    """`OffsetsLog` on the partitions of `__consumer_offsets`."""

    def __init__(
        self,
        replicas: ReplicaManager,
        topic_partitions: Callable[[str], int | None],
        create_topic: Callable[[str, int, Mapping[str, str]], Awaitable[object]],
        default_partitions: int,
        topic_configs: Mapping[str, str],
        commit_timeout_ms: int = 5000,
    ) -> None:
        self._replicas = replicas
        self._topic_partitions = topic_partitions
        self._create_topic = create_topic
        self._configs = dict(topic_configs)
        self._timeout_ms = commit_timeout_ms
        self._open: dict[int, dict[int, list[Record]]] = {}
        existing = topic_partitions(OFFSETS_TOPIC)
        self._num_partitions = existing if existing is not None else default_partitions

    @property
    def num_partitions(self) -> int:
        # The topic's own count once it exists (in a cluster the metadata arrives after
        # this adapter is built).
        existing = self._topic_partitions(OFFSETS_TOPIC)
        return existing if existing is not None else self._num_partitions

    async def ensure_topic(self) -> None:
        """Create the topic if it does not exist yet (first use, or FindCoordinator)."""
        if self._topic_partitions(OFFSETS_TOPIC) is None:
            log.info("creating %s with %d partitions", OFFSETS_TOPIC, self._num_partitions)
            await self._create_topic(OFFSETS_TOPIC, self._num_partitions, self._configs)

    async def append(
        self, partition: int, records: Sequence[Record], producer: tuple[int, int] | None = None,
        on_appended: Callable[[], None] | None = None,
    ) -> None:
        await self.ensure_topic()
        recs = [batches.Record(k, v) for k, v in records]
        if producer is None:
            batch = batches.build_batch(recs)
        else:  # a TxnOffsetCommit: part of the producer's transaction (Kafka: no sequence)
            batch = batches.build_batch(recs, producer_id=producer[0],
                                        producer_epoch=producer[1], transactional=True)
        # The local append and the wait for the ISR are two steps here (append_records
        # joins them) so that `on_appended` runs between them: a marker written while this
        # batch waits for its replicas must find what the caller staged.
        result = self._replicas.append_local(OFFSETS_TOPIC, partition, memoryview(batch), -1,
                                             AppendOrigin.COORDINATOR)
        if not result.error:
            if on_appended is not None:
                on_appended()
            await self._replicas.wait_for_acks([result], self._timeout_ms)
        if result.error:
            raise error_for_code(result.error, result.error_message or "")

    def replay(self, partition: int) -> Iterable[Record]:
        p = self._replicas.get_partition(OFFSETS_TOPIC, partition)
        self._open[partition] = {}
        if p is None:
            return []
        return _read_all(p, self._open[partition])

    def open_transactions(self, partition: int) -> Mapping[int, Sequence[Record]]:
        return self._open.get(partition, {})


def _read_all(p: Partition, pending: dict[int, list[Record]]) -> Iterator[Record]:
    """Every committed record of the partition in order. Transactional offset commits are
    held back until their commit marker and dropped on an abort marker, as Kafka's
    loader does; those still open at the end (left in `pending`) belong to an unfinished
    transaction, whose coordinator will write its marker again: the group coordinator
    keeps them pending until then. A later plain commit of the same key wins over a
    transaction committed after it (log order, as Kafka compares offsets)."""
    offset = p.log_start_offset
    while offset < p.log_end_offset:
        info = p.read(offset, _READ_CHUNK, FetchIsolation.LOG_END, True)
        data = b"".join(bytes(b) for b in info.buffers)
        if not data:
            break
        last_next = offset
        for pos, h in batches.iter_batches(data):
            last_next = h.next_offset
            if h.next_offset <= offset:
                continue
            recs = batches.decode_records(batches.batch_bytes(data, pos, h))
            if h.is_control:
                for r in recs:
                    committed = r.key is not None and struct.unpack_from(">hh", r.key)[1] == 1
                    held = pending.pop(h.producer_id, [])
                    if committed:
                        yield from held
                continue
            pairs = [(r.key or b"", r.value) for r in recs if r.key is not None]
            if h.is_transactional:
                pending.setdefault(h.producer_id, []).extend(pairs)
            else:
                if pending:
                    keys = {k for k, _ in pairs}
                    for pid, held in pending.items():
                        pending[pid] = [kv for kv in held if kv[0] not in keys]
                yield from pairs
        if last_next <= offset:
            break
        offset = last_next

