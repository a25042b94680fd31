"""RecordBatch v2 bytes -> Arrow columns, without a Python object per record.

Why this shape: Spark's Python data source is only fast if `read()` yields Arrow record
batches, and building a Python tuple per record caps a reader near 0.6M rows/s. So the only
per-record Python work here is one tight loop that finds where each record starts (the
length varint makes that inherently sequential); every field after that is decoded for all
records at once with numpy (vectorized varints), and keys/values become Arrow binary arrays
built from buffers: a `binary_view` array pointing into the fetched bytes, which Arrow's C++
cast turns into the contiguous `binary` layout Spark wants.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from yak.errors import CorruptRecordError
from yak.protocol.compression import decompress
from yak.protocol.records import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    decode_records,
    read_header,
)

_unpack_header = HEADER.unpack_from

HEADERS_TYPE = pa.list_(
    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)


@dataclass
class DecodedColumns:
    """Columns of the records whose offsets fall in [start, end) (end excluded)."""

    key: pa.Array
    value: pa.Array
    offset: np.ndarray  # int64
    timestamp_ms: np.ndarray  # int64
    timestamp_type: np.ndarray  # int32
    headers: pa.Array | None
    next_offset: int  # offset after the last batch scanned (resume point)

    def __len__(self) -> int:
        return len(self.offset)


@dataclass
class BatchInfo:
    """What the exactly-once sink needs from a batch header without decoding records."""

    base_offset: int
    next_offset: int
    producer_id: int
    record_count: int
    pos: int
    size: int


def scan_batches(buf: bytes | bytearray | memoryview) -> list[BatchInfo]:
    out = []
    pos = 0
    n = len(buf)
    while pos + HEADER_SIZE <= n:
        h = read_header(buf, pos)
        size = h.size
        if pos + size > n:
            break
        if h.magic != MAGIC:
            raise CorruptRecordError(f"unsupported record batch magic {h.magic}")
        out.append(BatchInfo(h.base_offset, h.next_offset, h.producer_id, h.record_count,
                             pos, size))
        pos += size
    return out


def _is_abort_marker(batch: memoryview) -> bool:
    """A control batch's record key is (version int16, type int16); type 0 is ABORT."""
    recs = decode_records(bytes(batch))
    return bool(recs) and recs[0].key is not None and recs[0].key[2:4] == b"\0\0"


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints starting at each position: (values, encoded sizes). `buf` is padded."""
    if len(pos) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    b = buf[pos]
    raw = (b & 0x7F).astype(np.int64)
    size = np.ones(len(pos), np.int64)
    active = np.nonzero(b & 0x80)[0]
    k = 1
    while len(active):
        if k >= 10:
            raise CorruptRecordError("varint too long")
        b = buf[pos[active] + k]
        raw[active] |= (b & 0x7F).astype(np.int64) << (7 * k)
        size[active] += 1
        active = active[(b & 0x80) != 0]
        k += 1
    return (raw >> 1) ^ -(raw & 1), size


def _binary(
    padded_np: np.ndarray, buf_pa: pa.Buffer, start: np.ndarray, length: np.ndarray
) -> pa.Array:
    """A `binary` array of buf[start:start+length] (length -1 = null), built from buffers."""
    n = len(start)
    valid = length >= 0
    ln = np.where(valid, length, 0).astype(np.int32)
    views = np.zeros((n, 4), np.int32)
    raw = views.view(np.uint8).reshape(n, 16)
    long = ln > 12
    window = np.lib.stride_tricks.sliding_window_view(padded_np, 12)[start]
    keep = (np.arange(12)[None, :] < ln[:, None]) | long[:, None]
    raw[:, 4:16] = window * keep
    views[:, 0] = ln
    li = np.nonzero(long)[0]
    if len(li):
        views[li, 2] = 0
        views[li, 3] = start[li].astype(np.int32)
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    arr = pa.Array.from_buffers(
        pa.binary_view(),
        n,
        [validity, pa.py_buffer(views), buf_pa],
        null_count=int(n - valid.sum()),
    )
    return arr.cast(pa.binary())


def decode(
    buf: bytes | bytearray | memoryview,
    start_offset: int = 0,
    end_offset: int | None = None,
    *,
    include_headers: bool = False,
    aborted: list[tuple[int, int]] | None = None,
) -> DecodedColumns:
    """Decode every data record in `buf` (concatenated batches, maybe a truncated tail).

    `aborted` is a read_committed Fetch response's (producer id, first offset) list: data of
    those transactions is dropped, as Kafka's consumer does, by batch headers alone.
    """
    pending = sorted(aborted or [], key=lambda a: a[1])
    active: set[int] = set()
    mv = memoryview(buf)
    n = len(mv)
    pieces: list[bytes | memoryview] = []
    # per batch: base offset, base timestamp, max timestamp, log-append flag, record count
    b_base, b_ts, b_max, b_lat, b_cnt = [], [], [], [], []
    pos = 0
    next_offset = start_offset
    while pos + HEADER_SIZE <= n:
        # One parse per batch with the shared layout (BatchHeader's fields, in order).
        # HEADER.unpack_from rather than read_header: the named view costs ~0.25 us more
        # per batch, ~10% of this loop's work on a fetch of small batches.
        (base, length, _e, magic, _c, attrs, lod, bts, mts, pid, _pe, _bs, cnt) = (
            _unpack_header(mv, pos)
        )
        size = length + LOG_OVERHEAD
        if pos + size > n:
            break  # a partial batch at the end of a fetch response
        if magic != MAGIC:
            raise CorruptRecordError(f"unsupported record batch magic {magic}")
        last = base + lod
        if end_offset is not None and base >= end_offset:
            break
        body = mv[pos + HEADER_SIZE : pos + size]
        pos += size
        next_offset = max(next_offset, last + 1)
        while pending and pending[0][1] <= last:
            active.add(pending.pop(0)[0])
        if attrs & CONTROL_BIT:
            if pid in active and _is_abort_marker(mv[pos - size : pos]):
                active.discard(pid)
            continue
        if attrs & TRANSACTIONAL_BIT and pid in active:
            continue
        if last < start_offset or cnt == 0:
            continue
        codec = attrs & COMPRESSION_MASK
        if codec:
            body = decompress(codec, body)
        pieces.append(body)
        b_base.append(base)
        b_ts.append(bts)
        b_max.append(mts)
        b_lat.append(1 if attrs & TIMESTAMP_TYPE_BIT else 0)
        b_cnt.append(cnt)
    if end_offset is not None:
        next_offset = min(next_offset, end_offset) if next_offset > end_offset else next_offset
    data = b"".join(pieces) if len(pieces) != 1 else bytes(pieces[0])
    total = sum(b_cnt)
    # The tight scan: record starts. Everything else is vectorized.
    padded = np.frombuffer(data + b"\0" * 16, np.uint8)
    if b_cnt and max(b_cnt) * 90 < total:
        starts, lens = _scan_parallel(padded, [len(x) for x in pieces], b_cnt, len(data))
    else:
        starts, lens = _scan_strided(data, padded, total)
    buf_pa = pa.py_buffer(data)
    batch_of = np.repeat(np.arange(len(b_cnt)), b_cnt)
    cur = starts + 1  # skip record attributes
    ts_delta, sz = _varints(padded, cur)
    cur = cur + sz
    off_delta, sz = _varints(padded, cur)
    cur = cur + sz
    key_len, sz = _varints(padded, cur)
    cur = cur + sz
    key_pos = cur
    cur = cur + np.maximum(key_len, 0)
    val_len, sz = _varints(padded, cur)
    cur = cur + sz
    val_pos = cur
    cur = cur + np.maximum(val_len, 0)
    base_arr = np.asarray(b_base, np.int64)[batch_of]
    offsets = base_arr + off_delta
    lat = np.asarray(b_lat, np.int32)[batch_of]
    ts = np.where(
        lat == 1,
        np.asarray(b_max, np.int64)[batch_of],
        np.asarray(b_ts, np.int64)[batch_of] + ts_delta,
    )
    headers = _headers(padded, buf_pa, cur, starts + lens) if include_headers else None
    keep = offsets >= start_offset
    if end_offset is not None:
        keep &= offsets < end_offset
    if not keep.all():
        sel = np.nonzero(keep)[0]
        key_pos, key_len, val_pos, val_len = key_pos[sel], key_len[sel], val_pos[sel], val_len[sel]
        offsets, ts, lat = offsets[sel], ts[sel], lat[sel]
        if headers is not None:
            headers = headers.take(pa.array(sel))
    return DecodedColumns(
        key=_binary(padded, buf_pa, key_pos, key_len),
        value=_binary(padded, buf_pa, val_pos, val_len),
        offset=offsets,
        timestamp_ms=ts,
        timestamp_type=lat,
        headers=headers,
        next_offset=next_offset,
    )


def _headers(padded: np.ndarray, buf_pa: pa.Buffer, cur: np.ndarray, ends: np.ndarray) -> pa.Array:
    """Headers as list<struct<key string, value binary>>, decoded round by round.

    Round r decodes the r-th header of every record that has more than r headers, so the
    number of Python iterations is the largest header count, not the number of records.
    """
    count, sz = _varints(padded, cur)
    if (count < 0).any():
        raise CorruptRecordError("negative header count")
    cur = cur + sz
    n = len(cur)
    total = int(count.sum())
    list_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(count, out=list_offsets[1:])
    hk_pos = np.zeros(total, np.int64)
    hk_len = np.zeros(total, np.int64)
    hv_pos = np.zeros(total, np.int64)
    hv_len = np.zeros(total, np.int64)
    rnd = 0
    active = np.nonzero(count > 0)[0]
    while len(active):
        c = cur[active]
        kl, s = _varints(padded, c)
        c = c + s
        slot = list_offsets[active] + rnd
        hk_pos[slot], hk_len[slot] = c, kl
        c = c + np.maximum(kl, 0)
        vl, s = _varints(padded, c)
        c = c + s
        hv_pos[slot], hv_len[slot] = c, vl
        c = c + np.maximum(vl, 0)
        cur[active] = c
        rnd += 1
        active = active[count[active] > rnd]
    if not np.array_equal(cur, ends):
        raise CorruptRecordError("record length does not match its fields")
    keys = _binary(padded, buf_pa, hk_pos, np.maximum(hk_len, 0)).cast(pa.string())
    vals = _binary(padded, buf_pa, hv_pos, hv_len)
    structs = pa.StructArray.from_arrays([keys, vals], fields=list(HEADERS_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(list_offsets), structs, type=HEADERS_TYPE)


def _scan_serial(data: bytes, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Record starts by walking length varints: ~0.3 us per record, used for big batches."""
    starts_l: list[int] = []
    lens_l: list[int] = []
    add_start = starts_l.append
    add_len = lens_l.append
    p = 0
    dn = len(data)
    try:
        for _ in range(total):
            b = data[p]
            if b < 0x80:
                ln = b
                p += 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    ln = (b & 0x7F) | (c << 7)
                    p += 2
                else:
                    ln, shift, p = b & 0x7F, 7, p + 1
                    while True:
                        c = data[p]
                        p += 1
                        ln |= (c & 0x7F) << shift
                        if c < 0x80:
                            break
                        shift += 7
            ln = (ln >> 1) ^ -(ln & 1)
            add_start(p)
            add_len(ln)
            p += ln
    except IndexError:
        raise CorruptRecordError("record count exceeds the batch's records") from None
    if p != dn:
        raise CorruptRecordError("record lengths do not add up to the batch size")
    return np.array(starts_l, np.int64), np.array(lens_l, np.int64)


