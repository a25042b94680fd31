"""`__transaction_state` records and control batches, byte for byte against Kafka's schemas.

The expected bytes are not written by hand: Kafka's `TransactionLogKey.json` /
`TransactionLogValue.json` (transaction-coordinator module, read from apache/kafka)
are transcribed below as kio entity classes, and kio's generic, schema-driven
serializer (the same one that encodes Yak's responses) produces the reference bytes.
kio ships `EndTxnMarker` and `ControlRecordTypeSchema` itself. Partition hashes are
checked against values printed by Java 17's own `String.hashCode()`.
"""

# no `from __future__ import annotations`: kio reads the field types at runtime

import io
import struct
from dataclasses import dataclass, field
from typing import ClassVar

import pytest
from kio.schema.control_record_type_schema.v0.data import ControlRecordTypeSchema
from kio.schema.end_txn_marker.v0.data import EndTxnMarker
from kio.serial import entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

from yak.errors import InvalidRecordError
from yak.protocol import control_records as ctl
from yak.protocol import records as batches
from yak.txn import records as rec
from yak.txn.state import TransactionState, TxnTransitMetadata

# ------------------------------------------------------------------ Kafka's schemas


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogKey:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    transactional_id: str = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionsSchemaV0:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    topic: str = field(metadata={"kafka_type": "string"})
    partition_ids: tuple[i32, ...] = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogValueV0:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    transaction_timeout_ms: i32 = field(metadata={"kafka_type": "int32"})
    transaction_status: i8 = field(metadata={"kafka_type": "int8"})
    transaction_partitions: tuple[PartitionsSchemaV0, ...] | None
    transaction_last_update_timestamp_ms: i64 = field(metadata={"kafka_type": "int64"})
    transaction_start_timestamp_ms: i64 = field(metadata={"kafka_type": "int64"})


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionsSchemaV1:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    topic: str = field(metadata={"kafka_type": "string"})
    partition_ids: tuple[i32, ...] = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogValueV1:
    __type__: ClassVar = EntityType.data
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    previous_producer_id: i64 = field(metadata={"kafka_type": "int64", "tag": 0}, default=i64(-1))
    next_producer_id: i64 = field(metadata={"kafka_type": "int64", "tag": 1}, default=i64(-1))
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    transaction_timeout_ms: i32 = field(metadata={"kafka_type": "int32"})
    transaction_status: i8 = field(metadata={"kafka_type": "int8"})
    transaction_partitions: tuple[PartitionsSchemaV1, ...] | None
    transaction_last_update_timestamp_ms: i64 = field(metadata={"kafka_type": "int64"})
    transaction_start_timestamp_ms: i64 = field(metadata={"kafka_type": "int64"})
    client_transaction_version: i16 = field(
        metadata={"kafka_type": "int16", "tag": 2}, default=i16(0)
    )


def kio_bytes(version: int, entity: object) -> bytes:
    """MessageUtil.toVersionPrefixedBytes: int16 version, then the entity."""
    buf = io.BytesIO()
    buf.write(struct.pack(">h", version))
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def kafka_value(t: TxnTransitMetadata, version: int) -> bytes:
    parts_cls = PartitionsSchemaV0 if version == 0 else PartitionsSchemaV1
    by_topic: dict[str, list[int]] = {}
    for topic, p in t.partitions:
        by_topic.setdefault(topic, []).append(p)
    partitions = None
    if t.state is not TransactionState.EMPTY:
        partitions = tuple(
            parts_cls(topic=topic, partition_ids=tuple(i32(p) for p in sorted(ps)))
            for topic, ps in sorted(by_topic.items())
        )
    common = dict(
        producer_id=i64(t.producer_id),
        producer_epoch=i16(t.producer_epoch),
        transaction_timeout_ms=i32(t.txn_timeout_ms),
        transaction_status=i8(t.state.value),
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=i64(t.txn_last_update_timestamp),
        transaction_start_timestamp_ms=i64(t.txn_start_timestamp),
    )
    if version == 0:
        return kio_bytes(0, TransactionLogValueV0(**common))
    return kio_bytes(
        1, TransactionLogValueV1(previous_producer_id=i64(t.last_producer_id), **common)
    )


def transit(
    state: TransactionState, partitions: set[tuple[str, int]], **kw: int
) -> TxnTransitMetadata:
    return TxnTransitMetadata(
        producer_id=kw.get("pid", 4242),
        last_producer_id=kw.get("last_pid", -1),
        producer_epoch=kw.get("epoch", 7),
        last_producer_epoch=-1,
        txn_timeout_ms=kw.get("timeout", 60_000),
        state=state,
        partitions=frozenset(partitions),
        txn_start_timestamp=kw.get("start", 1_700_000_000_123),
        txn_last_update_timestamp=kw.get("update", 1_700_000_000_456),
    )


