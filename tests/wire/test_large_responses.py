"""Large responses through `yak.wire.KafkaConnection` against a real `yak serve`, over
plain TCP and TLS, on asyncio's loop and on uvloop (the broker's): the follower's shape,
~4 MiB Fetch responses received straight into the connection's frame buffer (no join),
pipelined two at a time, every record as produced, TLS and plain answers byte for byte
the same, and the frame buffer reused once the previous response was dropped."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import uvloop
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from security.conftest import certs, secured_broker  # noqa: F401 - fixtures

from yak.protocol import kio_compat
from yak.protocol.fetch_client_codec import (
    FetchRequestPartition,
    FetchRequestTopic,
    decode_fetch_response,
    encode_fetch_request,
)
from yak.protocol.framing import CHUNK_BUFFER
from yak.protocol.records import decode_records, iter_batches
from yak.security.client import ClientSecurity
from yak.security.connect import connection as secure_connection
from yak.wire import KafkaConnection

TOPIC = "large-responses"
RECORDS = 12_000  # ~12 MiB of 1 KiB values: three or four 4 MiB responses
FETCH_BYTES = 4 << 20


def _value(i: int) -> bytes:
    return (b"%08d" % i) * 128


def _metadata(topic: str) -> Any:
    mod = kio_compat.schema_module("metadata", 12, "request")
    return kio_compat.build(
        mod.MetadataRequest, topics=(kio_compat.build(mod.MetadataRequestTopic, name=topic,
                                                      topic_id=None),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)


async def _fetch(conn: KafkaConnection, topic_id: Any, offset: int) -> memoryview:
    cid = conn.next_correlation_id()
    frame = encode_fetch_request(
        13, cid, "wire-test", -1, -1, 0, 0, FETCH_BYTES,
        [FetchRequestTopic(topic_id, TOPIC, [FetchRequestPartition(
            0, offset, partition_max_bytes=FETCH_BYTES)])])
    return await conn.request_frame(frame, cid, 30)


def _records(frame: memoryview) -> tuple[bytes, list[tuple[int, bytes]]]:
    part = decode_fetch_response(13, frame).topics[0].partitions[0]
    assert part.error_code == 0
    data = part.records[0]
    out = []
    for pos, _h in iter_batches(data):
        end = pos + _h.batch_length + 12
        out.extend((r.offset, r.value) for r in decode_records(data[pos:end]))
    return bytes(data), out


async def _read_all(conn: KafkaConnection) -> tuple[list[bytes], list[tuple[int, bytes]]]:
    """The whole partition, as a follower reads it: one response at a time, each dropped
    before the next; and two pipelined at the start."""
    md = await conn.request(_metadata(TOPIC))
    topic_id = md.topics[0].topic_id
    first, second = await asyncio.gather(_fetch(conn, topic_id, 0),
                                         _fetch(conn, topic_id, RECORDS // 2))
    assert len(first) > CHUNK_BUFFER and len(second) > CHUNK_BUFFER
    assert first.obj is not second.obj  # both alive at once: two buffers
    _, records_b = _records(second)
    assert records_b[0][0] <= RECORDS // 2 < records_b[-1][0]
    del first, second
    chunks: list[bytes] = []
    records: list[tuple[int, bytes]] = []
    owner = None
    offset = 0
    while offset < RECORDS:
        frame = await _fetch(conn, topic_id, offset)
        if owner is None:
            owner = frame.obj  # (a reference, not a view: it does not block reuse)
        else:
            assert frame.obj is owner  # the previous response was dropped: same buffer
        raw, got = _records(frame)
        del frame
        chunks.append(raw)
        records.extend(got)
        offset = got[-1][0] + 1
    return chunks, records


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_large_fetch_responses_over_plain_and_tls(secured_broker, certs, loop: str  # noqa: F811
                                                  ) -> None:
    b = secured_broker(["PLAINTEXT", "SSL"])
    admin = AdminClient({"bootstrap.servers": b.addr("PLAINTEXT")})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    p = Producer({"bootstrap.servers": b.addr("PLAINTEXT"), "linger.ms": 20,
                  "batch.size": 256 << 10, "compression.type": "none"})
    for i in range(RECORDS):
        p.produce(TOPIC, _value(i), key=b"%d" % i)
        if i % 1000 == 999:
            p.poll(0)
    assert p.flush(60) == 0

    async def body() -> tuple[Any, Any]:
        plain = KafkaConnection("127.0.0.1", b.listener_port["PLAINTEXT"],
                                client_id="wire-test")
        tls = secure_connection("127.0.0.1", b.listener_port["SSL"],
                                ClientSecurity("SSL", ca_location=str(certs.ca)), 30,
                                "wire-test")
        try:
            return await _read_all(plain), await _read_all(tls)
        finally:
            plain.close()
            tls.close()

    runner: Callable[..., Any] = uvloop.run if loop == "uvloop" else asyncio.run
    (plain_chunks, plain_records), (tls_chunks, tls_records) = runner(
        asyncio.wait_for(body(), 120))
    assert plain_records == [(i, _value(i)) for i in range(RECORDS)]
    assert tls_records == plain_records
    assert tls_chunks == plain_chunks
