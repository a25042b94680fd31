"""The follower's Fetch codec on the shapes its fast paths split on (issue 28): the decoder
reads the common partition (null aborted list, one-byte records length, no tags) inline
and everything else the general way, keeps topic ids it has parsed, and the encoder
builds a fetcher's fixed request head once. Each shape is checked against kio, the
independent codec: a response kio encodes decodes to the same fields, a request Yak
encodes decodes with kio to what was put in, and every cut of a response is refused."""

from __future__ import annotations

import datetime
import uuid

import pytest

from yak.protocol import fetch_client_codec as codec
from yak.protocol import kio_compat
from yak.protocol.fetch_client_codec import (
    FetchDecodeError,
    FetchRequestPartition,
    FetchRequestTopic,
    decode_fetch_response,
    encode_fetch_request,
)
from yak.protocol.framing import parse_request_header, skip_header_tagged_fields
from yak.protocol.kio_compat import ErrorCode

TID = uuid.UUID("00112233445566778899aabbccddeeff")
TID2 = uuid.UUID("ffeeddccbbaa99887766554433221100")

# (records, aborted transactions, diverging epoch) per partition: every branch of the
# decoder's partition loop, in one response.
SHAPES = [
    (None, None, None),  # null records
    (b"", None, None),  # empty records
    (b"r" * 5, None, None),  # one-byte length, read inline
    (b"s" * 126, None, None),  # the largest one-byte compact length
    (b"t" * 127, None, None),  # the smallest two-byte one
    (b"u" * 70_000, None, None),  # three bytes
    (b"v" * 10, [], None),  # an empty aborted list (read_committed)
    (b"w" * 10, [(7, 100), (8, 200)], None),
    (None, None, (3, 40)),  # a diverging epoch: tagged fields
    (b"x" * 200, [(9, 1)], (4, 50)),
]


def _response_frame(version: int, correlation_id: int = 5) -> bytes:
    mod = kio_compat.schema_module("fetch", version, "response")
    cls = kio_compat.response_class(1, version)
    parts = []
    for i, (records, aborted, diverging) in enumerate(SHAPES):
        kw = {}
        if diverging is not None:
            kw["diverging_epoch"] = mod.EpochEndOffset(epoch=diverging[0],
                                                       end_offset=diverging[1])
        parts.append(kio_compat.build(
            mod.PartitionData, partition_index=i, error_code=ErrorCode.none,
            high_watermark=1000 + i, last_stable_offset=900 + i, log_start_offset=i,
            aborted_transactions=None if aborted is None else tuple(
                mod.AbortedTransaction(producer_id=p, first_offset=o) for p, o in aborted),
            preferred_read_replica=-1, records=records, **kw))
    topics = (
        kio_compat.build(mod.FetchableTopicResponse, topic="orders", topic_id=TID,
                         partitions=tuple(parts)),
        kio_compat.build(mod.FetchableTopicResponse, topic="other", topic_id=TID2,
                         partitions=(parts[2],)),
    )
    resp = kio_compat.build(cls, throttle_time=datetime.timedelta(0),
                            error_code=ErrorCode.none, session_id=0, responses=topics,
                            node_endpoints=())
    return correlation_id.to_bytes(4, "big") + b"\x00" + bytes(kio_compat.encode(resp))


@pytest.mark.parametrize("version", [12, 13, 16])
def test_every_partition_shape_decodes_as_kio_encoded_it(version: int) -> None:
    frame = memoryview(_response_frame(version))
    r = decode_fetch_response(version, frame)
    assert r.correlation_id == 5
    t0, t1 = r.topics
    if version >= 13:
        assert (t0.topic_id, t1.topic_id) == (TID, TID2)
    else:
        assert (t0.name, t1.name) == ("orders", "other")
    assert len(t0.partitions) == len(SHAPES)
    for i, (p, (records, aborted, diverging)) in enumerate(zip(t0.partitions, SHAPES,
                                                              strict=True)):
        assert (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                p.log_start_offset, p.preferred_read_replica) == (i, 0, 1000 + i, 900 + i,
                                                                  i, -1)
        assert p.aborted_transactions == aborted
        assert p.diverging_epoch == diverging
        if records:
            assert p.records_size == len(records)
            assert bytes(p.records[0]) == records
            assert p.records[0].obj is frame.obj  # a slice of the frame, not a copy
        else:
            assert p.records_size == 0
    (p,) = t1.partitions
    assert bytes(p.records[0]) == b"r" * 5