def _scan_parallel(
    padded: np.ndarray, sizes: list[int], counts: list[int], dn: int
) -> tuple[np.ndarray, np.ndarray]:
    """Record starts for many batches at once: step r finds the r-th record of every batch.

    Batches are independent chains, so the Python loop runs max(records per batch) times
    instead of once per record: producers' 16 KiB-1 MiB batches make this 10-100x fewer.
    """
    cnt = np.asarray(counts, np.int64)
    bend = np.cumsum(np.asarray(sizes, np.int64))
    cur = bend - np.asarray(sizes, np.int64)
    first = np.zeros(len(cnt), np.int64)
    np.cumsum(cnt[:-1], out=first[1:])
    total = int(cnt.sum())
    starts = np.empty(total, np.int64)
    lens = np.empty(total, np.int64)
    active = np.arange(len(cnt))
    r = 0
    while len(active):
        c = cur[active]
        ln, sz = _varints(padded, c)
        slot = first[active] + r
        starts[slot] = c + sz
        lens[slot] = ln
        cur[active] = c + sz + ln
        r += 1
        active = active[cnt[active] > r]
    if (lens < 0).any() or not np.array_equal(cur, bend):
        raise CorruptRecordError("record lengths do not add up to the batch size")
    return starts, lens


def _scan_strided(data: bytes, padded: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Record starts for big batches, exploiting runs of equally sized records.

    Producers of fixed-size events write runs of records with identical length varints
    (only the offset delta's varint grows, at 64 and 8192). A run of such records sits at
    a fixed stride, so one vectorized comparison of the length bytes at `p + j*L` accepts
    the whole run: if record j's length bytes equal record 0's, record j+1 starts at
    (j+1)*L, by induction. Python iterations = number of runs. When runs are short
    (random sizes), it falls back to the serial walk for the rest of the buffer.
    """
    dn = len(data)
    if total == 0:
        if dn:
            raise CorruptRecordError("bytes after the last record")
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts: list[np.ndarray] = []
    lens: list[np.ndarray] = []
    p = 0
    count = 0
    window = 64
    short_runs = 0
    while count < total:
        if short_runs >= 8:
            s, ln = _scan_serial(data[p:], total - count)
            starts.append(s + p)
            lens.append(ln)
            count = total
            p = dn
            break
        raw, sz = 0, 0
        while True:
            if p + sz >= dn:
                raise CorruptRecordError("record count exceeds the batch's records")
            b = data[p + sz]
            raw |= (b & 0x7F) << (7 * sz)
            sz += 1
            if b < 0x80:
                break
            if sz > 5:
                raise CorruptRecordError("record length varint too long")
        ln = (raw >> 1) ^ -(raw & 1)
        size = sz + ln
        if ln < 0 or p + size > dn:
            raise CorruptRecordError("record overruns the batch")
        k = min(total - count, (dn - p) // size, window)
        pos = p + size * np.arange(k, dtype=np.int64)
        ok = np.ones(k, bool)
        for j in range(sz):
            ok &= padded[pos + j] == data[p + j]
        m = k if ok.all() else int(np.argmin(ok))
        starts.append(pos[:m] + sz)
        lens.append(np.full(m, ln, np.int64))
        count += m
        p += m * size
        window = min(window * 4, 1 << 16) if m == k else 64
        short_runs = short_runs + 1 if m < 4 else 0
    if p != dn:
        raise CorruptRecordError("record lengths do not add up to the batch size")
    return np.concatenate(starts), np.concatenate(lens)
