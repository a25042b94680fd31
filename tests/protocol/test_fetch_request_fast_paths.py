"""The Fetch codec's shortcuts for the leader's side of replication (issue 28):
a follower's v15+ request, whose only tagged field is replica_state, is read in place; any
other shape of tagged fields takes the general reader and gives the same fields; the topic
ids of repeated requests are the same `UUID` objects, the all-zero id is None, and ids a
client makes up cannot grow the id cache past its bound. The response's partition of a
read_uncommitted fetch is packed at once and its records length written inline: compared
with kio's encoder at every varint boundary."""

from __future__ import annotations

import struct
import uuid

import pytest

from yak.protocol import fetch_codec
from yak.protocol.fetch_client_codec import (
    FetchRequestPartition,
    FetchRequestTopic,
    encode_fetch_request,
)
from yak.protocol.fetch_codec import FetchRequestError, decode_fetch_request
from yak.protocol.framing import parse_request_header, skip_header_tagged_fields


def _follower_body(version: int, tid: uuid.UUID, replica: int = 3, epoch: int = 77) -> bytes:
    frame = encode_fetch_request(version, 5, "yak-replica-3", replica, epoch, 500, 1, 10 << 20, [
        FetchRequestTopic(tid, "t", [FetchRequestPartition(0, 10, 4, 3, 0, 1 << 20),
                                     FetchRequestPartition(1, 2**40, 5, 4, 7, 1 << 19)])])
    body = memoryview(bytes(frame[4:]))
    _, _, _, _, pos = parse_request_header(body)
    pos = skip_header_tagged_fields(body, pos)
    return bytes(body[pos:])


def _fields(version: int, body: bytes) -> tuple[object, ...]:
    d = decode_fetch_request(version, memoryview(body))
    return (d.replica_id, d.replica_epoch, d.max_wait, d.min_bytes, d.max_bytes,
            [(t.topic, t.topic_id, [(p.partition, p.fetch_offset, p.partition_max_bytes,
                                     p.current_leader_epoch, p.last_fetched_epoch,
                                     p.log_start_offset) for p in t.partitions])
             for t in d.topics], d.forgotten, d.rack_id)


@pytest.mark.parametrize("version", [15, 16])
def test_replica_state_in_place_and_by_the_general_reader_agree(version: int) -> None:
    tid = uuid.uuid4()
    body = _follower_body(version, tid, replica=9, epoch=2**40)
    # The request ends with: 1 tagged field, tag 1, 13 bytes (replica id, broker epoch,
    # the struct's empty tagged fields).
    assert body[-16:-13] == b"\x01\x01\x0d" and body[-1] == 0
    fast = _fields(version, body)
    assert fast[:2] == (9, 2**40)
    # The same request with an unknown tag 5 (empty) after replica_state: the general
    # reader, which must find the same fields.
    slow_body = body[:-16] + b"\x02\x01\x0d" + body[-13:] + b"\x05\x00"
    assert _fields(version, slow_body) == fast
    assert fast[5][0][2][1] == (1, 2**40, 1 << 19, 5, 4, 7)


@pytest.mark.parametrize("version", [15, 16])
def test_a_follower_request_cut_or_padded_is_refused(version: int) -> None:
    body = _follower_body(version, uuid.uuid4())
    for cut in range(len(body) - 16, len(body)):
        with pytest.raises(FetchRequestError):
            decode_fetch_request(version, memoryview(body[:cut]))
    with pytest.raises(FetchRequestError):
        decode_fetch_request(version, memoryview(body + b"\x00"))
    # replica_state announced shorter than its 12 bytes: the general reader refuses it.
    short = body[:-16] + b"\x01\x01\x08" + body[-13:-5]
    with pytest.raises(FetchRequestError):
        decode_fetch_request(version, memoryview(short))


def test_topic_ids_are_shared_and_bounded() -> None:
    tid = uuid.uuid4()
    a = decode_fetch_request(15, memoryview(_follower_body(15, tid))).topics[0].topic_id
    b = decode_fetch_request(15, memoryview(_follower_body(15, tid))).topics[0].topic_id
    assert a == tid and a is b
    zero = _follower_body(15, uuid.UUID(int=0))
    assert decode_fetch_request(15, memoryview(zero)).topics[0].topic_id is None
    for i in range(fetch_codec._IDS_MAX + 10):
        raw = struct.pack(">QQ", 1, i + 1)
        assert fetch_codec._uuid_or_none(memoryview(raw), 0) == uuid.UUID(bytes=raw)
        assert len(fetch_codec._IDS) <= fetch_codec._IDS_MAX


@pytest.mark.parametrize("version", [12, 13, 16])
@pytest.mark.parametrize("size", [1, 126, 127, 128, 16_382, 16_383, 16_384, 2_100_000])
def test_response_records_length_written_inline_matches_kio(version: int, size: int) -> None:
    """The response's compact records length (a varint written inline) at every byte-count
    boundary, for a follower's partition (null aborted list) and a read_committed one."""
    from protocol.test_fetch_codec import _assert_same
    from yak.protocol.fetch_codec import FetchPartitionResult, FetchTopicResult

    records = [b"\x07" * size]
    parts = [FetchPartitionResult(0, 0, 10, 10, 0, None, -1, records, size),
             FetchPartitionResult(1, 0, 10, 10, 0, [(5, 6)], 2, records, size)]
    _assert_same(version, [FetchTopicResult("t", uuid.UUID(int=7), parts)])
