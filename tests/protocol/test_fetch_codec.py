"""The hand-written Fetch encoder must emit exactly kio's bytes, for every version."""

from __future__ import annotations

import datetime
import uuid

import pytest

from yak.protocol import kio_compat
from yak.protocol.fetch_codec import (
    MAX_VERSION,
    MIN_VERSION,
    FetchPartitionResult,
    FetchTopicResult,
    encode_fetch_response,
)
from yak.protocol.kio_compat import ErrorCode


def _sample() -> list[FetchTopicResult]:
    tid = uuid.uuid4()
    return [
        FetchTopicResult("orders", tid, [
            FetchPartitionResult(0, 0, 100, 100, 0, None, -1,
                                 [b"a" * 30, memoryview(b"b" * 50)], 80),
            FetchPartitionResult(1, 1, 5, 5, 2, [(1000, 3), (1001, 4)], -1, [], 0),
            FetchPartitionResult(2, 3, -1, -1, -1, None, -1, None, 0),
        ]),
        FetchTopicResult("other", uuid.uuid4(), []),
    ]


def _kio_response(version: int, topics: list[FetchTopicResult]):
    mod = kio_compat.schema_module("fetch", version, "response")
    out = []
    for t in topics:
        parts = []
        for p in t.partitions:
            aborted = None if p.aborted_transactions is None else tuple(
                mod.AbortedTransaction(producer_id=a, first_offset=b)
                for a, b in p.aborted_transactions
            )
            records = None if p.records is None else b"".join(bytes(b) for b in p.records)
            parts.append(kio_compat.build(
                mod.PartitionData, partition_index=p.partition_index,
                error_code=ErrorCode(p.error_code), high_watermark=p.high_watermark,
                last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
                aborted_transactions=aborted, preferred_read_replica=p.preferred_read_replica,
                records=records,
            ))
        out.append(kio_compat.build(mod.FetchableTopicResponse, topic=t.name,
                                    topic_id=t.topic_id, partitions=tuple(parts)))
    return kio_compat.build(
        mod.FetchResponse, throttle_time=datetime.timedelta(milliseconds=7),
        error_code=ErrorCode.none, session_id=0, responses=tuple(out),
    )


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_same_bytes_as_kio(version: int) -> None:
    topics = _sample()
    buffers, size = encode_fetch_response(version, topics, throttle_ms=7)
    ours = b"".join(bytes(b) for b in buffers)
    assert len(ours) == size
    assert ours == kio_compat.encode(_kio_response(version, topics))


def test_record_buffers_are_not_copied() -> None:
    payload = memoryview(bytearray(b"z" * 4096))
    topics = [FetchTopicResult("t", uuid.uuid4(), [
        FetchPartitionResult(0, 0, 1, 1, 0, None, -1, [payload], len(payload))])]
    buffers, _ = encode_fetch_response(12, topics)
    assert any(b is payload for b in buffers)


def test_empty_response_decodes_with_kio() -> None:
    for version in (4, 11, 12, 16):
        buffers, _ = encode_fetch_response(version, [])
        cls = kio_compat.response_class(1, version)
        obj, _ = kio_compat.decode(cls, b"".join(bytes(b) for b in buffers))
        assert obj.responses == ()
