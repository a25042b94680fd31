"""The zero-copy Produce decoder must read exactly what kio reads, for every version."""

from __future__ import annotations

import contextlib
import datetime
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yak.protocol import kio_compat
from yak.protocol.produce_codec import (
    MAX_VERSION,
    MIN_VERSION,
    ProduceDecodeError,
    decode_produce_request,
)


def _kio_request(version: int, txn: str | None, topics: list[tuple[str, uuid.UUID, list]]):
    mod = kio_compat.schema_module("produce", version, "request")
    tds = []
    for name, tid, parts in topics:
        pds = tuple(mod.PartitionProduceData(index=i, records=r) for i, r in parts)
        tds.append(kio_compat.build(mod.TopicProduceData, name=name, topic_id=tid,
                                    partition_data=pds))
    return mod.ProduceRequest(
        transactional_id=txn, acks=-1, timeout=datetime.timedelta(milliseconds=30000),
        topic_data=tuple(tds),
    )


def _normalize_kio(req, version: int):
    return (
        req.transactional_id, req.acks, kio_compat.timedelta_to_ms(req.timeout),
        [
            (getattr(t, "name", None), getattr(t, "topic_id", None),
             [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
            for t in req.topic_data
        ],
    )


def _normalize_yak(req):
    return (
        req.transactional_id, req.acks, req.timeout_ms,
        [
            (t.name, t.topic_id,
             [(i, None if r is None else bytes(r)) for i, r in t.partitions])
            for t in req.topics
        ],
    )


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
@pytest.mark.parametrize("txn", [None, "txn-1", ""])
def test_matches_kio(version: int, txn: str | None) -> None:
    topics = [
        ("orders", uuid.uuid4(), [(0, b"\x01" * 70), (3, b"batch" * 1000), (7, None)]),
        ("é-ünicode.topic", uuid.uuid4(), [(1, b"")]),
        ("empty", uuid.uuid4(), []),
    ]
    req = _kio_request(version, txn, topics)
    body = kio_compat.encode(req)
    ours = decode_produce_request(version, memoryview(body))
    theirs, _ = kio_compat.decode(type(req), body)
    assert _normalize_yak(ours) == _normalize_kio(theirs, version)
    # Records are views into the frame, not copies.
    rec = ours.topics[0].partitions[1][1]
    assert isinstance(rec, memoryview) and rec.obj is body


@pytest.mark.parametrize("version", [3, 9, 13])
def test_hostile_counts_fail_fast(version: int) -> None:
    flexible = version >= 9
    if flexible:
        # null txn id, acks, timeout, topic count uvarint 2^31
        body = b"\x00" + struct.pack(">hi", 1, 1000) + b"\x80\x80\x80\x80\x08"
    else:
        body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(ProduceDecodeError):
        decode_produce_request(version, memoryview(body))


def test_truncated_records_rejected() -> None:
    req = _kio_request(9, None, [("t", uuid.uuid4(), [(0, b"x" * 100)])])
    body = kio_compat.encode(req)
    for cut in (5, 20, len(body) - 1):
        with pytest.raises(ProduceDecodeError):
            decode_produce_request(9, memoryview(body[:cut]))


def test_trailing_bytes_rejected() -> None:
    req = _kio_request(7, None, [("t", uuid.uuid4(), [(0, b"x")])])
    with pytest.raises(ProduceDecodeError):
        decode_produce_request(7, memoryview(kio_compat.encode(req) + b"\x00"))


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_response_same_bytes_as_kio(version: int) -> None:
    from yak.protocol.produce_codec import ProducePartitionResult, encode_produce_response

    tid, tid2 = uuid.uuid4(), uuid.uuid4()
    parts = [
        ProducePartitionResult(0, 0, 1234, -1, 0, None),
        ProducePartitionResult(1, 2, -1, -1, -1, "CRC mismatch"),
        ProducePartitionResult(2, 0, 7, 1_700_000_000_123, 3, None),
    ]
    topics = [("orders", tid, parts), ("b", tid2, [])]
    ours = encode_produce_response(version, topics, throttle_ms=0)
    mod = kio_compat.schema_module("produce", version, "response")
    kio_topics = []
    for name, topic_id, ps in topics:
        kio_parts = tuple(
            kio_compat.build(
                mod.PartitionProduceResponse, index=p.index, error_code=kio_compat.error_code(
                    p.error_code), base_offset=p.base_offset,
                log_append_time=kio_compat.ms_to_datetime(p.log_append_time),
                log_start_offset=p.log_start_offset, record_errors=(),
                error_message=p.error_message)
            for p in ps)
        kio_topics.append(kio_compat.build(mod.TopicProduceResponse, name=name,
                                           topic_id=topic_id, partition_responses=kio_parts))
    theirs = kio_compat.encode(kio_compat.build(
        mod.ProduceResponse, responses=tuple(kio_topics),
        throttle_time=datetime.timedelta(0)))
    assert ours == theirs


@given(version=st.integers(MIN_VERSION, MAX_VERSION), data=st.binary(max_size=300))
@settings(max_examples=400, deadline=None)
def test_garbage_only_raises_decode_error(version: int, data: bytes) -> None:
    with contextlib.suppress(ProduceDecodeError):
        decode_produce_request(version, memoryview(data))


@given(version=st.integers(MIN_VERSION, MAX_VERSION), cut=st.integers(0, 400),
       flip=st.integers(0, 400))
@settings(max_examples=300, deadline=None)
def test_mutated_requests_only_raise_decode_error(version: int, cut: int, flip: int) -> None:
    req = _kio_request(version, "tx", [("topic", uuid.uuid4(), [(0, b"r" * 40), (1, None)])])
    body = bytearray(kio_compat.encode(req))
    if flip < len(body):
        body[flip] ^= 0xFF
    with contextlib.suppress(ProduceDecodeError):
        decode_produce_request(version, memoryview(bytes(body[: max(cut, 1)])))
