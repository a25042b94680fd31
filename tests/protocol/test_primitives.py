"""The wire primitives: same bytes as kio's writers (an independent implementation of
Kafka's `ByteUtils` and generated-message encodings), exact round trips, and every
reader bounded by the bytes that remain."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import writers as kio

from yak.protocol.primitives import (
    MAX_TAGGED_FIELDS,
    read_array_len,
    read_bytes,
    read_string,
    read_tagged_fields,
    read_uvarint,
    read_uvarlong,
    read_varint,
    read_varlong,
    skip_tagged_fields,
    uvarint_bytes,
    write_bytes,
    write_length,
    write_string,
    write_tagged_fields,
    write_uvarint,
    write_varint,
    write_varlong,
)

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)


class Boom(Exception):
    """A caller's own error class: readers must raise it, nothing else."""


def _kio(writer, value) -> bytes:  # type: ignore[no-untyped-def]
    out = io.BytesIO()
    writer(out, value)
    return out.getvalue()


def _ours(writer, *args) -> bytes:  # type: ignore[no-untyped-def]
    out = bytearray()
    writer(out, *args)
    return bytes(out)


# ---------------------------------------------------------------- varints


@settings(max_examples=150)
@given(U32)
def test_uvarint_matches_kio_and_round_trips(n: int) -> None:
    raw = _ours(write_uvarint, n)
    assert raw == _kio(kio.write_unsigned_varint, n) == uvarint_bytes(n)
    assert read_uvarint(raw, 0) == (n, len(raw))
    assert read_uvarint(memoryview(b"\xaa" + raw + b"\xbb"), 1) == (n, len(raw) + 1)


@settings(max_examples=150)
@given(U64)
def test_uvarlong_matches_kio_and_round_trips(n: int) -> None:
    raw = _ours(write_uvarint, n)
    assert raw == _kio(kio.write_unsigned_varlong, n)
    assert read_uvarlong(raw, 0) == (n, len(raw))


@settings(max_examples=150)
@given(I32)
def test_varint_matches_kio_and_round_trips(n: int) -> None:
    raw = _ours(write_varint, n)
    assert raw == _kio(kio.write_signed_varint, n)
    assert read_varint(raw, 0) == (n, len(raw))


@settings(max_examples=150)
@given(I64)
def test_varlong_matches_kio_and_round_trips(n: int) -> None:
    raw = _ours(write_varlong, n)
    assert raw == _kio(kio.write_signed_varlong, n)
    assert read_varlong(raw, 0) == (n, len(raw))


@pytest.mark.parametrize(("n", "raw"), [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f"),
])
def test_zigzag_known_vectors(n: int, raw: bytes) -> None:
    """Kafka's ByteUtils test vectors for zigzag varints."""
    assert _ours(write_varint, n) == raw
    assert read_varint(raw, 0) == (n, len(raw))


