"""RecordBatch v2: the wire format of Produce/Fetch and, byte for byte, the on-disk format.

The hot paths (append, fetch, recovery) only ever touch the 61-byte batch header: they parse
it with one `struct` call from a memoryview, check the CRC32C over the rest without copying,
and patch the base offset / leader epoch (fields outside the CRC) in place. Records are
decoded only by the cleaner, timestamp look-ups inside a batch, control batches and tests.

Layout (big-endian): baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 |
magic int8 | crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
recordCount int32 | records. The CRC (Castagnoli) covers attributes..end.
"""

from __future__ import annotations

import struct
import time
from collections import namedtuple
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import crc32c

from yak.errors import CorruptRecordError
from yak.protocol import compression
from yak.protocol.primitives import read_varlong, write_varlong

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part of the header batchLength excludes
PARTITION_LEADER_EPOCH_OFFSET = 12
OFFSET_PREFIX_SIZE = 16  # baseOffset, batchLength, partitionLeaderEpoch: outside the CRC
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # first byte covered by the CRC
MAX_TIMESTAMP_OFFSET = 35
MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # set: LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# The 16 bytes storage rewrites when it assigns offsets (none of them CRC-covered).
OFFSET_PREFIX = struct.Struct(">qii")
_BASE_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_CRC = struct.Struct(">I")
_ATTRS = struct.Struct(">h")
_INT64 = struct.Struct(">q")

_HEADER_FIELDS = (
    "base_offset",
    "batch_length",
    "partition_leader_epoch",
    "magic",
    "crc",
    "attributes",
    "last_offset_delta",
    "base_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "record_count",
)


class BatchHeader(namedtuple("BatchHeader", _HEADER_FIELDS)):  # type: ignore[misc]
    """The 61-byte RecordBatch v2 header, fields by Kafka's names.

    A tuple subclass built straight from one `struct.unpack_from` (`read_header`), because
    it is created once per batch on the append, recovery and read paths: a dataclass costs
    ~3x more to build, and these fields read at C speed (namedtuple's descriptors). Derived
    values (`size`, `last_offset`, ...) are properties; hot loops read the stored fields.
    """

    __slots__ = ()

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies in the log."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)

    @property
    def framing_ok(self) -> bool:
        """Magic 2 and a batch length that can hold the header: the bytes are a batch start."""
        return self.magic == MAGIC and self.batch_length >= HEADER_SIZE - LOG_OVERHEAD


_new_tuple = tuple.__new__
_unpack_header = HEADER.unpack_from


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The header at `pos`, unchecked (the caller has HEADER_SIZE bytes and checks framing):
    the one parse per batch of the hot paths."""
    return _new_tuple(BatchHeader, _unpack_header(buf, pos))


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at `pos`; CorruptRecordError if it is short or not magic 2."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"truncated batch header at position {pos}")
    h = _new_tuple(BatchHeader, _unpack_header(buf, pos))
    if h.magic != MAGIC:
        raise CorruptRecordError(f"unsupported record batch magic {h.magic}")
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch length {h.batch_length} smaller than a header")
    return h


def iter_batches(
    buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch; stops at a trailing partial batch.

    Fetch responses may legally end with a partial batch, so a short tail is not an error
    here; a header that is not magic 2 is.
    """
    end = len(buf) if end is None else end
    while end - pos >= HEADER_SIZE:
        h = parse_header(buf, pos)
        if pos + h.size > end:
            return
        yield pos, h
        pos += h.size


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return crc32c.crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])


def crc_is_valid(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    return compute_crc(buf, pos, header.size) == header.crc


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Outside the CRC, so no checksum work: this is why offsets can be assigned for free."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def patch_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def log_append_time_header(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    base_offset: int,
    leader_epoch: int,
    timestamp: int,
) -> bytearray:
    """A copy of the batch's 61-byte header with offsets assigned, marked LogAppendTime with
    `timestamp` as its max timestamp, and the CRC recomputed over it and the records after it
    (which are not copied: the caller writes them from `buf` as they are)."""
    hdr = bytearray(buf[pos : pos + HEADER_SIZE])
    OFFSET_PREFIX.pack_into(hdr, 0, base_offset, header.batch_length, leader_epoch)
    _ATTRS.pack_into(hdr, ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(hdr, MAX_TIMESTAMP_OFFSET, timestamp)
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    body = mv[pos + HEADER_SIZE : pos + header.batch_length + LOG_OVERHEAD]
    crc = crc32c.crc32c(body, crc32c.crc32c(memoryview(hdr)[ATTRIBUTES_OFFSET:]))
    _CRC.pack_into(hdr, CRC_OFFSET, crc)
    return hdr


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Mark the batch LogAppendTime with `timestamp` and recompute the CRC (covered fields)."""
    (attrs,) = _ATTRS.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _ATTRS.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    length = read_header(buf, pos).batch_length
    _CRC.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, length + LOG_OVERHEAD))


# --- records (the slow path) ---------------------------------------------------------------


@dataclass(slots=True)
class Record:
    """One record. `offset`/`timestamp` None mean "next offset" / "now" when building."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    offset: int | None = None


def _write_varint(out: bytearray, n: int) -> None:
    """A record field's zigzag varint (lengths, deltas: varlong covers them all)."""
    write_varlong(out, n)


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    return read_varlong(buf, pos, None, CorruptRecordError)


def _write_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(b))
        out += b


