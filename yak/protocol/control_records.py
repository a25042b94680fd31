"""Control batches: the COMMIT/ABORT markers that end a transaction in a partition.

A partition leader appends one on the transaction coordinator's behalf
(WriteTxnMarkers). Kafka's layout, which every client's read_committed logic and
Kafka's own log tools depend on:

    batch attributes: control (0x20) | transactional (0x10), uncompressed, CreateTime;
    producer id/epoch of the transaction, base sequence -1, exactly one record;
    record key   = ControlRecordType: int16 version (0) | int16 type (0 ABORT, 1 COMMIT)
    record value = EndTxnMarker v0: int16 version (0) | int32 coordinator epoch

Pure functions over bytes (no I/O): storage reads markers to maintain the aborted
transaction index and the last stable offset, the partition layer builds them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from yak.errors import CorruptRecordError, InvalidRecordError
from yak.protocol import compression, records
from yak.protocol.primitives import read_varlong

__all__ = [
    "ABORT",
    "COMMIT",
    "EndTxnMarker",
    "encode_control_key",
    "decode_control_type",
    "encode_marker_value",
    "decode_marker",
    "build_marker_batch",
    "read_marker_batch",
    "read_control_fields",
]

ABORT = 0
COMMIT = 1
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_CANONICAL_KEY_LEN = 8  # zigzag varint of 4 (the key's length)
_CANONICAL_VALUE_LEN = 12  # zigzag varint of 6 (the value's length)


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    commit: bool
    coordinator_epoch: int

    @property
    def control_type(self) -> int:
        return COMMIT if self.commit else ABORT


def encode_control_key(control_type: int) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, control_type)


def decode_control_type(key: bytes | memoryview | None) -> int:
    """The control record type (0 ABORT, 1 COMMIT, others are not transaction markers).

    Like Kafka, a key version above 0 is read as version 0 (later versions may only
    append fields); a negative version or a short key is corrupt."""
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError("control record key shorter than 4 bytes")
    version, control_type = _KEY.unpack_from(key, 0)
    if version < 0:
        raise InvalidRecordError(f"control record key version {version}")
    return int(control_type)


def encode_marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def decode_marker(key: bytes | memoryview | None, value: bytes | memoryview | None) -> EndTxnMarker:
    control_type = decode_control_type(key)
    if control_type not in (ABORT, COMMIT):
        raise InvalidRecordError(f"control record type {control_type} is not a transaction marker")
    if value is None or len(value) < _VALUE.size:
        raise InvalidRecordError("EndTxnMarker value shorter than 6 bytes")
    version, epoch = _VALUE.unpack_from(value, 0)
    if version < 0:
        raise InvalidRecordError(f"EndTxnMarker version {version}")
    return EndTxnMarker(control_type == COMMIT, int(epoch))


def build_marker_batch(
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    *,
    timestamp: int | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = records.NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """One control batch holding one marker (offsets and leader epoch are patched by
    the log on append, like any batch)."""
    rec = records.Record(
        encode_control_key(COMMIT if commit else ABORT),
        encode_marker_value(coordinator_epoch),
        timestamp,
    )
    return records.build_batch(
        [rec],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=records.NO_SEQUENCE,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def read_marker_batch(batch: bytes | bytearray | memoryview) -> EndTxnMarker:
    """The marker of one control batch (the batch's header says whose transaction)."""
    h = records.parse_header(batch, 0)
    if not (h.is_control and h.is_transactional):
        raise InvalidRecordError("not a transactional control batch")
    recs = records.decode_records(batch)
    if len(recs) != 1:
        raise InvalidRecordError(f"a marker batch holds one record, not {len(recs)}")
    return decode_marker(recs[0].key, recs[0].value)


def read_control_fields(batch: bytes | bytearray | memoryview,
                        h: records.BatchHeader) -> tuple[int, int]:
    """(control type, coordinator epoch) of a control batch's first record, read in place.

    Recovery and replication end a transaction for every marker they read back; decoding
    the batch whole (a Record object, its headers list, every field) cost about a third of
    a log's recovery (docs/reliability.md, finding 9). This reads the six fields in front of
    the key and the value and nothing else. A compressed control batch (no client or broker
    writes one, but the format allows it) takes the full decode. The coordinator epoch is -1
    when the value is too short to hold one, as `decode_marker` would refuse; the control
    type raises InvalidRecordError as `decode_control_type` does."""
    p = records.HEADER_SIZE
    if (h.compression == compression.NONE and h.record_count >= 1 and h.size >= p + 16
            and batch[p] < 0x80 and batch[p + 2] < 0x80 and batch[p + 3] < 0x80
            and batch[p + 4] == _CANONICAL_KEY_LEN and batch[p + 9] == _CANONICAL_VALUE_LEN):
        # The layout every marker has (one-byte length and deltas, a 4-byte key, a 6-byte
        # value): unpack in place, no varint calls.
        version, control_type = _KEY.unpack_from(batch, p + 5)
        if version < 0:
            raise InvalidRecordError(f"control record key version {version}")
        return int(control_type), int(_VALUE.unpack_from(batch, p + 10)[1])
    if h.compression != compression.NONE:
        recs = records.decode_records(batch)
        key = recs[0].key if recs else None
        value = recs[0].value if recs else None
    else:
        if h.record_count < 1:
            raise InvalidRecordError("control batch without a record")
        end = h.size
        pos = p
        _length, pos = read_varlong(batch, pos, end, CorruptRecordError)
        pos += 1  # record attributes
        _ts_delta, pos = read_varlong(batch, pos, end, CorruptRecordError)
        _offset_delta, pos = read_varlong(batch, pos, end, CorruptRecordError)
        key, pos = _read_field(batch, pos, end)
        value, pos = _read_field(batch, pos, end)
    control_type = decode_control_type(key)
    if value is None or len(value) < _VALUE.size:
        return control_type, -1
    return control_type, int(_VALUE.unpack_from(value, 0)[1])


def _read_field(batch: bytes | bytearray | memoryview, pos: int,
                end: int) -> tuple[bytes | bytearray | memoryview | None, int]:
    n, pos = read_varlong(batch, pos, end, CorruptRecordError)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptRecordError("control record field overruns the batch")
    return batch[pos:pos + n], pos + n
