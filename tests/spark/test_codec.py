"""The Arrow codec against the storage layer's reference RecordBatch v2 codec (no Spark)."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from yak.errors import CorruptRecordError
from yak.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from yak.protocol.records import Record, build_batch, crc_is_valid, decode_records, parse_header
from yak.spark.offsets import OffsetRange, rate_limit, split_ranges
from yak.spark.options import YakOptionError, parse_sink_options, parse_source_options
from yak.spark.partitioner import murmur2
from yak.spark.record_decoder import HEADERS_TYPE, decode
from yak.spark.record_encoder import encode_batches

records_st = st.lists(
    st.builds(
        Record,
        key=st.one_of(st.none(), st.binary(max_size=40)),
        value=st.one_of(st.none(), st.binary(max_size=300)),
        timestamp=st.integers(0, 2**41),
        headers=st.lists(
            st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=10))),
            max_size=3,
        ),
    ),
    min_size=1,
    max_size=60,
)


def _expected(batches: list[bytes], lo: int, hi: int) -> list[Record]:
    return [r for b in batches for r in decode_records(b) if lo <= r.offset < hi]


@settings(max_examples=150, deadline=None)
@given(
    chunks=st.lists(records_st, min_size=1, max_size=4),
    codec=st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD]),
    cut=st.integers(0, 200),
    lo_frac=st.floats(0, 1),
)
def test_decode_matches_reference(chunks, codec, cut, lo_frac):
    batches, base = [], 100
    for recs in chunks:
        batches.append(build_batch(recs, base_offset=base, compression_type=codec))
        base += len(recs)
    lo = 100 + int((base - 100) * lo_frac)
    cut = min(cut, len(batches[0]) - 1)
    buf = b"".join(batches) + batches[0][:cut]  # a truncated batch at the end is ignored
    cols = decode(buf, lo, None, include_headers=True)
    exp = _expected(batches, lo, base)
    assert cols.offset.tolist() == [r.offset for r in exp]
    assert cols.key.to_pylist() == [r.key for r in exp]
    assert cols.value.to_pylist() == [r.value for r in exp]
    assert cols.timestamp_ms.tolist() == [r.timestamp for r in exp]
    assert cols.headers.to_pylist() == [[{"key": k, "value": v} for k, v in r.headers] for r in exp]
    assert cols.key.type == pa.binary() and cols.headers.type == HEADERS_TYPE
    assert cols.next_offset == base


def test_decode_many_batches_uses_parallel_scan_and_end_offset():
    recs = [Record(b"k%d" % i, b"v" * (i % 200)) for i in range(50)]
    batches = [build_batch(recs, base_offset=i * 50) for i in range(200)]
    cols = decode(b"".join(batches), 120, 9_000)
    assert cols.offset.tolist() == list(range(120, 9_000))
    assert cols.value.to_pylist()[0] == b"v" * 20
    assert cols.next_offset == 9_000


def test_control_batches_skipped_and_log_append_time():
    data = build_batch(
        [Record(b"a", b"1", 5)], base_offset=0, log_append_time=True, base_timestamp=5
    )
    ctrl = build_batch([Record(b"\0\0\0\0", b"\0" * 6)], base_offset=1, control=True)
    # LogAppendTime: every record carries the batch's max timestamp, type 1
    patched = bytearray(data)
    struct.pack_into(">q", patched, 35, 777)
    cols = decode(bytes(patched) + ctrl)
    assert cols.offset.tolist() == [0]
    assert cols.timestamp_ms.tolist() == [777] and cols.timestamp_type.tolist() == [1]
    assert cols.next_offset == 2  # resume after the control batch


def test_corrupt_record_lengths_are_rejected():
    b = bytearray(build_batch([Record(b"k", b"value")], base_offset=0))
    b[61] = 0x7E  # first record length varint: far beyond the batch
    with pytest.raises(CorruptRecordError):
        decode(bytes(b))


@settings(max_examples=40, deadline=None)
@given(
    recs=records_st,
    codec=st.sampled_from(["none", "zstd", "lz4", "gzip", "snappy"]),
    max_bytes=st.integers(200, 5000),
)
def test_encode_round_trips_through_reference_decoder(recs, codec, max_bytes):
    keys = pa.array([r.key for r in recs], pa.binary())
    vals = pa.array([r.value for r in recs], pa.binary())
    hdrs = pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in recs], HEADERS_TYPE)
    out = encode_batches(
        keys,
        vals,
        hdrs,
        max_batch_bytes=max_bytes,
        compression=codec,
        producer_id=7,
        producer_epoch=1,
    )
    got, base, seq = [], 0, 0
    for b in out:
        h = parse_header(b.data, 0)
        assert crc_is_valid(b.data, 0, h)
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 1, seq)
        seq += h.record_count
        buf = bytearray(b.data)
        struct.pack_into(">q", buf, 0, base)
        rs = decode_records(bytes(buf))
        base += len(rs)
        got += rs
    assert [(r.key, r.value, r.headers) for r in got] == [
        (r.key, r.value, [(k, v) for k, v in r.headers]) for r in recs
    ]


def test_murmur2_matches_kafka_python():
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"abcde"] + [bytes(range(i)) for i in range(1, 70)]
    assert murmur2(pa.array(keys, pa.binary())).tolist() == [
        kafka_python_murmur2(k) & 0xFFFFFFFF for k in keys
    ]


def test_rate_limit_splits_by_lag():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 900, ("t", 1): 100, ("t", 2): 100}
    end = rate_limit(start, latest, 100)
    assert end == {("t", 0): 90, ("t", 1): 10, ("t", 2): 100}
    assert rate_limit(start, latest, 10_000) == latest
    tiny = rate_limit({("a", 0): 0, ("a", 1): 0}, {("a", 0): 1000, ("a", 1): 1}, 5)
    assert sum(tiny.values()) == 5


def test_split_ranges_min_partitions():
    parts = split_ranges([OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 10)], 5)
    assert len(parts) >= 5
    assert sum(p.size for p in parts) == 1010
    assert split_ranges([OffsetRange("t", 0, 5, 5)], None) == []


@pytest.mark.parametrize(
    ("opts", "needle"),
    [
        ({"subscribe": "t"}, "kafka.bootstrap.servers"),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "assign": '{"t":[0]}'},
            "exactly one",
        ),
        ({"kafka.bootstrap.servers": "h:1"}, "subscribe"),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOfsets": "earliest"},
            "startingofsets",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.sasl.mechanism": "PLAIN"},
            "kafka.sasl.mechanism",
        ),
        ({"kafka.bootstrap.servers": "h:1", "assign": "[0]"}, "assign"),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "{bad"},
            "startingOffsets",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "0"},
            "maxoffsetspertrigger",
        ),
    ],
)
def test_bad_source_options_name_the_option(opts, needle):
    with pytest.raises(YakOptionError, match=needle):
        parse_source_options(opts, streaming=True)


def test_source_option_defaults_and_batch_only_checks():
    o = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a,b"}, streaming=True)
    assert o.subscribe == ["a", "b"] and o.starting == "latest" and o.fail_on_data_loss
    b = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a"}, streaming=False)
    assert b.starting == "earliest" and b.ending == "latest"
    with pytest.raises(YakOptionError, match="endingOffsets"):
        parse_source_options(
            {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "endingOffsets": "latest"},
            streaming=True,
        )
    with pytest.raises(YakOptionError, match="unknown option 'bogus'"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "bogus": "1"})


@pytest.mark.parametrize("sizes", ["fixed", "mixed", "random"])
def test_decode_big_batches_strided_and_serial_scans(sizes):
    """Few big batches: runs of equal-size records (strided scan) or random sizes (serial)."""
    import random

    rnd = random.Random(3)
    n = 20_000
    if sizes == "fixed":
        vals = [b"x" * 100] * n
    elif sizes == "mixed":
        vals = [b"y" * (100 if i < n // 2 else 7) for i in range(n)]
    else:
        vals = [b"z" * rnd.randrange(0, 300) for _ in range(n)]
    out, base = bytearray(), 0
    for b in encode_batches(None, pa.array(vals, pa.binary()), max_batch_bytes=1 << 20):
        buf = bytearray(b.data)
        struct.pack_into(">q", buf, 0, base)
        base += b.records
        out += buf
    cols = decode(bytes(out))
    assert cols.offset.tolist() == list(range(n))
    assert cols.value.to_pylist() == vals
    assert cols.key.null_count == n


def test_read_committed_drops_aborted_transactions():
    """Kafka's consumer algorithm: aborted list + ABORT markers, by batch headers alone."""

    def txn(pid: int, base: int, n: int) -> bytes:
        recs = [Record(None, b"%d-%d" % (pid, base + i)) for i in range(n)]
        return build_batch(
            recs,
            base_offset=base,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=base,
            transactional=True,
        )

    def marker(pid: int, base: int, commit: bool) -> bytes:
        key = struct.pack(">hh", 0, 1 if commit else 0)
        return build_batch(
            [Record(key, struct.pack(">hi", 0, 0))],
            base_offset=base,
            producer_id=pid,
            producer_epoch=0,
            transactional=True,
            control=True,
        )

    buf = (
        txn(5, 0, 3)
        + txn(6, 3, 2)
        + marker(5, 5, False)
        + marker(6, 6, True)
        + txn(5, 7, 2)
        + marker(5, 9, True)
    )
    committed = decode(buf, aborted=[(5, 0)])
    assert committed.offset.tolist() == [3, 4, 7, 8]
    assert committed.next_offset == 10
    assert decode(buf).offset.tolist() == [0, 1, 2, 3, 4, 7, 8]  # read_uncommitted
