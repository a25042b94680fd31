"""The follower's side of Fetch against kio: the request it encodes decodes with kio to the
same fields (every spoken version), and responses encoded by kio and by Yak's own leader
encoder decode to what was put in (records as slices of the frame, tagged fields, aborted
transactions, errors). Truncated or inflated responses raise FetchDecodeError."""

from __future__ import annotations

import datetime
import uuid

import pytest

from yak.protocol import kio_compat
from yak.protocol.fetch_client_codec import (
    MAX_VERSION,
    MIN_VERSION,
    FetchDecodeError,
    FetchRequestPartition,
    FetchRequestTopic,
    decode_fetch_response,
    encode_fetch_request,
)
from yak.protocol.fetch_codec import (
    EpochEndOffset,
    FetchPartitionResult,
    FetchTopicResult,
    LeaderIdAndEpoch,
    SnapshotId,
    encode_fetch_response,
)
from yak.protocol.framing import parse_request_header, skip_header_tagged_fields
from yak.protocol.kio_compat import ErrorCode

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)
TID = uuid.UUID("0123456789abcdef0123456789abcdef")
TID2 = uuid.uuid4()


def _topics() -> list[FetchRequestTopic]:
    return [
        FetchRequestTopic(TID, "orders", [
            FetchRequestPartition(0, 1234, 7, 6, 100, 1 << 20),
            FetchRequestPartition(3, 0, -1, -1, -1, 65536),
        ]),
        FetchRequestTopic(TID2, "x" * 200, [FetchRequestPartition(1, 2**40, 2, 1, 0, 5)]),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_request_decodes_with_kio(version: int) -> None:
    frame = encode_fetch_request(version, 77, "yak-replica-2", 2, 123456789, 500, 1,
                                 10 << 20, _topics())
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    body = memoryview(bytes(frame[4:]))
    api_key, api_version, corr, client_id, pos = parse_request_header(body)
    assert (api_key, api_version, corr, client_id) == (1, version, 77, "yak-replica-2")
    pos = skip_header_tagged_fields(body, pos)
    req, end = kio_compat.decode(kio_compat.request_class(1, version), body, pos)
    assert pos + end == len(body)  # kio answers the bytes it read
    if version >= 15:
        assert req.replica_state.replica_id == 2
        assert req.replica_state.replica_epoch == 123456789
    else:
        assert req.replica_id == 2
    assert req.max_wait == datetime.timedelta(milliseconds=500)
    assert (req.min_bytes, req.max_bytes, req.isolation_level) == (1, 10 << 20, 0)
    assert req.session_id == 0 and req.session_epoch == -1
    assert req.forgotten_topics_data == () and req.rack_id == ""
    got = []
    for t in req.topics:
        key = t.topic_id if version >= 13 else t.topic
        for p in t.partitions:
            got.append((key, p.partition, p.fetch_offset, p.current_leader_epoch,
                        p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes))
    want = []
    for t in _topics():
        key = t.topic_id if version >= 13 else t.name
        for p in t.partitions:
            want.append((key, p.partition, p.fetch_offset, p.current_leader_epoch,
                         p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes))
    assert got == want


def _response_topics(version: int) -> list[FetchTopicResult]:
    recs = b"R" * 300
    return [
        FetchTopicResult("orders", TID, [
            FetchPartitionResult(0, 0, 100, 90, 5, None, -1, [recs[:100], recs[100:]], 300),
            FetchPartitionResult(1, 0, 7, 7, 0, [(5, 1), (9, 3)], -1, (), 0,
                                 diverging_epoch=EpochEndOffset(3, 40)),
            FetchPartitionResult(2, int(ErrorCode.fenced_leader_epoch), -1, -1, -1, None,
                                 current_leader=LeaderIdAndEpoch(2, 9),
                                 snapshot_id=SnapshotId(5, 1)),
        ]),
        FetchTopicResult("t2", TID2, [FetchPartitionResult(4, 0, 0, 0, 0, [], 3)]),
    ]


def _frame(correlation_id: int, body: bytes) -> memoryview:
    # Response header v1: correlation id + empty tagged fields.
    return memoryview(correlation_id.to_bytes(4, "big") + b"\x00" + body)


@pytest.mark.parametrize("version", VERSIONS)
def test_response_from_yak_encoder_decodes(version: int) -> None:
    buffers, size = encode_fetch_response(version, _response_topics(version), 12, 0, 0)
    body = b"".join(bytes(b) for b in buffers)
    assert len(body) == size
    r = decode_fetch_response(version, _frame(99, body))
    assert (r.correlation_id, r.throttle_time_ms, r.error_code, r.session_id) == (99, 12, 0, 0)
    t0, t1 = r.topics
    if version >= 13:
        assert (t0.topic_id, t1.topic_id) == (TID, TID2)
    else:
        assert (t0.name, t1.name) == ("orders", "t2")
    p0, p1, p2 = t0.partitions
    assert (p0.high_watermark, p0.last_stable_offset, p0.log_start_offset) == (100, 90, 5)
    assert p0.records_size == 300 and bytes(p0.records[0]) == b"R" * 300
    assert isinstance(p0.records[0], memoryview)
    assert p0.aborted_transactions is None and p0.diverging_epoch is None
    assert p1.aborted_transactions == [(5, 1), (9, 3)]
    assert p1.diverging_epoch == (3, 40) and p1.records_size == 0
    assert p2.error_code == int(ErrorCode.fenced_leader_epoch)
    assert p2.current_leader == (2, 9) and p2.snapshot_id == (5, 1)
    (p3,) = t1.partitions
    assert p3.aborted_transactions == [] and p3.preferred_read_replica == 3


@pytest.mark.parametrize("version", VERSIONS)
def test_response_from_kio_decodes(version: int) -> None:
    mod = kio_compat.schema_module("fetch", version, "response")
    cls = kio_compat.response_class(1, version)
    part = kio_compat.build(
        mod.PartitionData, partition_index=3, error_code=ErrorCode.none, high_watermark=50,
        last_stable_offset=50, log_start_offset=0, aborted_transactions=None,
        preferred_read_replica=-1, records=b"abc" * 10,
        diverging_epoch=mod.EpochEndOffset(epoch=4, end_offset=44),
        current_leader=mod.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
        snapshot_id=mod.SnapshotId(end_offset=-1, epoch=-1),
    )
    topic = kio_compat.build(mod.FetchableTopicResponse, topic="t", topic_id=TID,
                             partitions=(part,))
    resp = kio_compat.build(cls, throttle_time=datetime.timedelta(0),
                            error_code=ErrorCode.none, session_id=0, responses=(topic,),
                            node_endpoints=())
    body = kio_compat.encode(resp)
    r = decode_fetch_response(version, _frame(5, body))
    (p,) = r.topics[0].partitions
    assert (p.partition_index, p.high_watermark, p.diverging_epoch) == (3, 50, (4, 44))
    assert bytes(p.records[0]) == b"abc" * 10 and p.current_leader is None


def test_truncated_and_inflated_responses_are_refused() -> None:
    buffers, _ = encode_fetch_response(16, _response_topics(16))
    body = b"".join(bytes(b) for b in buffers)
    frame = bytes(_frame(1, body))
    for cut in (3, 8, 20, 40, len(frame) // 2, len(frame) - 2):
        with pytest.raises(FetchDecodeError):
            decode_fetch_response(16, memoryview(frame[:cut]))
    # A topic count of 2**28 in a tiny body must be refused before any allocation.
    inflated = frame[:15] + b"\x80\x80\x80\x80\x01" + frame[16:]
    with pytest.raises(FetchDecodeError):
        decode_fetch_response(16, memoryview(inflated))


def test_versions_outside_the_flexible_range_are_refused() -> None:
    with pytest.raises(ValueError):
        encode_fetch_request(11, 1, "x", 1, 1, 1, 1, 1, [])
    with pytest.raises(ValueError):
        decode_fetch_response(17, memoryview(b""))
