"""The hand-written Fetch encoder must emit exactly kio's bytes, for every version it
supports and every path through it: each error code a partition or the whole response
can carry, with and without high watermark, last stable offset and log start offset,
aborted transactions null / empty / present, a preferred read replica, records empty or
present, and (v12+) the diverging epoch, current leader and snapshot id tagged fields and
(v16+) the node endpoints.

Error partitions are always compared with kio encoding *empty* records: that is what
Kafka sends, and a null record set is what made librdkafka loop on out-of-range offsets.
"""

from __future__ import annotations

import datetime
import itertools
import uuid

import pytest

from yak.protocol import kio_compat
from yak.protocol.fetch_codec import (
    MAX_VERSION,
    MIN_VERSION,
    EpochEndOffset,
    FetchPartitionResult,
    FetchTopicResult,
    LeaderIdAndEpoch,
    NodeEndpoint,
    SnapshotId,
    encode_fetch_response,
)
from yak.protocol.kio_compat import ErrorCode

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)

# Every error a Fetch partition can carry from Kafka's broker (ReplicaManager.readFromLog,
# KafkaApis.handleFetchRequest), and the top-level ones (sessions, throttling, auth).
PARTITION_ERRORS = [
    ErrorCode.none,
    ErrorCode.offset_out_of_range,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.unknown_topic_id,
    ErrorCode.not_leader_or_follower,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.kafka_storage_error,
    ErrorCode.corrupt_message,
    ErrorCode.topic_authorization_failed,
    ErrorCode.replica_not_available,
    ErrorCode.inconsistent_topic_id,
    ErrorCode.offset_moved_to_tiered_storage,
    ErrorCode.unknown_server_error,
]
TOP_LEVEL_ERRORS = [
    ErrorCode.none,
    ErrorCode.fetch_session_id_not_found,
    ErrorCode.invalid_fetch_session_epoch,
    ErrorCode.fetch_session_topic_id_error,
    ErrorCode.cluster_authorization_failed,
    ErrorCode.unknown_server_error,
]

_BATCH_A = b"\x01" * 61
_BATCH_B = memoryview(b"\x02" * 70)


def _partitions() -> list[FetchPartitionResult]:
    """One partition per combination of every field's interesting values."""
    out = []
    combos = itertools.product(
        [-1, 1234],  # high watermark (-1: Kafka's INVALID_HIGH_WATERMARK on errors)
        [-1, 1200],  # last stable offset
        [-1, 17],  # log start offset
        [None, [], [(4000, 1100), (4001, 1150)]],  # aborted transactions
        [-1, 2],  # preferred read replica
        ["empty", "none", "data"],  # records
        [None, EpochEndOffset(5, 900), EpochEndOffset(-1, -1)],  # diverging epoch
        [None, LeaderIdAndEpoch(3, 7)],  # current leader
        [None, SnapshotId(800, 4)],  # snapshot id
    )
    for i, (hw, lso, start, aborted, replica, records, diverging, leader, snap) in enumerate(
        combos
    ):
        error = PARTITION_ERRORS[i % len(PARTITION_ERRORS)]
        if records == "data":
            bufs, size = [_BATCH_A, _BATCH_B], len(_BATCH_A) + len(_BATCH_B)
        else:
            bufs, size = ([] if records == "empty" else None), 0
        out.append(FetchPartitionResult(
            i, int(error), hw, lso, start, aborted, replica, bufs, size,
            diverging, leader, snap,
        ))
    return out


def _error_partitions() -> list[FetchPartitionResult]:
    """Each error code as the handler builds it: only index and code (everything else at
    its default), and with the offsets filled in."""
    out = []
    for i, code in enumerate(PARTITION_ERRORS):
        out.append(FetchPartitionResult(2 * i, int(code)))
        out.append(FetchPartitionResult(2 * i + 1, int(code), 10, 10, 0))
    return out


def _kio_partition(mod, p: FetchPartitionResult):  # type: ignore[no-untyped-def]
    aborted = None if p.aborted_transactions is None else tuple(
        mod.AbortedTransaction(producer_id=a, first_offset=b)
        for a, b in p.aborted_transactions
    )
    records = b"".join(bytes(b) for b in p.records or ())
    extra = {}
    tagged = mod.PartitionData.__flexible__  # tagged fields exist from v12 (flexible) on
    if tagged and p.diverging_epoch is not None:
        extra["diverging_epoch"] = mod.EpochEndOffset(
            epoch=p.diverging_epoch.epoch, end_offset=p.diverging_epoch.end_offset)
    if tagged and p.current_leader is not None:
        extra["current_leader"] = mod.LeaderIdAndEpoch(
            leader_id=p.current_leader.leader_id, leader_epoch=p.current_leader.leader_epoch)
    if tagged and p.snapshot_id is not None:
        extra["snapshot_id"] = mod.SnapshotId(
            end_offset=p.snapshot_id.end_offset, epoch=p.snapshot_id.epoch)
    return kio_compat.build(
        mod.PartitionData, partition_index=p.partition_index,
        error_code=ErrorCode(p.error_code), high_watermark=p.high_watermark,
        last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
        aborted_transactions=aborted, preferred_read_replica=p.preferred_read_replica,
        records=records, **extra,
    )


