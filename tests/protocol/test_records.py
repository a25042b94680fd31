from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yak.errors import CorruptRecordError
from yak.protocol import compression
from yak.protocol.records import (
    HEADER_SIZE,
    Record,
    build_batch,
    crc_is_valid,
    decode_records,
    iter_batches,
    parse_header,
    patch_base_offset,
    patch_leader_epoch,
    set_log_append_time,
)

records_st = st.lists(
    st.builds(
        Record,
        key=st.none() | st.binary(max_size=20),
        value=st.none() | st.binary(max_size=200),
        timestamp=st.integers(0, 2**41),
        headers=st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)),
                         max_size=3),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(records_st, st.sampled_from(sorted(compression.CODEC_NAMES)), st.integers(0, 2**40))
def test_build_decode_roundtrip(records, codec, base):
    raw = build_batch(records, base_offset=base, compression_type=codec, producer_id=7,
                      producer_epoch=1, base_sequence=3)
    h = parse_header(raw)
    assert h.size == len(raw)
    assert h.base_offset == base and h.last_offset == base + len(records) - 1
    assert h.record_count == len(records) and h.compression == codec
    assert h.max_timestamp == max(r.timestamp for r in records)
    assert crc_is_valid(raw, 0, h)
    out = decode_records(raw)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in out] == [
        (r.key, r.value, r.timestamp, r.headers) for r in records
    ]
    assert [r.offset for r in out] == list(range(base, base + len(records)))


def test_patching_offset_and_epoch_keeps_crc():
    raw = bytearray(build_batch([Record(b"k", b"v", 5)]))
    patch_base_offset(raw, 0, 1234)
    patch_leader_epoch(raw, 0, 9)
    h = parse_header(raw)
    assert (h.base_offset, h.partition_leader_epoch) == (1234, 9)
    assert crc_is_valid(raw, 0, h)


def test_log_append_time_recomputes_crc():
    raw = bytearray(build_batch([Record(b"k", b"v", 5), Record(b"k2", b"v", 6)]))
    set_log_append_time(raw, 0, 999)
    h = parse_header(raw)
    assert h.is_log_append_time and h.max_timestamp == 999 and crc_is_valid(raw, 0, h)
    assert [r.timestamp for r in decode_records(raw)] == [999, 999]


def test_flipped_byte_fails_crc():
    raw = bytearray(build_batch([Record(b"k", b"value", 5)]))
    raw[HEADER_SIZE + 3] ^= 0xFF
    assert not crc_is_valid(raw, 0, parse_header(raw))


def test_iter_batches_stops_at_partial_tail():
    a = build_batch([Record(b"a", b"1", 1)], base_offset=0)
    b = build_batch([Record(b"b", b"2", 1)], base_offset=1)
    got = [(p, h.base_offset) for p, h in iter_batches(a + b + b[:20])]
    assert got == [(0, 0), (len(a), 1)]


def test_bad_magic_and_short_header():
    raw = bytearray(build_batch([Record(b"k", b"v", 5)]))
    raw[16] = 1
    with pytest.raises(CorruptRecordError):
        parse_header(raw)
    with pytest.raises(CorruptRecordError):
        parse_header(raw[:30])


def test_decompression_bomb_is_refused():
    raw = build_batch([Record(b"k", b"\0" * 1_000_000, 5)], compression_type=compression.GZIP)
    assert len(raw) < 10_000
    with pytest.raises(CorruptRecordError):
        decode_records(raw, max_size=100_000)


def test_xerial_snappy_interop():
    import snappy  # python-snappy, as Java clients frame it

    data = b"hello world " * 10000
    ours = compression.compress(compression.SNAPPY, data)
    assert compression.decompress(compression.SNAPPY, ours) == data
    raw = snappy.compress(data)  # librdkafka style: raw block
    assert compression.decompress(compression.SNAPPY, raw) == data


@settings(max_examples=40, deadline=None)
@given(records_st, st.sampled_from(sorted(compression.CODEC_NAMES)), st.data())
def test_rebuild_batch_keeps_records_verbatim(records, codec, data):
    from yak.protocol.records import rebuild_batch, scan_keys

    raw = build_batch(records, base_offset=100, compression_type=codec, producer_id=3,
                      producer_epoch=0, base_sequence=0)
    spans = scan_keys(raw)
    assert [(o, k, t) for o, k, t, _s, _e in spans.records] == [
        (100 + i, r.key, r.value is None) for i, r in enumerate(records)
    ]
    keep = sorted(data.draw(st.sets(st.integers(0, len(records) - 1), min_size=1)))
    out = rebuild_batch(spans, keep)
    h, oh = parse_header(raw), parse_header(out)
    assert crc_is_valid(out, 0, oh)
    assert (oh.base_offset, oh.last_offset, oh.record_count) == (100, h.last_offset, len(keep))
    assert (oh.producer_id, oh.base_sequence, oh.compression) == (3, 0, codec)
    full = decode_records(raw)
    assert decode_records(out) == [full[i] for i in keep]


def test_scan_keys_long_varints():
    from yak.protocol.records import scan_keys

    recs = [Record(b"k" * (i % 70), None if i % 3 == 0 else b"v" * (i * 300), i * 1000)
            for i in range(100)]
    raw = build_batch(recs, base_offset=5)
    got = [(o, k, t) for o, k, t, _s, _e in scan_keys(raw).records]
    assert got == [(5 + i, r.key, r.value is None) for i, r in enumerate(recs)]
