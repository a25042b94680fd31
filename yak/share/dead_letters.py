"""The dead-letter topic of a share group (issue 24, KIP-1191's semantics): records a
share partition archived because their delivery count reached the limit, or because a
consumer rejected them, are copied to the topic named by the group config
`errors.deadletterqueue.topic.name`.

Each copy keeps the record's key, value, timestamp and headers and gains headers naming
the group, the source topic, partition and offset, the delivery count and the reason
(`__dlq.errors.*`). The copies of one write go as one batch to the partition with the
source's number (modulo the topic's partitions) on this broker, appended before the
share partition's archive is written, so a crash between the two copies again rather
than loses one (at least once). Read and rebuilt per record: dead letters are the
exception, never the hot path. A dead-letter partition led by another broker is not
written yet (logged; docs/share-groups.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from yak.errors import KafkaError
from yak.partition import AppendOrigin
from yak.partition.partition import FetchIsolation
from yak.partition.replica_manager import ReplicaManager
from yak.protocol.records import Record, build_batch, decode_records, iter_batches
from yak.share.group import TopicLookup

__all__ = ["copy_dead_letters"]

log = logging.getLogger(__name__)

_READ_BYTES = 1 << 20


def copy_dead_letters(replicas: ReplicaManager, topics: TopicLookup, group_id: str,
                      topic: str, partition: int,
                      dead: Sequence[tuple[int, int, int, str]], dlq: str) -> list[Any]:
    """Append the records of `dead` ((first, last, delivery count, reason) ranges of
    `topic`-`partition`) to `dlq`; the append results (empty when nothing was copied)."""
    found = topics(dlq)
    src = replicas.get_partition(topic, partition)
    target = partition % found[1] if found is not None and found[1] > 0 else 0
    p = replicas.get_partition(dlq, target) if found is not None else None
    if p is None or not p.is_leader or src is None:
        log.warning("share group %s: dead-letter partition %s-%d is not led here; %d"
                    " archived ranges of %s-%d not copied", group_id, dlq, target,
                    len(dead), topic, partition)
        return []
    out: list[Record] = []
    for first, last, count, reason in dead:
        extra = [("__dlq.errors.group.id", group_id.encode()),
                 ("__dlq.errors.topic", topic.encode()),
                 ("__dlq.errors.partition", b"%d" % partition),
                 ("__dlq.errors.delivery.count", b"%d" % count),
                 ("__dlq.errors.reason", reason.encode())]
        offset = first
        while offset <= last:
            try:
                info = src.read(offset, _READ_BYTES, FetchIsolation.HIGH_WATERMARK, True)
            except KafkaError:
                break  # gone (retention, deletion): nothing left to copy
            start = offset
            for buf in info.buffers:
                view = memoryview(buf)
                for pos, h in iter_batches(view):
                    if h.last_offset < offset:
                        continue
                    if not h.is_control:
                        for r in decode_records(view[pos:pos + h.size]):
                            if r.offset is not None and offset <= r.offset <= last:
                                out.append(Record(r.key, r.value, r.timestamp, [
                                    *r.headers, *extra,
                                    ("__dlq.errors.offset", b"%d" % r.offset)]))
                    offset = h.last_offset + 1
            if offset == start:
                break  # nothing readable there
    if not out:
        return []
    result = replicas.append_local(dlq, target, memoryview(build_batch(out)), -1,
                                   AppendOrigin.COORDINATOR)
    if result.error:
        log.warning("share group %s: dead-letter append to %s-%d failed: %s", group_id,
                    dlq, target, result.error)
        return []
    return [result]
