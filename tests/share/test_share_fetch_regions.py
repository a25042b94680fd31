"""ShareFetch's records as whole batches, by acquire mode, through a real broker with
sendfile on and off (yak/share/log_read.py: the batches stay in the segment files as
`FileRegion`s on a plaintext listener), and the batch walk over a region of a real file.

- batch-optimized (ShareFetch v1, v2 mode 0, Kafka's default): max_records is a soft
  limit, the batch holding the last allowed record is acquired to its end, and that
  batch goes back once, byte for byte as produced;
- record-limit (v2 mode 1): exactly max_records acquired, the whole batch still returned,
  its rest acquired by the next fetch;
- a share consumer (confluent-kafka) reads every 1 KiB record of 1 MB batches once.
"""

from __future__ import annotations

import datetime
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import ResourceType as AdminResourceType

from tests.broker.rawclient import RawClient
from yak.errors import KafkaStorageError
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch, decode_records, iter_batches
from yak.share.log_read import Span, acquired_records, read_batches
from yak.storage.file_region import FileRegion

BATCH = 50


def _hb(c: RawClient, member: str, epoch: int, topics: tuple[str, ...] | None) -> Any:
    mod = kio_compat.schema_module("share_group_heartbeat", 1, "request")
    return c.request(mod.ShareGroupHeartbeatRequest(
        group_id="g", member_id=member, member_epoch=epoch, subscribed_topic_names=topics))


def _fetch(c: RawClient, member: str, epoch: int, topic_id: uuid.UUID, max_records: int,
           mode: int, acks: list[tuple[int, int]] = ()) -> Any:
    mod = kio_compat.schema_module("share_fetch", 2, "request")
    batches = tuple(mod.AcknowledgementBatch(first_offset=f, last_offset=last,
                                             acknowledge_types=(1,)) for f, last in acks)
    topic = mod.FetchTopic(topic_id=topic_id, partitions=(mod.FetchPartition(
        partition_index=0, acknowledgement_batches=batches),))
    return c.request(mod.ShareFetchRequest(
        group_id="g", member_id=member, share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, max_bytes=50 << 20,
        max_records=max_records, batch_size=max_records, share_acquire_mode=mode,
        topics=(topic,), forgotten_topics_data=()))


def _answer(resp: Any) -> tuple[list[tuple[int, int, int]], list[tuple[int, bytes]]]:
    """(acquired ranges, (offset, value) of every record returned)."""
    assert resp.error_code == ErrorCode.none, resp
    parts = [p for t in resp.responses for p in t.partitions]
    if not parts:  # nothing acquired, nothing to say
        return [], []
    (part,) = parts
    assert part.error_code == ErrorCode.none, part
    acquired = [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records]
    data = memoryview(bytes(part.records or b""))
    records = [(r.offset, r.value) for pos, h in iter_batches(data)
               for r in decode_records(data[pos:pos + h.size])]
    return acquired, records


@pytest.mark.parametrize("sendfile", ["true", "false"])
def test_share_fetch_returns_whole_batches_by_acquire_mode(broker_factory: Any,
                                                           sendfile: str) -> None:
    broker = broker_factory(**{"socket.sendfile.enable": sendfile})
    values = [b"%04d-" % i + os.urandom(1019) for i in range(3 * BATCH)]
    with RawClient(broker.bootstrap) as c:
        c.create_topic("r", 1)
        joined = _hb(c, "m1", 0, ("r",))
        assert joined.error_code == ErrorCode.none
        (tp,) = joined.assignment.topic_partitions
        tid = tp.topic_id
        assert _answer(_fetch(c, "m1", 0, tid, 10, 0)) == ([], [])  # the session, at the end
        for b in range(3):
            batch = build_batch([Record(key=None, value=v)
                                 for v in values[b * BATCH:(b + 1) * BATCH]])
            assert c.produce_one("r", 0, batch)[0] == ErrorCode.none
        want = list(enumerate(values))
        # batch-optimized: 10 allowed, the first batch taken to its end, sent once
        assert _answer(_fetch(c, "m1", 1, tid, 10, 0)) == ([(0, 49, 1)], want[:BATCH])
        # record-limit: exactly 10, the whole second batch returned
        assert _answer(_fetch(c, "m1", 2, tid, 10, 1, acks=[(0, 49)])) == (
            [(50, 59, 1)], want[BATCH:2 * BATCH])
        # the rest of the second batch, then (20 more allowed) into the third, to its end
        assert _answer(_fetch(c, "m1", 3, tid, 60, 0, acks=[(50, 59)])) == (
            [(60, 149, 1)], want[BATCH:])
        assert _answer(_fetch(c, "m1", 4, tid, 10, 0, acks=[(60, 149)])) == ([], [])


def test_a_share_consumer_reads_every_1k_record_of_1mb_batches_once(broker_factory: Any,
                                                                   ) -> None:
    """The benchmark's shape: 1 KiB records in ~1 MB batches, a share consumer asking
    for 500 a fetch (librdkafka's default), every record acknowledged."""
    broker = broker_factory(**{"num.partitions": 1})
    bs = broker.bootstrap
    n = 3000
    p = Producer({"bootstrap.servers": bs, "linger.ms": 50, "batch.size": 1 << 20})
    values = [b"%05d-" % i + os.urandom(1018) for i in range(n)]
    for v in values:
        p.produce("big", v)
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(AdminResourceType.GROUP, "g", incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(15)
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "g",
                       "share.acknowledgement.mode": "explicit"})
    try:
        c.subscribe(["big"])
        got: dict[int, list[bytes]] = {}
        end = time.monotonic() + 60
        while time.monotonic() < end and len(got) < n:
            for m in c.poll(0.5):
                assert m.error() is None, m.error()
                got.setdefault(m.offset(), []).append(m.value())
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync()
    finally:
        c.close()
    assert sorted(got) == list(range(n))
    assert all(got[o] == [values[o]] for o in range(n))  # each once, as produced


def test_the_batch_walk_over_a_file_region(tmp_path: Path) -> None:
    """A region of a real file: the headers walked, the acquired batches handed back as one
    region per run of adjacent batches, byte-identical with the in-memory walk; a file cut
    under the region refuses the read."""
    batches = [build_batch([Record(key=None, value=b"%d-%d" % (b, i) * 40)
                            for i in range(b + 1)], base_offset=10 * b) for b in range(5)]
    data = b"".join(batches)
    path = tmp_path / "seg.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    region = FileRegion(fd, 0, len(data), 15)
    walked = read_batches([region], None)
    in_memory = read_batches([data], None)
    assert [w[:3] for w in walked] == [m[:3] for m in in_memory] == [
        (10 * b, 10 * b + b, False) for b in range(5)]
    assert all(type(w[3]) is Span and len(w[3]) == len(m[3])
               for w, m in zip(walked, in_memory, strict=True))
    out = acquired_records(walked, 11, 31)  # batches 1..3, adjacent: one region
    assert [type(o) for o in out] == [FileRegion]
    assert bytes(out[0]) == b"".join(batches[1:4]) == b"".join(
        acquired_records(in_memory, 11, 31))
    assert out[0].record_count == 2 + 3 + 4
    out[0].release()
    region.release()
    with open(path, "r+b") as f:
        f.truncate(len(data) - len(batches[-1]) - 10)
    cut = FileRegion(os.open(path, os.O_RDONLY), 0, len(data), 15)
    with pytest.raises(KafkaStorageError):
        read_batches([cut], None)
    cut.release()