def test_topic_ids_are_kept_and_never_mixed_up() -> None:
    frame = memoryview(_response_frame(16))
    first = decode_fetch_response(16, frame).topics
    again = decode_fetch_response(16, frame).topics
    assert first[0].topic_id is again[0].topic_id  # parsed once
    assert (again[0].topic_id, again[1].topic_id) == (TID, TID2)
    # More ids than are kept: the cache starts over and every id still decodes right.
    body = bytearray(frame)
    at = bytes(frame).index(TID.bytes)
    for _ in range(codec._TOPIC_IDS_MAX + 10):
        new = uuid.uuid4()
        body[at:at + 16] = new.bytes
        assert decode_fetch_response(16, memoryview(bytes(body))).topics[0].topic_id == new
    assert len(codec._TOPIC_IDS) <= codec._TOPIC_IDS_MAX
    assert decode_fetch_response(16, frame).topics[0].topic_id == TID


def test_every_cut_of_a_response_is_refused() -> None:
    frame = _response_frame(16)
    # Every cut outside the 70 kB records (inside it the cut is one length check).
    big = frame.index(b"u" * 1000)
    cuts = [*range(big + 1), *range(big + 70_000 - 5, len(frame))]
    for cut in cuts:
        with pytest.raises(FetchDecodeError):
            decode_fetch_response(16, memoryview(frame[:cut]))


def _kio_request(frame: bytearray, version: int):
    body = memoryview(bytes(frame[4:]))
    api_key, api_version, corr, client_id, pos = parse_request_header(body)
    pos = skip_header_tagged_fields(body, pos)
    req, end = kio_compat.decode(kio_compat.request_class(1, version), body, pos)
    assert pos + end == len(body)  # (kio answers the bytes it read)
    return (api_key, api_version, corr, client_id), req


@pytest.mark.parametrize("version", [12, 15, 16])
def test_requests_sharing_a_head_decode_with_kio(version: int) -> None:
    """Many partitions (a two-byte count), another rack, and two requests built from one
    kept head with different correlation ids and broker epochs."""
    parts = [FetchRequestPartition(i, 10 * i, 5, 4, i, 1 << 20) for i in range(200)]
    topics = [FetchRequestTopic(TID, "orders", parts),
              FetchRequestTopic(TID2, "other", [FetchRequestPartition(0, 1, 2, 3, 0, 9)])]
    frames = [encode_fetch_request(version, cid, "yak-replica-3", 3, epoch, 500, 1,
                                   10 << 20, topics, rack_id=rack)
              for cid, epoch, rack in ((1, 11, ""), (2**31 - 1, 22, "rack-b"),
                                       (3, 33, ""))]
    for frame, (cid, epoch, rack) in zip(frames, ((1, 11, ""), (2**31 - 1, 22, "rack-b"),
                                                  (3, 33, "")), strict=True):
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        head, req = _kio_request(frame, version)
        assert head == (1, version, cid, "yak-replica-3")
        assert req.rack_id == rack
        if version >= 15:
            assert (req.replica_state.replica_id, req.replica_state.replica_epoch) == (3, epoch)
        else:
            assert req.replica_id == 3
        got = [(p.partition, p.fetch_offset, p.current_leader_epoch, p.last_fetched_epoch,
                p.log_start_offset, p.partition_max_bytes)
               for t in req.topics for p in t.partitions]
        assert got == [(p.partition, p.fetch_offset, p.current_leader_epoch,
                        p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes)
                       for t in topics for p in t.partitions]
    # A null client id, the head built for it apart from the named one's.
    head, _ = _kio_request(encode_fetch_request(version, 9, None, 3, 1, 500, 1, 1 << 20,
                                                topics), version)
    assert head == (1, version, 9, None)


def test_records_over_two_mib_take_the_general_reader() -> None:
    """A records length of four varint bytes (over 2 MiB) is not read inline."""
    version = 16
    mod = kio_compat.schema_module("fetch", version, "response")
    records = bytes(range(256)) * (9 << 10)  # 2.25 MiB
    part = kio_compat.build(
        mod.PartitionData, partition_index=0, error_code=ErrorCode.none, high_watermark=1,
        last_stable_offset=1, log_start_offset=0, aborted_transactions=None,
        preferred_read_replica=-1, records=records)
    resp = kio_compat.build(
        kio_compat.response_class(1, version), throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none, session_id=0, node_endpoints=(),
        responses=(kio_compat.build(mod.FetchableTopicResponse, topic="t", topic_id=TID,
                                    partitions=(part,)),))
    frame = b"\x00\x00\x00\x01\x00" + bytes(kio_compat.encode(resp))
    (p,) = decode_fetch_response(version, memoryview(frame)).topics[0].partitions
    assert p.records_size == len(records) and bytes(p.records[0]) == records
    with pytest.raises(FetchDecodeError):
        decode_fetch_response(version, memoryview(frame[:-100]))