def _kio_bytes(version: int, topics: list[FetchTopicResult], throttle_ms: int = 0,
               error_code: int = 0, session_id: int = 0,
               endpoints: tuple[NodeEndpoint, ...] = ()) -> bytes:
    mod = kio_compat.schema_module("fetch", version, "response")
    responses = tuple(
        kio_compat.build(
            mod.FetchableTopicResponse, topic=t.name, topic_id=t.topic_id,
            partitions=tuple(_kio_partition(mod, p) for p in t.partitions),
        )
        for t in topics
    )
    extra = {}
    if endpoints:
        extra["node_endpoints"] = tuple(
            mod.NodeEndpoint(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
            for e in endpoints
        )
    return kio_compat.encode(kio_compat.build(
        mod.FetchResponse, throttle_time=datetime.timedelta(milliseconds=throttle_ms),
        error_code=ErrorCode(error_code), session_id=session_id, responses=responses,
        **extra,
    ))


def _ours(version: int, topics: list[FetchTopicResult], **kw: object) -> bytes:
    buffers, size = encode_fetch_response(version, topics, **kw)  # type: ignore[arg-type]
    body = b"".join(bytes(b) for b in buffers)
    assert len(body) == size
    return body


def _assert_same(version: int, topics: list[FetchTopicResult]) -> None:
    if _ours(version, topics) == _kio_bytes(version, topics):
        return
    # Name the first partition that differs rather than dumping kilobytes of bytes.
    for t in topics:
        for p in t.partitions:
            one = [FetchTopicResult(t.name, t.topic_id, [p])]
            assert _ours(version, one) == _kio_bytes(version, one), (version, p)
    pytest.fail(f"v{version}: topic framing differs")


@pytest.mark.parametrize("version", VERSIONS)
def test_every_field_combination_matches_kio(version: int) -> None:
    parts = _partitions()
    topics = [
        FetchTopicResult("orders", uuid.UUID(int=0x1234), parts[: len(parts) // 2]),
        FetchTopicResult("é-topic", uuid.UUID(int=0x5678), parts[len(parts) // 2 :]),
        FetchTopicResult("empty", uuid.UUID(int=0x9ABC), []),
    ]
    _assert_same(version, topics)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_error_partition_matches_kio(version: int) -> None:
    _assert_same(version, [FetchTopicResult("t", uuid.UUID(int=7), _error_partitions())])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("error", TOP_LEVEL_ERRORS, ids=lambda e: e.name)
def test_top_level_fields_match_kio(version: int, error: ErrorCode) -> None:
    topics = [FetchTopicResult("t", uuid.UUID(int=9), [FetchPartitionResult(0, 0, 5, 5, 0)])]
    kw = {"throttle_ms": 250, "error_code": int(error), "session_id": 77}
    assert _ours(version, topics, **kw) == _kio_bytes(version, topics, 250, int(error), 77)


@pytest.mark.parametrize("version", VERSIONS)
def test_node_endpoints_match_kio(version: int) -> None:
    endpoints = (NodeEndpoint(3, "broker-3.example", 9092, "rack-a"),
                 NodeEndpoint(4, "127.0.0.1", 19092, None))
    topics = [FetchTopicResult("t", uuid.UUID(int=9), [
        FetchPartitionResult(0, int(ErrorCode.not_leader_or_follower),
                             current_leader=LeaderIdAndEpoch(3, 12)),
        FetchPartitionResult(1, int(ErrorCode.fenced_leader_epoch),
                             current_leader=LeaderIdAndEpoch(4, 2)),
    ])]
    # kio (like Kafka) has the field from v16 on; earlier versions must leave it out.
    expected = _kio_bytes(version, topics, endpoints=endpoints if version >= 16 else ())
    assert _ours(version, topics, node_endpoints=endpoints) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_error_partition_records_are_empty_not_null(version: int) -> None:
    """The out-of-range bug: librdkafka refuses a null record set ("invalid MessageSetSize
    -1") before it reads the error code, so auto.offset.reset never fired."""
    topics = [FetchTopicResult("t", uuid.UUID(int=1), [
        FetchPartitionResult(0, int(ErrorCode.offset_out_of_range), 10, 10, 0),
        FetchPartitionResult(1, int(ErrorCode.offset_out_of_range), 10, 10, 0, None, -1,
                             None, 0),
    ])]
    body = _ours(version, topics)
    cls = kio_compat.response_class(1, version)
    decoded, end = kio_compat.decode(cls, body)
    assert end == len(body)
    for p in decoded.responses[0].partitions:
        assert p.error_code == ErrorCode.offset_out_of_range
        assert p.records == b""  # kio decodes null as None


def test_record_buffers_are_not_copied() -> None:
    payload = memoryview(bytearray(b"z" * 4096))
    topics = [FetchTopicResult("t", uuid.uuid4(), [
        FetchPartitionResult(0, 0, 1, 1, 0, None, -1, [payload], len(payload))])]
    buffers, _ = encode_fetch_response(12, topics)
    assert any(b is payload for b in buffers)


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_response_decodes_with_kio(version: int) -> None:
    buffers, _ = encode_fetch_response(version, [])
    cls = kio_compat.response_class(1, version)
    obj, _ = kio_compat.decode(cls, b"".join(bytes(b) for b in buffers))
    assert obj.responses == ()


@pytest.mark.parametrize("version", [MIN_VERSION - 1, MAX_VERSION + 1])
def test_unsupported_version_refused(version: int) -> None:
    with pytest.raises(ValueError, match="unsupported Fetch version"):
        encode_fetch_response(version, [])