CASES = [
    transit(TransactionState.EMPTY, set(), start=-1),
    transit(TransactionState.ONGOING, {("orders", 0), ("orders", 2), ("audit", 11)}),
    transit(TransactionState.PREPARE_COMMIT, {("ünïcode-topic", 3)}, epoch=32766),
    transit(TransactionState.PREPARE_ABORT, {("a", 0)}, pid=2**40, last_pid=17),
    transit(TransactionState.COMPLETE_COMMIT, set()),
    transit(TransactionState.COMPLETE_ABORT, set(), timeout=900_000),
]


def test_key_matches_kafka_schema() -> None:
    for txn_id in ["my-txn", "", "txn-π-ü", "x" * 300]:
        expected = kio_bytes(0, TransactionLogKey(transactional_id=txn_id))
        assert rec.encode_key(txn_id) == expected
        assert rec.decode_key(expected) == txn_id
    assert rec.decode_key(struct.pack(">h", 1) + b"\x00\x01x") is None  # unknown key version


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("t", CASES, ids=lambda t: t.state.label)
def test_value_matches_kafka_schema_and_round_trips(t: TxnTransitMetadata, version: int) -> None:
    data = rec.encode_value(t, version)
    assert data == kafka_value(t, version)
    back = rec.decode_value(data)
    assert back.state is t.state
    assert (back.producer_id, back.producer_epoch, back.txn_timeout_ms) == (
        t.producer_id,
        t.producer_epoch,
        t.txn_timeout_ms,
    )
    assert back.partitions == t.partitions
    assert (back.txn_start_timestamp, back.txn_last_update_timestamp) == (
        t.txn_start_timestamp,
        t.txn_last_update_timestamp,
    )
    # v0 cannot carry the previous producer id; v1 does (tag 0)
    assert back.last_producer_id == (t.last_producer_id if version == 1 else -1)


def test_value_v0_layout_by_hand() -> None:
    """One value spelled out, so a shared misunderstanding with the schema transcription
    would still show: Ongoing, one topic with one partition."""
    t = transit(TransactionState.ONGOING, {("t", 5)}, pid=1, epoch=2, timeout=3, start=4, update=5)
    expected = (
        b"\x00\x00"
        + (1).to_bytes(8, "big")
        + b"\x00\x02"
        + (3).to_bytes(4, "big")
        + b"\x01"
        + b"\x00\x00\x00\x01"
        + b"\x00\x01t"
        + b"\x00\x00\x00\x01"
        + b"\x00\x00\x00\x05"
        + (5).to_bytes(8, "big")
        + (4).to_bytes(8, "big")
    )
    assert rec.encode_value(t) == expected


def test_value_decoding_rejects_garbage_without_allocating() -> None:
    good = rec.encode_value(CASES[1])
    with pytest.raises(ValueError):
        rec.decode_value(good[:-3])
    with pytest.raises(ValueError):
        rec.decode_value(struct.pack(">h", 2) + good[2:])  # unknown version
    huge = bytearray(good)
    huge[17:21] = struct.pack(">i", 2**31 - 1)  # partitions array count
    with pytest.raises(ValueError):
        rec.decode_value(bytes(huge))
    bad_state = bytearray(good)
    bad_state[16] = 9
    with pytest.raises(ValueError):
        rec.decode_value(bytes(bad_state))
    with pytest.raises(ValueError):
        rec.encode_value(transit(TransactionState.EMPTY, {("t", 0)}))
    with pytest.raises(ValueError):
        rec.encode_value(transit(TransactionState.DEAD, set()))


def test_partition_matches_java_string_hash() -> None:
    # printed by Java 17: s.hashCode(), (h == MIN_VALUE ? 0 : Math.abs(h)) % 50
    assert rec.partition_for("my-txn", 50) == 45
    assert rec.partition_for("spark-q1-0", 50) == 9
    assert rec.partition_for("txn-π-ü", 50) == 22
    assert rec.partition_for("polygenelubricants", 50) == 0  # hashCode == Integer.MIN_VALUE
    assert rec.partition_for("transactional-id-42", 50) == 4


# ------------------------------------------------------------------ control batches


def test_marker_key_and_value_match_kafka_schemas() -> None:
    for control_type in (ctl.ABORT, ctl.COMMIT):
        assert ctl.encode_control_key(control_type) == kio_bytes(
            0, ControlRecordTypeSchema(type_=i16(control_type))
        )
    assert ctl.encode_marker_value(5) == kio_bytes(0, EndTxnMarker(coordinator_epoch=i32(5)))
    m = ctl.decode_marker(ctl.encode_control_key(ctl.COMMIT), ctl.encode_marker_value(9))
    assert m == ctl.EndTxnMarker(True, 9)