def _encode_record(r: Record, offset_delta: int, timestamp_delta: int) -> bytes:
    body = bytearray(b"\x00")  # record attributes (unused)
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    _write_bytes(body, r.key)
    _write_bytes(body, r.value)
    _write_varint(body, len(r.headers))
    for hk, hv in r.headers:
        _write_bytes(body, hk.encode())
        _write_bytes(body, hv)
    out = bytearray()
    _write_varint(out, len(body))
    out += body
    return bytes(out)


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression_type: int = compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    base_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    delete_horizon: bool = False,
) -> bytes:
    """Encode a batch. Records with `offset` set keep it (the cleaner preserves offsets);
    `last_offset_delta` may exceed the record count for the same reason."""
    now = int(time.time() * 1000)
    stamps = [now if r.timestamp is None else r.timestamp for r in records]
    if base_timestamp is None:
        base_timestamp = stamps[0] if stamps else now
    max_ts = max(stamps) if stamps else base_timestamp
    parts = []
    delta = -1
    for i, r in enumerate(records):
        delta = i if r.offset is None else r.offset - base_offset
        parts.append(_encode_record(r, delta, stamps[i] - base_timestamp))
    body = b"".join(parts)
    if compression_type != compression.NONE:
        body = compression.compress(compression_type, body)
    if last_offset_delta is None:
        last_offset_delta = max(delta, 0)
    attrs = compression_type & COMPRESSION_MASK
    if log_append_time:
        attrs |= TIMESTAMP_TYPE_BIT
    if transactional:
        attrs |= TRANSACTIONAL_BIT
    if control:
        attrs |= CONTROL_BIT
    if delete_horizon:
        attrs |= DELETE_HORIZON_BIT
    buf = bytearray(HEADER_SIZE + len(body))
    HEADER.pack_into(
        buf,
        0,
        base_offset,
        len(buf) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attrs,
        last_offset_delta,
        base_timestamp,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    buf[HEADER_SIZE:] = body
    _CRC.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise CorruptRecordError("record field overruns the batch")
    return buf[pos : pos + n], pos + n


def decode_records(
    batch: bytes | bytearray | memoryview, max_size: int = compression.DEFAULT_MAX_SIZE
) -> list[Record]:
    """Decode every record of one batch (absolute offsets and timestamps filled in)."""
    h = parse_header(batch, 0)
    mv = memoryview(batch)[HEADER_SIZE : h.size]
    body = compression.decompress(h.compression, mv, max_size)
    out: list[Record] = []
    pos = 0
    log_append = h.is_log_append_time
    for _ in range(h.record_count):
        length, pos = _read_varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise CorruptRecordError("record overruns the batch")
        pos += 1  # attributes
        ts_delta, pos = _read_varint(body, pos)
        off_delta, pos = _read_varint(body, pos)
        key, pos = _read_bytes(body, pos)
        value, pos = _read_bytes(body, pos)
        nh, pos = _read_varint(body, pos)
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(nh):
            hk, pos = _read_bytes(body, pos)
            hv, pos = _read_bytes(body, pos)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        if pos != end:
            raise CorruptRecordError("record length does not match its fields")
        ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        out.append(Record(key, value, ts, headers, h.base_offset + off_delta))
    if pos != len(body):
        raise CorruptRecordError("trailing bytes after the last record")
    return out


@dataclass(slots=True)
class RecordSpans:
    """The cleaner's view of a batch: per record (offset, key, is_tombstone, start, end) with
    start/end the record's byte range in `body` (the decompressed records section)."""

    header: BatchHeader
    body: bytes
    records: list[tuple[int, bytes | None, bool, int, int]]


def scan_keys(
    batch: bytes | bytearray | memoryview, max_size: int = compression.DEFAULT_MAX_SIZE
) -> RecordSpans:
    """Keys and byte ranges of each record, without copying values or decoding headers."""
    h = parse_header(batch, 0)
    mv = memoryview(batch)[HEADER_SIZE : h.size]
    body = compression.decompress(h.compression, mv, max_size)
    out: list[tuple[int, bytes | None, bool, int, int]] = []
    pos = 0
    base = h.base_offset
    n = len(body)
    try:
        # Hot loop of the cleaner: one- and two-byte varints decoded inline (call overhead
        # dominates in CPython); longer ones fall back to _read_varint.
        for _ in range(h.record_count):
            start = pos
            b = body[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif body[pos + 1] < 0x80:
                u = (b & 0x7F) | (body[pos + 1] << 7)
                length = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                length, pos = _read_varint(body, pos)
            end = pos + length
            if length < 0 or end > n:
                raise CorruptRecordError("record overruns the batch")
            pos += 1  # attributes
            while body[pos] & 0x80:  # timestamp delta: skipped
                pos += 1
            pos += 1
            b = body[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                off_delta, pos = _read_varint(body, pos)
            b = body[pos]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = _read_varint(body, pos)
            key = None
            if klen >= 0:
                key = body[pos : pos + klen]
                pos += klen
            # value length: only its sign matters (null value = tombstone): zigzag -1 is 0x01
            out.append((base + off_delta, key, body[pos] == 1, start, end))
            pos = end
    except IndexError:
        raise CorruptRecordError("record overruns the batch") from None
    return RecordSpans(h, body, out)


def keyless_records(
    batch: bytes | bytearray | memoryview,
    header: BatchHeader,
    max_size: int = compression.DEFAULT_MAX_SIZE,
) -> list[int]:
    """Indexes (within the batch) of the records that have a null key.

    For compacted topics, which refuse them at produce time (Kafka's LogValidator). Reads
    each record's length, skips attributes and the timestamp and offset deltas, and looks at
    one byte of the key length (null is zigzag -1, the single byte 0x01): no key or value is
    copied. A compressed batch is decompressed first, which is the real cost of this check.
    """
    mv = memoryview(batch)[HEADER_SIZE : header.batch_length + LOG_OVERHEAD]
    codec = header.attributes & COMPRESSION_MASK
    # bytes, not the memoryview: indexing bytes is ~2x cheaper, and the copy is one memcpy.
    body = compression.decompress(codec, mv, max_size) if codec != compression.NONE else bytes(mv)
    out: list[int] = []
    pos = 0
    n = len(body)
    try:
        # One- and two-byte record lengths inline (call overhead dominates in CPython).
        for i in range(header.record_count):
            b = body[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif body[pos + 1] < 0x80:
                u = (b & 0x7F) | (body[pos + 1] << 7)
                length = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                length, pos = _read_varint(body, pos)
            end = pos + length
            if length < 0 or end > n:
                raise CorruptRecordError("record overruns the batch")
            p = pos + 1  # after the attributes byte
            while body[p] & 0x80:  # timestamp delta
                p += 1
            p += 1
            while body[p] & 0x80:  # offset delta
                p += 1
            p += 1
            if p >= end:
                raise CorruptRecordError("record shorter than its fields")
            if body[p] == 1:  # key length -1: null key
                out.append(i)
            pos = end
    except IndexError:
        raise CorruptRecordError("record overruns the batch") from None
    return out


def rebuild_batch(spans: RecordSpans, keep: list[int]) -> bytes:
    """A batch holding only the records at indexes `keep`, copied verbatim.

    Offset and timestamp deltas are relative to the batch's base offset and base timestamp,
    which stay, as does lastOffsetDelta; so the kept records' bytes need no re-encoding. Only
    the records section (recompressed with the same codec), count, length and CRC change.
    """
    h = spans.header
    body = spans.body
    parts = [body[spans.records[i][3] : spans.records[i][4]] for i in keep]
    records = b"".join(parts)
    if h.compression != compression.NONE:
        records = compression.compress(h.compression, records)
    buf = bytearray(HEADER_SIZE + len(records))
    # Everything else stays, maxTimestamp included: Kafka keeps the original too (retention
    # and the time index rely on it, and LogAppendTime batches carry their time there).
    HEADER.pack_into(
        buf,
        0,
        *h._replace(batch_length=len(buf) - LOG_OVERHEAD, crc=0, record_count=len(parts)),
    )
    buf[HEADER_SIZE:] = records
    _CRC.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def batch_bytes(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bytes:
    return bytes(memoryview(buf)[pos : pos + header.size])
