"""The broker's connection reads into `FrameReceiver` buffers (issue 28): a request is a
view of the buffer the socket wrote it into, and that memory must never be written over
while anything still holds the request. Pipelined Produce requests of every size, many of
them spanning reads and buffers, wait for their fsync (acks=all on a
`write.caching=false` topic) while the broker keeps reading the ones behind them into the
same connection's buffers; every record's bytes must then read back exactly as sent, and
every response arrive in order without an error (a batch overwritten before its append
fails its CRC or reads back wrong)."""

from __future__ import annotations

import datetime
import random

from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch, decode_records, iter_batches

from .rawclient import RawClient

# Frame sizes around and across the receiver's 256 KiB chunk and its 16 KiB read margin,
# and past 1 MiB (a buffer grown for one frame).
_SIZES = [100, 3_000, 17_000, 120_000, 250_000, 262_000, 270_000, 600_000, 1_100_000, 40]


def _produce(topic: str, batch: bytes, acks: int) -> object:
    mod = kio_compat.schema_module("produce", 9, "request")
    return mod.ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=30),
        topic_data=(mod.TopicProduceData(name=topic, partition_data=(
            mod.PartitionProduceData(index=0, records=batch),)),))


def _values(i: int, size: int) -> list[bytes]:
    """Request i's record values: a few records of random bytes, `size` in all."""
    rng = random.Random(i)
    n = 1 + i % 4
    return [rng.randbytes(max(1, size // n)) for _ in range(n)]


def test_pipelined_large_produces_waiting_on_fsync_read_back_intact(broker) -> None:
    topic = "receive-lifetimes"
    requests = 90
    with RawClient(broker.bootstrap, timeout=120) as raw:
        raw.create_topic(topic, 1, **{"write.caching": "false",
                                      "max.message.bytes": str(4 << 20)})
        expected: list[bytes] = []
        sent: list[int] = []
        for i in range(requests):
            values = _values(i, _SIZES[i % len(_SIZES)] + 7 * i)
            expected += values
            acks = 1 if i % 5 == 3 else -1
            # All sent before any answer is read: the broker reads the later ones into
            # its buffers while the earlier ones still wait for their fsync.
            sent.append(raw.send(_produce(topic, build_batch(
                [Record(b"k%d" % i, v) for v in values]), acks)))
        offsets = []
        for cid in sent:
            got_cid, resp = kio_compat.decode_response(0, 9, raw.recv_frame())
            assert got_cid == cid  # in request order
            p = resp.responses[0].partition_responses[0]
            assert p.error_code == ErrorCode.none, (cid, p.error_code)
            offsets.append(p.base_offset)
        assert offsets == sorted(offsets)
        values: list[bytes] = []
        offset = 0
        while len(values) < len(expected):
            data = raw.fetch(topic, 0, offset).responses[0].partitions[0].records
            mv = memoryview(data)
            batches = list(iter_batches(mv))
            assert batches, f"no records at offset {offset}"
            for pos, h in batches:
                values += [bytes(r.value) for r in decode_records(mv[pos:pos + h.size])]
                offset = h.base_offset + h.last_offset_delta + 1
        assert len(values) == len(expected)
        bad = [n for n, (a, b) in enumerate(zip(values, expected, strict=True)) if a != b]
        assert not bad, f"{len(bad)} records differ from what was sent, first #{bad[0]}"
