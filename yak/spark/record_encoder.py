"""Arrow columns -> RecordBatch v2 bytes, vectorized with numpy.

Why: the sink must write 500k+ rows/s from a Python worker. Encoding record by record costs
~1-2 us per record in Python; here every record field is sized and scattered into one output
buffer for all records at once, and Python only loops per batch (header + CRC32C).
Headers (rare on the hot path) are encoded record by record.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from yak.protocol.compression import CODEC_NAMES, compress
from yak.protocol.primitives import write_varint
from yak.protocol.records import (
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_SEQUENCE,
    TRANSACTIONAL_BIT,
    compute_crc,
)

_CODECS = {name: codec for codec, name in CODEC_NAMES.items()}
_CRC = struct.Struct(">I")


def _zigzag(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.int64)
    return ((v << 1) ^ (v >> 63)).astype(np.uint64)


def _varint_size(z: np.ndarray) -> np.ndarray:
    size = np.ones(len(z), np.int64)
    for k in range(1, 10):
        size += z >= np.uint64(1 << (7 * k))
    return size


def _lengths(arr: pa.Array) -> np.ndarray:
    """Value lengths of a binary/string array, -1 for nulls (Kafka's null key/value)."""
    if not pa.types.is_binary(arr.type):
        arr = arr.cast(pa.binary())
    n = len(arr)
    offs = np.frombuffer(arr.buffers()[1], np.int32, n + 1, arr.offset * 4)
    lens = np.diff(offs).astype(np.int64)
    if arr.null_count:
        lens = np.where(arr.is_valid().to_numpy(zero_copy_only=False), lens, -1)
    return lens


def _put_varints_2d(
    out: np.ndarray, col: np.ndarray | int, z: np.ndarray, size: np.ndarray
) -> None:
    """Row i gets the varint z[i] at columns col[i].. of a (rows, width) byte matrix."""
    rows = np.arange(len(z))
    col = np.broadcast_to(np.asarray(col, np.int64), (len(z),))
    for k in range(int(size.max()) if len(size) else 0):
        sel = size > k
        byte = (z[sel] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (size[sel] > k + 1).astype(np.uint64) << np.uint64(7)
        out[rows[sel], col[sel] + k] = (byte | more).astype(np.uint8)


def _packed(mat: np.ndarray, sizes: np.ndarray) -> pa.Array:
    """A binary array whose i-th value is mat[i, :sizes[i]]."""
    n, width = mat.shape
    mask = np.arange(width)[None, :] < sizes[:, None]
    data = mat[mask]
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _as_binary(arr: pa.Array | None, n: int) -> pa.Array:
    if arr is None:
        return pa.repeat(pa.scalar(b"", pa.binary()), n)
    if not pa.types.is_binary(arr.type):
        arr = arr.cast(pa.binary())
    return arr.fill_null(b"") if arr.null_count else arr


@dataclass
class EncodedBatch:
    data: bytes
    records: int


def _write_field(out: bytearray, b: bytes | None) -> None:
    """A record field's bytes: zigzag varint length (-1 = null), then the bytes."""
    if b is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(b))
        out += b


def _encode_headers(headers: list | None) -> bytes:
    """One record's header section: count, then each header's key and value fields."""
    out = bytearray()
    hs = headers or []
    write_varint(out, len(hs))
    for h in hs:
        k, v = (h["key"], h["value"]) if isinstance(h, dict) else (h[0], h[1])
        _write_field(out, k.encode() if isinstance(k, str) else k)
        _write_field(out, v.encode() if isinstance(v, str) else v)
    return bytes(out)


def encode_batches(
    key: pa.Array | None,
    value: pa.Array,
    headers: pa.Array | None = None,
    *,
    max_batch_bytes: int = 1 << 20,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = 0,
    compression: str = "none",
    timestamp_ms: int | None = None,
    transactional: bool = False,
) -> list[EncodedBatch]:
    """Encode rows into as many batches as `max_batch_bytes` needs (offsets start at 0).
    `transactional`: the batches belong to the producer's ongoing transaction."""
    n = len(value)
    if n == 0:
        return []
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    vlen = _lengths(value)
    klen = np.full(n, -1, np.int64) if key is None else _lengths(key)
    hbytes: list[bytes] | None = None
    if headers is not None and headers.null_count < n:
        hbytes = [_encode_headers(h) for h in headers.to_pylist()]
        hlen = np.fromiter((len(h) for h in hbytes), np.int64, n)
    else:
        hlen = np.ones(n, np.int64)  # header count 0: one byte
    kz, vz = _zigzag(klen), _zigzag(vlen)
    ks, vs = _varint_size(kz), _varint_size(vz)
    # body without the offset delta (its size depends on the batch split)
    fixed = 1 + 1 + ks + np.maximum(klen, 0) + vs + np.maximum(vlen, 0) + hlen
    # split into batches by cumulative size (upper bound: 3 bytes offset delta, 3 length)
    cum = np.cumsum(fixed + 6)
    budget = max_batch_bytes - HEADER_SIZE
    bounds = [0]
    while bounds[-1] < n:
        base = cum[bounds[-1] - 1] if bounds[-1] else 0
        nxt = int(np.searchsorted(cum, base + budget, side="right"))
        bounds.append(max(nxt, bounds[-1] + 1))
    batch_of = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    odelta = np.arange(n, dtype=np.int64) - np.asarray(bounds[:-1], np.int64)[batch_of]
    oz = _zigzag(odelta)
    osz = _varint_size(oz)
    body = fixed + osz
    bz = _zigzag(body)
    bsz = _varint_size(bz)
    # Each record is [prefix varints][key][value length][value][headers]; Arrow's C++
    # element-wise join concatenates the five pieces of every record into one buffer.
    width = 10 + 1 + 1 + 10 + 10
    pre = np.zeros((n, width), np.uint8)
    _put_varints_2d(pre, 0, bz, bsz)
    col = bsz + 2  # attributes 0, timestamp delta 0
    _put_varints_2d(pre, col, oz, osz)
    col = col + osz
    _put_varints_2d(pre, col, kz, ks)
    pre_arr = _packed(pre, col + ks)
    mid = np.zeros((n, 10), np.uint8)
    _put_varints_2d(mid, np.zeros(n, np.int64), vz, vs)
    mid_arr = _packed(mid, vs)
    if hbytes is not None:
        suf_arr = pa.array(hbytes, pa.binary())
    else:
        suf_arr = _packed(np.zeros((n, 1), np.uint8), np.ones(n, np.int64))
    key_arr = _as_binary(key, n)
    val_arr = _as_binary(value, n)
    joined = pc.binary_join_element_wise(pre_arr, key_arr, mid_arr, val_arr, suf_arr, b"")
    jbufs = joined.buffers()
    joffs = np.frombuffer(jbufs[1], np.int32, n + 1, joined.offset * 4)
    raw = memoryview(jbufs[2])
    codec = _CODECS[compression]
    attributes = codec | (TRANSACTIONAL_BIT if transactional else 0)
    result = []
    for b in range(len(bounds) - 1):
        lo, hi = bounds[b], bounds[b + 1]
        records = raw[int(joffs[lo]) : int(joffs[hi])]
        if codec:
            records = compress(codec, records)
        buf = bytearray(HEADER_SIZE + len(records))
        count = hi - lo
        seq = base_sequence + lo if producer_id >= 0 else NO_SEQUENCE
        HEADER.pack_into(
            buf,
            0,
            0,  # base offset: the broker assigns it
            len(buf) - LOG_OVERHEAD,
            NO_PARTITION_LEADER_EPOCH,
            MAGIC,
            0,  # crc: below, once the records are in
            attributes,
            count - 1,
            now,
            now,
            producer_id,
            producer_epoch,
            seq,
            count,
        )
        buf[HEADER_SIZE:] = records
        _CRC.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
        result.append(EncodedBatch(bytes(buf), count))
    return result
