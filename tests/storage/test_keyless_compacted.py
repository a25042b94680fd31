"""Compacted topics refuse records without a key at append time (Kafka's LogValidator):
INVALID_RECORD with KIP-467 record errors, nothing written."""

from __future__ import annotations

from dataclasses import replace

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yak.errors import CorruptRecordError, InvalidRecordError
from yak.protocol import compression
from yak.protocol.records import (
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    Record,
    build_batch,
    compute_crc,
    keyless_records,
    parse_header,
)
from yak.storage import LogConfig

COMPACT = LogConfig(cleanup_policy="compact")
CODECS = sorted(compression.CODEC_NAMES)


@settings(max_examples=80, deadline=None)
@given(
    keys=st.lists(st.none() | st.binary(max_size=300), min_size=1, max_size=40),
    value_size=st.integers(0, 300),
    codec=st.sampled_from(CODECS),
)
def test_keyless_records_finds_exactly_the_null_keys(keys, value_size, codec):
    # Keys and values of every length exercise one- and multi-byte varints.
    recs = [Record(k, None if i % 7 == 3 else b"v" * value_size, 1000 + i * 300)
            for i, k in enumerate(keys)]
    raw = build_batch(recs, compression_type=codec)
    assert keyless_records(raw, parse_header(raw)) == [i for i, k in enumerate(keys) if k is None]


def test_long_records_and_many_offsets():
    """Record lengths of three varint bytes and offset deltas of two."""
    keys = [None if i % 5 == 0 else b"k%d" % i for i in range(200)]
    recs = [Record(k, b"v" * (20_000 if i % 50 == 1 else 10), 1000) for i, k in enumerate(keys)]
    raw = build_batch(recs)
    assert keyless_records(raw, parse_header(raw)) == list(range(0, 200, 5))


def test_truncated_records_are_corrupt():
    raw = bytearray(build_batch([Record(b"k", b"v" * 50), Record(None, b"w")]))
    h = parse_header(raw)
    cut = bytes(raw[: HEADER_SIZE + 10])  # the records section ends mid-record
    with pytest.raises(CorruptRecordError):
        keyless_records(cut, h._replace(batch_length=len(cut) - 12))


def test_compacted_log_refuses_keyless_records_and_writes_nothing(manager):
    m = manager()
    log = m.create("c", 0, COMPACT)
    log.append_as_leader(build_batch([Record(b"a", b"1")]), 0)
    batch = build_batch([Record(b"k", b"1"), Record(None, b"2"), Record(b"k2", b"3"),
                         Record(None, b"4")])
    with pytest.raises(InvalidRecordError) as info:
        log.append_as_leader(batch, 0)
    e = info.value
    msg = "Compacted topic cannot accept message without key in topic partition c-0."
    assert e.record_errors == [(1, msg), (3, msg)]
    assert e.message.startswith("One or more records have been rejected due to 2 record errors")
    assert int(e.code) == 87  # INVALID_RECORD
    assert log.log_end_offset == 1
    # A keyed batch, a tombstone included, is fine.
    r = log.append_as_leader(build_batch([Record(b"k", None), Record(b"k2", b"x")]), 0)
    assert (r.base_offset, r.last_offset) == (1, 2)
    m.shutdown()


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batches_are_checked(manager, codec):
    m = manager()
    log = m.create("c", 0, LogConfig(cleanup_policy="compact,delete"))
    with pytest.raises(InvalidRecordError) as info:
        log.append_as_leader(build_batch([Record(b"k", b"v"), Record(None, b"w")],
                                         compression_type=codec), 0)
    assert [i for i, _m in info.value.record_errors] == [1]
    log.append_as_leader(build_batch([Record(b"k", b"v")] * 3, compression_type=codec), 0)
    assert log.log_end_offset == 3
    m.shutdown()


def test_only_compacted_leader_appends_are_checked(manager):
    m = manager()
    plain = m.create("d", 0)
    plain.append_as_leader(build_batch([Record(None, b"v")]), 0)  # cleanup.policy=delete
    log = m.create("c", 0, COMPACT)
    # Replication copies what the leader accepted; it is not validated again.
    log.append_as_follower(build_batch([Record(None, b"v")], base_offset=0))
    assert log.log_end_offset == 1
    # A topic switched to compact starts refusing.
    plain.update_config(replace(plain.config, cleanup_policy="compact"))
    with pytest.raises(InvalidRecordError):
        plain.append_as_leader(build_batch([Record(None, b"v")]), 0)
    m.shutdown()


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zstd_zeros(mib: int) -> bytes:
    z = cramjam.zstd.Compressor()
    chunk = bytes(1 << 20)
    for _ in range(mib):
        z.compress(chunk)
    return bytes(z.finish())


@pytest.mark.parametrize("codec", [compression.ZSTD, compression.LZ4])
def test_decompression_is_bounded_while_inflating(codec):
    """The bound is enforced while inflating: refusing 64 MiB of zeros with a 1 MiB bound
    never holds much more than the bound in memory."""
    import tracemalloc

    data = _zstd_zeros(64) if codec == compression.ZSTD else compression.compress(
        codec, bytes(64 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError):
            compression.decompress(codec, data, max_size=1 << 20)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20


def test_compression_bomb_on_a_compacted_topic_is_refused(manager):
    """The key check decompresses; a zstd batch that would inflate past the bound fails
    as CORRUPT_MESSAGE instead of being inflated whole."""
    m = manager()
    log = m.create("c", 0, COMPACT)
    # One record whose 300 MiB value is zeros, zstd-compressed by the MiB (never whole):
    # a batch of a few KB.
    size = 300 << 20
    rec = bytearray(b"\x00\x00\x00\x02k")  # attributes, ts/offset deltas, key length 1, key
    rec += _zigzag(size)
    record = _zigzag(len(rec) + size + 1) + rec
    z = cramjam.zstd.Compressor()
    z.compress(bytes(record))
    chunk = bytes(1 << 20)
    for _ in range(size >> 20):
        z.compress(chunk)
    z.compress(b"\x00")  # no headers
    body = bytes(z.finish())
    big = bytearray(HEADER.pack(0, HEADER_SIZE - 12 + len(body), -1, 2, 0,
                                compression.ZSTD, 0, 1000, 1000, -1, -1, -1, 1) + body)
    big[CRC_OFFSET : CRC_OFFSET + 4] = compute_crc(big, 0, len(big)).to_bytes(4, "big")
    assert len(big) < 64 * 1024
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(big, 0)
    assert log.log_end_offset == 0
    m.shutdown()
