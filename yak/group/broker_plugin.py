"""Attaches the group coordinator to a broker (called by `yak.broker.server` at start-up).

This module is the seam between the two layers: it never imports `yak.broker` (the
broker object arrives as an argument and is used through the few attributes named
in `_BrokerLike`), and it implements `OffsetsLog` on a real partition log of the
internal compacted topic `__consumer_offsets` with the storage layer's own
RecordBatch builder, so committed offsets are ordinary log records.

The topic is created on first use, as Kafka does, so brokers that never see a
consumer group do not list an internal topic. Its partition count is
`offsets.topic.num.partitions` (Kafka's default of 50, which keeps the group ->
partition mapping identical to Kafka's) or, if the topic already exists, whatever
it was created with.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from yak.errors import UnknownTopicOrPartitionError
from yak.group.coordinator import GroupConfig, GroupCoordinator
from yak.group.offsets_log import Record
from yak.protocol import records as batches

__all__ = ["attach", "TopicOffsetsLog", "OFFSETS_TOPIC", "group_config_from"]

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "compression.type": "producer",
    "segment.bytes": "104857600",
}
_READ_CHUNK = 1 << 20
_LEADER_EPOCH = 0


class _BrokerLike(Protocol):
    config: Any
    topics: Any
    purgatory: Any
    group_coordinator: Any

    def add_service(self, name: str, start: Any, stop: Any) -> None: ...


class TopicOffsetsLog:
    """`OffsetsLog` on the partitions of `__consumer_offsets`."""

    def __init__(self, topics: Any, purgatory: Any, default_partitions: int) -> None:
        self._topics = topics
        self._purgatory = purgatory
        info = topics.get(OFFSETS_TOPIC)
        self._num_partitions = info.partitions if info is not None else default_partitions

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def _ensure_topic(self) -> None:
        if self._topics.get(OFFSETS_TOPIC) is None:
            log.info("creating %s with %d partitions", OFFSETS_TOPIC, self._num_partitions)
            self._topics.create(OFFSETS_TOPIC, self._num_partitions, dict(OFFSETS_TOPIC_CONFIGS))

    async def append(self, partition: int, records: Sequence[Record]) -> None:
        self._ensure_topic()
        plog = self._topics.partition_log(OFFSETS_TOPIC, partition)
        if plog is None:
            raise UnknownTopicOrPartitionError(f"{OFFSETS_TOPIC}-{partition} has no log")
        batch = batches.build_batch([batches.Record(k, v) for k, v in records])
        result = plog.append_as_leader(batch, _LEADER_EPOCH)
        plog.update_high_watermark(result.last_offset + 1)
        self._purgatory.notify(OFFSETS_TOPIC, partition)

    def replay(self, partition: int) -> Iterable[Record]:
        plog = self._topics.partition_log(OFFSETS_TOPIC, partition)
        if plog is None:
            return []
        return _read_all(plog)


def _read_all(plog: Any) -> Iterator[Record]:
    """Every committed record of the log in order. Transactional offset commits are
    held back until their commit marker and dropped on an abort marker, as Kafka's
    loader does; those still open at the end belong to an unfinished transaction,
    whose coordinator will write its marker again, so they are not applied."""
    offset = plog.log_start_offset
    pending: dict[int, list[Record]] = {}
    while offset < plog.log_end_offset:
        data = plog.read(offset, _READ_CHUNK).to_bytes()
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
                yield from pairs
        if last_next <= offset:
            break
        offset = last_next


def group_config_from(config: Any) -> GroupConfig:
    raw = getattr(config, "raw", {}) or {}
    return GroupConfig(
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        min_session_timeout_ms=config.group_min_session_timeout_ms,
        max_session_timeout_ms=config.group_max_session_timeout_ms,
        max_group_size=getattr(config, "group_max_size", 2**31 - 1),
        offsets_retention_ms=config.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=getattr(
            config, "offsets_retention_check_interval_ms", 600_000
        ),
        offset_metadata_max_bytes=getattr(config, "offset_metadata_max_bytes", 4096),
        consumer_session_timeout_ms=int(raw.get("group.consumer.session.timeout.ms", 45_000)),
        consumer_heartbeat_interval_ms=int(raw.get("group.consumer.heartbeat.interval.ms", 5_000)),
    )


def attach(broker: _BrokerLike) -> None:
    offsets_log = TopicOffsetsLog(
        broker.topics, broker.purgatory, broker.config.offsets_topic_num_partitions
    )
    topics = broker.topics

    def resolve(name: str) -> tuple[Any, int] | None:
        info = topics.get(name)
        return None if info is None else (info.topic_id, info.partitions)

    coordinator = GroupCoordinator(
        offsets_log,
        group_config_from(broker.config),
        topic_resolver=resolve,
        topic_lister=lambda: [t.name for t in topics.topics()],
    )
    broker.group_coordinator = coordinator
    broker.add_service("group coordinator", coordinator.start, coordinator.stop)