def test_marker_decoding_is_strict_where_kafka_is() -> None:
    with pytest.raises(InvalidRecordError):
        ctl.decode_marker(b"\x00\x00\x00", ctl.encode_marker_value(1))  # short key
    with pytest.raises(InvalidRecordError):
        ctl.decode_marker(b"\xff\xff\x00\x01", ctl.encode_marker_value(1))  # negative version
    with pytest.raises(InvalidRecordError):
        ctl.decode_marker(ctl.encode_control_key(2), ctl.encode_marker_value(1))  # LEADER_CHANGE
    with pytest.raises(InvalidRecordError):
        ctl.decode_marker(ctl.encode_control_key(ctl.ABORT), b"\x00\x00\x00")
    # a later key/value version is read as version 0 (fields may only be appended)
    m = ctl.decode_marker(b"\x00\x01\x00\x00", b"\x00\x01\x00\x00\x00\x07extra")
    assert m == ctl.EndTxnMarker(False, 7)


def test_marker_batch_layout() -> None:
    batch = ctl.build_marker_batch(
        77,
        3,
        12,
        commit=True,
        timestamp=1_700_000_000_000,
        base_offset=40,
        partition_leader_epoch=2,
    )
    h = batches.parse_header(batch, 0)
    assert h.attributes == 0x30  # control | transactional, no compression, CreateTime
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 3, -1)
    assert (h.base_offset, h.record_count, h.last_offset_delta) == (40, 1, 0)
    assert h.partition_leader_epoch == 2
    assert batches.crc_is_valid(batch, 0, h)
    (r,) = batches.decode_records(batch)
    assert r.key == b"\x00\x00\x00\x01" and r.value == b"\x00\x00\x00\x00\x00\x0c"
    assert r.timestamp == 1_700_000_000_000 and r.headers == []
    assert ctl.read_marker_batch(batch) == ctl.EndTxnMarker(True, 12)
    abort = ctl.build_marker_batch(77, 3, 12, commit=False)
    assert ctl.read_marker_batch(abort) == ctl.EndTxnMarker(False, 12)
    with pytest.raises(InvalidRecordError):
        ctl.read_marker_batch(batches.build_batch([batches.Record(b"k", b"v")]))


def _control_batch(key: bytes | None, value: bytes | None, *, codec: int = 0,
                   headers: list | None = None, timestamp: int | None = None) -> bytes:
    return batches.build_batch(
        [batches.Record(key, value, timestamp, headers or [])], producer_id=5,
        producer_epoch=0, transactional=True, control=True, compression_type=codec,
        base_timestamp=0 if timestamp is not None else None)


def test_read_control_fields_agrees_with_the_full_decode() -> None:
    """Recovery's in-place read of a marker (control type, coordinator epoch) gives what
    decoding the record whole gives, on the canonical layout and off it."""
    def full(batch: bytes) -> tuple[int, int]:
        (r,) = batches.decode_records(batch)
        ctype = ctl.decode_control_type(r.key)
        v = r.value
        return ctype, (-1 if v is None or len(v) < 6 else struct.unpack_from(">hi", v)[1])

    cases = [
        ctl.build_marker_batch(77, 3, 12, commit=True),  # canonical
        ctl.build_marker_batch(77, 3, -7, commit=False),
        # off the canonical layout: a two-byte timestamp delta, a longer value, headers,
        # a short value, no value, compressed
        _control_batch(ctl.encode_control_key(1), ctl.encode_marker_value(4), timestamp=10_000),
        _control_batch(ctl.encode_control_key(0), ctl.encode_marker_value(9) + b"later"),
        _control_batch(ctl.encode_control_key(1), ctl.encode_marker_value(2),
                       headers=[("h", b"x")]),
        _control_batch(ctl.encode_control_key(0), b"\x00\x00"),
        _control_batch(ctl.encode_control_key(1), None),
        _control_batch(ctl.encode_control_key(1), ctl.encode_marker_value(31), codec=1),
        _control_batch(b"\x00\x01\x00\x01", ctl.encode_marker_value(3)),  # later key version
    ]
    for batch in cases:
        h = batches.parse_header(batch, 0)
        assert ctl.read_control_fields(batch, h) == full(batch), batch.hex()
        assert ctl.read_control_fields(memoryview(batch), h) == full(batch)
    assert ctl.read_control_fields(cases[0], batches.parse_header(cases[0], 0)) == (1, 12)
    assert ctl.read_control_fields(cases[1], batches.parse_header(cases[1], 0)) == (0, -7)

    for bad_key in (b"\xff\xff\x00\x01", b"\x00\x00\x00", None):  # negative version, short
        batch = _control_batch(bad_key, ctl.encode_marker_value(1))
        with pytest.raises(InvalidRecordError):
            ctl.read_control_fields(batch, batches.parse_header(batch, 0))
