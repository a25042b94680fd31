"""The hand-written ShareFetch encoder must emit exactly kio's bytes, for every version
served (v1-v2) and every path through it: top-level error with and without a message,
partitions with fetch and acknowledgement errors (and their messages), leaders known and
unknown, records empty or present (in several buffers, as the acquisition hands them
over), zero, one or many acquired ranges (past a one-byte compact length), non-ASCII
strings, and node endpoints with and without a rack.
"""

from __future__ import annotations

import datetime
import uuid

import pytest

from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.share_fetch_codec import (
    MAX_VERSION,
    MIN_VERSION,
    NodeEndpoint,
    SharePartitionData,
    ShareTopicData,
    encode_share_fetch_response,
)
from yak.share.partition import AcquiredRange

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)
T1 = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
T2 = uuid.UUID(int=7)


def _kio(version: int, topics: list[ShareTopicData], *, lock_ms: int, throttle_ms: int = 0,
         error_code: ErrorCode = ErrorCode.none, error_message: str | None = None,
         endpoints: tuple[NodeEndpoint, ...] = ()) -> bytes:
    mod = kio_compat.schema_module("share_fetch", version, "response")
    cls = kio_compat.response_class(78, version)
    build = kio_compat.build
    response = build(
        cls, throttle_time=datetime.timedelta(milliseconds=throttle_ms),
        error_code=error_code, error_message=error_message,
        acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
        responses=tuple(build(mod.ShareFetchableTopicResponse, topic_id=t.topic_id,
                              partitions=tuple(build(
                                  mod.PartitionData, partition_index=p.partition_index,
                                  error_code=ErrorCode(p.error_code),
                                  error_message=p.error_message,
                                  acknowledge_error_code=p.acknowledge_error_code,
                                  acknowledge_error_message=p.acknowledge_error_message,
                                  current_leader=build(mod.LeaderIdAndEpoch,
                                                       leader_id=p.leader_id,
                                                       leader_epoch=p.leader_epoch),
                                  records=b"".join(bytes(b) for b in p.records),
                                  acquired_records=tuple(build(
                                      mod.AcquiredRecords, first_offset=a.first_offset,
                                      last_offset=a.last_offset,
                                      delivery_count=a.delivery_count)
                                      for a in p.acquired))
                                  for p in t.partitions))
                        for t in topics),
        node_endpoints=tuple(build(mod.NodeEndpoint, node_id=e.node_id, host=e.host,
                                   port=e.port, rack=e.rack) for e in endpoints))
    return kio_compat.encode_response(42, response)


def _ours(version: int, topics: list[ShareTopicData], **kw: object) -> bytes:
    buffers, size = encode_share_fetch_response(version, topics, **kw)  # type: ignore[arg-type]
    body = b"".join(bytes(b) for b in buffers)
    assert len(body) == size
    return kio_compat.response_frame_head(size, 42, True) + body


def _records(n: int, size: int) -> list[memoryview]:
    data = bytes(range(256)) * (n * size // 256 + 1)
    return [memoryview(data)[i * size:(i + 1) * size] for i in range(n)]


def _partition(i: int, *, records: int = 0, ranges: int = 0, error: ErrorCode = ErrorCode.none,
               ack: ErrorCode = ErrorCode.none, leader: tuple[int, int] = (1, 3),
               ) -> SharePartitionData:
    bufs = _records(records, 61 + i)
    return SharePartitionData(
        i, int(error), None if error is ErrorCode.none else error.name, int(ack),
        None if ack is ErrorCode.none else "acknowledged élsewhere", leader[0], leader[1],
        bufs, sum(len(b) for b in bufs),
        [AcquiredRange(100 * k, 100 * k + 9, 1 + k % 5) for k in range(ranges)])


CASES: dict[str, list[ShareTopicData]] = {
    "none": [],
    "one": [ShareTopicData(T1, [_partition(0, records=1, ranges=1)])],
    "empty-partition": [ShareTopicData(T1, [_partition(3)])],
    "errors": [ShareTopicData(T1, [
        _partition(0, error=ErrorCode.not_leader_or_follower, leader=(2, 9)),
        _partition(1, ack=ErrorCode.invalid_record_state),
        _partition(2, error=ErrorCode.unknown_topic_id, leader=(-1, -1)),
        _partition(3, records=3, ranges=2, ack=ErrorCode.coordinator_not_available)])],
    "many": [ShareTopicData(T1, [_partition(i, records=i % 4, ranges=i % 3)
                                 for i in range(130)]),
             ShareTopicData(T2, [_partition(0, records=200, ranges=140)])],
    "large-records": [ShareTopicData(T2, [SharePartitionData(
        5, records=[memoryview(b"x" * 70_000), b"y" * 300], records_size=70_300,
        acquired=[AcquiredRange(0, 2**40, 32767)])])],
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_byte_identical_to_kio(version: int, case: str) -> None:
    topics = CASES[case]
    assert _ours(version, topics, acquisition_lock_timeout_ms=30_000) == \
        _kio(version, topics, lock_ms=30_000)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("top", [
    (ErrorCode.none, None, 0),
    (ErrorCode.invalid_request, "acknowledgements in the first request", 0),
    (ErrorCode.share_session_not_found, "share_session_not_found", 250),
    (ErrorCode.group_authorization_failed, "ü" * 200, 2**31 - 1),
])
def test_top_level_fields(version: int, top: tuple[ErrorCode, str | None, int]) -> None:
    code, message, throttle = top
    topics = CASES["errors"]
    assert _ours(version, topics, acquisition_lock_timeout_ms=0, throttle_ms=throttle,
                 error_code=int(code), error_message=message) == \
        _kio(version, topics, lock_ms=0, throttle_ms=throttle, error_code=code,
             error_message=message)


@pytest.mark.parametrize("version", VERSIONS)
def test_node_endpoints(version: int) -> None:
    endpoints = (NodeEndpoint(1, "127.0.0.1", 9092), NodeEndpoint(2, "b2.example", 19092, "r2"),
                 NodeEndpoint(3, "h" * 130, 1, "rack-ß"))
    topics = CASES["errors"]
    assert _ours(version, topics, acquisition_lock_timeout_ms=15_000,
                 node_endpoints=endpoints) == \
        _kio(version, topics, lock_ms=15_000, endpoints=endpoints)


@pytest.mark.parametrize("version", [0, MAX_VERSION + 1])
def test_unsupported_version(version: int) -> None:
    with pytest.raises(ValueError):
        encode_share_fetch_response(version, [], acquisition_lock_timeout_ms=0)


def test_records_are_not_copied() -> None:
    """The read's buffers are handed to the transport as they are (the point of it)."""
    bufs = _records(3, 100)
    out, _size = encode_share_fetch_response(
        1, [ShareTopicData(T1, [SharePartitionData(0, records=bufs, records_size=300)])],
        acquisition_lock_timeout_ms=0)
    assert [b for b in out if any(b is r for r in bufs)] == bufs