@pytest.mark.parametrize(("writer", "n"), [
    (write_varint, 2**31), (write_varint, -(2**31) - 1),
    (write_varlong, 2**63), (write_varlong, -(2**63) - 1), (write_uvarint, -1),
])
def test_writers_refuse_out_of_range(writer, n: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        writer(bytearray(), n)


@pytest.mark.parametrize("raw", [
    b"", b"\x80", b"\xff\xff\xff\xff",  # truncated
    b"\xff\xff\xff\xff\xff\x01",  # more than 5 bytes
    b"\xff\xff\xff\xff\x10",  # 5 bytes but 33 bits
])
def test_bad_uvarint_raises_the_callers_error(raw: bytes) -> None:
    with pytest.raises(Boom):
        read_uvarint(raw, 0, None, Boom)


def test_uvarlong_bounds() -> None:
    assert read_uvarlong(b"\xff" * 9 + b"\x01", 0) == (2**64 - 1, 10)
    with pytest.raises(Boom):
        read_uvarlong(b"\xff" * 9 + b"\x02", 0, None, Boom)  # 65 bits
    with pytest.raises(Boom):
        read_uvarlong(b"\xff" * 10 + b"\x01", 0, None, Boom)  # 11 bytes


def test_end_bounds_a_read_inside_a_larger_buffer() -> None:
    buf = b"\x80\x01"
    assert read_uvarint(buf, 0) == (128, 2)
    with pytest.raises(Boom):
        read_uvarint(buf, 0, 1, Boom)


# ---------------------------------------------------------------- strings, bytes, lengths

TEXT = st.one_of(st.none(), st.text(max_size=300))


@settings(max_examples=100)
@given(TEXT)
def test_strings_match_kio_and_round_trip(s: str | None) -> None:
    compact = _ours(write_string, s, True)
    classic = _ours(write_string, s, False)
    assert compact == _kio(kio.write_nullable_compact_string, s)
    assert classic == _kio(kio.write_nullable_legacy_string, s)
    for raw, flexible in ((compact, True), (classic, False)):
        assert read_string(memoryview(raw), 0, len(raw), flexible) == (s, len(raw))


@settings(max_examples=100)
@given(st.one_of(st.none(), st.binary(max_size=300)))
def test_bytes_match_kio_and_round_trip_zero_copy(b: bytes | None) -> None:
    compact = _ours(write_bytes, b, True)
    classic = _ours(write_bytes, b, False)
    assert compact == _kio(kio.write_nullable_compact_string, b)  # same layout as bytes
    assert classic == _kio(kio.write_nullable_legacy_bytes, b)
    for raw, flexible in ((compact, True), (classic, False)):
        mv = memoryview(raw)
        got, end = read_bytes(mv, 0, len(raw), flexible)
        assert end == len(raw)
        if b is None:
            assert got is None
        else:
            assert bytes(got) == b and got.obj is raw  # a view, not a copy


@settings(max_examples=100)
@given(st.integers(-1, 2**31 - 2))
def test_array_lengths_match_kio(n: int) -> None:
    assert _ours(write_length, n, True) == _kio(kio.write_compact_array_length,
                                               None if n < 0 else n)
    assert _ours(write_length, n, False) == _kio(kio.write_legacy_array_length, n)


@pytest.mark.parametrize("flexible", [True, False])
def test_array_len_bounded_by_bytes_left(flexible: bool) -> None:
    raw = _ours(write_length, 2**31 - 2, flexible) + b"\x00" * 16
    with pytest.raises(Boom, match="array of"):
        read_array_len(raw, 0, len(raw), flexible, 1, Boom)
    raw = _ours(write_length, 4, flexible) + b"\x00" * 16
    assert read_array_len(raw, 0, len(raw), flexible, 4, Boom)[0] == 4
    with pytest.raises(Boom):
        read_array_len(raw, 0, len(raw), flexible, 5, Boom)  # 4 x 5 > 16


@pytest.mark.parametrize("flexible", [True, False])
def test_null_array_only_where_allowed(flexible: bool) -> None:
    raw = _ours(write_length, -1, flexible)
    assert read_array_len(raw, 0, len(raw), flexible, 1, Boom, nullable=True) == (-1, len(raw))
    with pytest.raises(Boom, match="null"):
        read_array_len(raw, 0, len(raw), flexible, 1, Boom)


def test_string_errors() -> None:
    with pytest.raises(Boom, match="overruns"):
        read_string(b"\x00\x05abc", 0, 5, False, Boom)
    with pytest.raises(Boom, match="UTF-8"):
        read_string(b"\x03\xff\xfe", 0, 3, True, Boom)
    with pytest.raises(Boom, match="null"):
        read_string(b"\x00", 0, 1, True, Boom, nullable=False)
    # Any negative classic length is null, as in Kafka's generated readers.
    assert read_string(b"\xff\xfe", 0, 2, False, Boom) == (None, 2)
    with pytest.raises(Boom, match="null"):
        read_string(b"\xff\xfe", 0, 2, False, Boom, nullable=False)
    with pytest.raises(ValueError):
        write_string(bytearray(), "x" * 0x8000, False)


def test_bytes_overrun() -> None:
    with pytest.raises(Boom):
        read_bytes(memoryview(b"\x00\x00\x00\x09abc"), 0, 7, False, Boom)
    with pytest.raises(Boom):
        read_bytes(memoryview(b"\x0aabc"), 0, 4, True, Boom)


# ---------------------------------------------------------------- tagged fields

TAGS = st.dictionaries(st.integers(0, 300), st.binary(max_size=200), max_size=8)


@settings(max_examples=100)
@given(TAGS)
def test_tagged_fields_match_kio_and_round_trip(fields: dict[int, bytes]) -> None:
    ordered = sorted(fields.items())
    raw = _ours(write_tagged_fields, ordered)
    expected = io.BytesIO()
    kio.write_unsigned_varint(expected, len(ordered))
    for tag, value in ordered:
        kio.write_tagged_field(expected, tag, lambda b, v: b.write(v), value)
    assert raw == expected.getvalue()
    framed = memoryview(raw + b"rest")
    got, end = read_tagged_fields(framed, 0)
    assert {t: bytes(v) for t, v in got.items()} == fields
    assert end == len(raw) == skip_tagged_fields(framed, 0)


@pytest.mark.parametrize("raw", [
    b"\x80\x80\x80\x80\x08",  # 2^31 tags
    bytes([2, 0, 0]),  # two announced, one there
    bytes([1, 0, 9, 1]),  # field overruns
    bytes([1]),  # count with nothing after
])
def test_hostile_tag_sections_refused(raw: bytes) -> None:
    with pytest.raises(Boom):
        skip_tagged_fields(raw, 0, None, Boom)
    with pytest.raises(Boom):
        read_tagged_fields(memoryview(raw), 0, None, Boom)


def test_tag_count_capped() -> None:
    n = MAX_TAGGED_FIELDS + 1
    raw = _ours(write_uvarint, n) + bytes([0, 0]) * n
    with pytest.raises(Boom, match="at most"):
        skip_tagged_fields(raw, 0, None, Boom)
    ok = _ours(write_uvarint, MAX_TAGGED_FIELDS) + b"".join(
        _ours(write_uvarint, t) + b"\x00" for t in range(MAX_TAGGED_FIELDS))
    assert skip_tagged_fields(ok, 0) == len(ok)


def test_tag_order_written_strictly_read_leniently() -> None:
    """Kafka writes ascending tags; its readers take them in any order."""
    with pytest.raises(ValueError):
        write_tagged_fields(bytearray(), [(5, b""), (3, b"")])
    fields, end = read_tagged_fields(memoryview(bytes([2, 5, 1, 7, 3, 0])), 0, None, Boom)
    assert {t: bytes(v) for t, v in fields.items()} == {5: b"\x07", 3: b""} and end == 6


@settings(max_examples=250, deadline=None)
@given(st.binary(max_size=40), st.booleans())
def test_random_bytes_only_raise_the_callers_error(data: bytes, flexible: bool) -> None:
    mv = memoryview(data)
    for read in (
        lambda: read_uvarint(data, 0, None, Boom),
        lambda: read_varlong(data, 0, None, Boom),
        lambda: read_string(mv, 0, len(data), flexible, Boom),
        lambda: read_bytes(mv, 0, len(data), flexible, Boom),
        lambda: read_array_len(mv, 0, len(data), flexible, 1, Boom, True),
        lambda: skip_tagged_fields(mv, 0, None, Boom),
        lambda: read_tagged_fields(mv, 0, None, Boom),
    ):
        try:
            result = read()
        except Boom:
            continue
        end = result if isinstance(result, int) else result[1]
        assert 0 <= end <= len(data)


def test_tag_count_checked_against_bytes_left_before_looping() -> None:
    raw = bytes([100]) + b"\x00" * 10  # 100 fields need at least 200 bytes
    with pytest.raises(Boom, match="100 tagged fields in 10 bytes"):
        skip_tagged_fields(raw, 0, None, Boom)
