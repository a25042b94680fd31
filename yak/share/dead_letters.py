"""The dead-letter topic of a share group (issue 24, KIP-1191's semantics): records a
share partition archived because their delivery count reached the limit, or because a
consumer rejected them, are copied to the topic named by the group config
`errors.deadletterqueue.topic.name`.

Each copy keeps the record's key, value, timestamp and headers and gains headers naming
the group, the source topic, partition and offset, the delivery count and the reason
(`__dlq.errors.*`). The copies of one write go as one batch to the partition with the
source's number (modulo the topic's partitions): appended here when this broker leads
it, else sent to its leader as a Produce with acks=all over the inter-broker client
(`send`, the composition's; answered once the ISR has the copy). Either way the copy is
made before the share partition's archive is written, so a crash between the two copies
again rather than loses one (at least once); a copy that fails is an error the caller
keeps the archive unwritten for (the records stay where they were, and the copy is
retried with the next write). Read and rebuilt per record: dead letters are the
exception, never the hot path.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from kio.schema.produce.v9 import request as produce_req
from kio.static.primitive import i16, i32

from yak.errors import ErrorCode, KafkaError
from yak.partition import AppendOrigin
from yak.partition.partition import FetchIsolation
from yak.partition.replica_manager import ReplicaManager
from yak.protocol.records import Record, build_batch, decode_records, iter_batches
from yak.share.group import TopicLookup
from yak.share.partition import SharePartition

__all__ = ["DeadLetters"]

log = logging.getLogger(__name__)

_READ_BYTES = 1 << 20
Dead = Sequence[tuple[int, int, int, str]]  # (first, last, delivery count, reason)
LeaderOf = Callable[[str, int], int]  # a partition's leader in the metadata image, or -1
Send = Callable[[int, Any], Awaitable[Any]]  # a kio request to a broker; its response


class DeadLetters:
    """Copies archived records to a dead-letter topic: locally when led here, over the
    wire to the leader otherwise (`leader_of` and `send` None: local only, unit tests)."""

    def __init__(self, replicas: ReplicaManager, topics: TopicLookup, node_id: int,
                 leader_of: LeaderOf | None = None, send: Send | None = None,
                 timeout_ms: int = 5000) -> None:
        self.replicas = replicas
        self.topics = topics
        self.node_id = node_id
        self.leader_of = leader_of
        self.send = send
        self.timeout_ms = timeout_ms

    async def copy(self, group_id: str, topic: str, partition: int, dead: Dead,
                   dlq: str) -> tuple[ErrorCode, list[Any]]:
        """Copy `dead` of `topic`-`partition` to `dlq`: an error (nothing may be archived)
        or none with the local appends (for their acks=all wait). No await when the
        dead-letter partition is led here."""
        found = self.topics(dlq)
        if found is None or found[1] <= 0:
            log.warning("share group %s: dead-letter topic %s does not exist", group_id, dlq)
            return ErrorCode.unknown_topic_or_partition, []
        target = partition % found[1]
        src = self.replicas.get_partition(topic, partition)
        if src is None:
            return ErrorCode.not_leader_or_follower, []
        batch = _copies(src, group_id, topic, partition, dead)
        if batch is None:
            return ErrorCode.none, []  # gone (retention, deletion): nothing to copy
        p = self.replicas.get_partition(dlq, target)
        if p is not None and p.is_leader:
            result = self.replicas.append_local(dlq, target, memoryview(batch), -1,
                                                AppendOrigin.COORDINATOR)
            if result.error:
                log.warning("share group %s: dead-letter append to %s-%d failed: %s",
                            group_id, dlq, target, result.error)
                return ErrorCode(result.error), []
            return ErrorCode.none, [result]
        return await self._remote(group_id, dlq, target, batch), []

    async def drain(self, group_id: str, topic: str, sp: SharePartition,
                    dlq: str | None) -> tuple[ErrorCode, list[Any]]:
        """Copy what `sp` archived (delivery limit, rejected) to `dlq` until nothing
        archived is left uncopied (a copy to another broker awaits, and acknowledgements
        may archive more meanwhile); the local appends, for their acks=all wait. A failed
        copy puts its ranges back, so the caller writes no archive without its copy."""
        copied: list[Any] = []
        while sp.dead:
            dead, sp.dead = sp.dead, []
            if dlq is None:
                return ErrorCode.none, copied
            code, appended = await self.copy(group_id, topic, sp.partition, dead, dlq)
            if code is not ErrorCode.none:
                sp.dead[:0] = dead
                return code, copied
            copied += appended
        return ErrorCode.none, copied

    async def _remote(self, group_id: str, dlq: str, target: int, batch: bytes) -> ErrorCode:
        """Produce `batch` to `dlq`-`target`'s leader with acks=all."""
        node = self.leader_of(dlq, target) if self.leader_of is not None else -1
        if self.send is None or node < 0 or node == self.node_id:
            return ErrorCode.not_leader_or_follower  # moving: the next write tries again
        req = produce_req.ProduceRequest(
            acks=i16(-1), timeout=timedelta(milliseconds=self.timeout_ms),
            topic_data=(produce_req.TopicProduceData(name=dlq, partition_data=(
                produce_req.PartitionProduceData(index=i32(target), records=batch),)),))
        try:
            resp = await self.send(node, req)
        except Exception as e:  # the connection's error: retriable
            log.info("share group %s: dead-letter Produce to broker %d: %s", group_id, node, e)
            return ErrorCode.network_exception
        for t in resp.responses:
            for pr in t.partition_responses:
                code = ErrorCode(pr.error_code)
                if code is not ErrorCode.none:
                    log.info("share group %s: dead-letter Produce to %s-%d on broker %d: %s",
                             group_id, dlq, target, node, code.name)
                return code
        return ErrorCode.unknown_server_error


def _copies(src: Any, group_id: str, topic: str, partition: int, dead: Dead) -> bytes | None:
    """One batch of the copies of `dead`'s records with their `__dlq.errors.*` headers;
    None when none is left to read."""
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
    return bytes(build_batch(out)) if out else None
