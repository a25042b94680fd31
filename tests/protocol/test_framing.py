"""Framing and request-header parsing with bytes alone: no socket, no broker."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yak.protocol import kio_compat
from yak.protocol.framing import (
    MIN_FRAME_SIZE,
    FrameDecoder,
    FrameError,
    HeaderError,
    parse_request_header,
    response_frame_head,
    skip_header_tagged_fields,
)
from yak.protocol.primitives import MAX_TAGGED_FIELDS

MAX = 1 << 20


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _payloads() -> list[bytes]:
    return [bytes([i]) * n for i, n in enumerate([8, 9, 100, 8, 4096, 13, 255, 8])]


def _feed_all(dec: FrameDecoder, chunks: list[bytes]) -> list[bytes]:
    out = []
    for c in chunks:
        out.extend(bytes(f) for f in dec.feed(c))
    return out


def test_one_chunk_gives_zero_copy_slices() -> None:
    payloads = _payloads()
    stream = b"".join(_frame(p) for p in payloads)
    frames = FrameDecoder(MAX).feed(stream)
    assert [bytes(f) for f in frames] == payloads
    assert all(f.obj is stream for f in frames)  # views of the fed bytes, no copy


def test_split_into_two_chunks_at_every_position() -> None:
    payloads = _payloads()
    stream = b"".join(_frame(p) for p in payloads)
    for cut in range(len(stream) + 1):
        dec = FrameDecoder(MAX)
        assert _feed_all(dec, [stream[:cut], stream[cut:]]) == payloads, cut
        assert dec.error is None and dec.buffered == 0


def test_one_byte_at_a_time() -> None:
    payloads = _payloads()
    stream = b"".join(_frame(p) for p in payloads)
    dec = FrameDecoder(MAX)
    assert _feed_all(dec, [stream[i : i + 1] for i in range(len(stream))]) == payloads


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(MIN_FRAME_SIZE, 3000), min_size=1, max_size=12),
    cuts=st.lists(st.integers(0, 40_000), max_size=30),
    as_views=st.booleans(),
)
def test_any_split_gives_the_same_frames(sizes: list[int], cuts: list[int],
                                         as_views: bool) -> None:
    payloads = [bytes([i % 256]) * n for i, n in enumerate(sizes)]
    stream = b"".join(_frame(p) for p in payloads)
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    chunks = [stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    dec = FrameDecoder(MAX)
    got = []
    for c in chunks:
        for f in dec.feed(memoryview(c) if as_views else c):
            got.append(bytes(f))
            # A frame spanning chunks is one buffer of exactly its size.
            assert len(f) == len(payloads[len(got) - 1])
    assert got == payloads
    assert dec.buffered == 0


def test_spanning_frame_is_held_as_received_bytes_only() -> None:
    """A peer announcing the maximum and sending little costs only what it sent."""
    dec = FrameDecoder(MAX)
    assert dec.feed(struct.pack(">i", MAX) + b"x" * 100) == []
    assert dec.buffered == 4 + 100
    assert dec.feed(b"y" * 1000) == []
    assert dec.buffered == 4 + 1100
    rest = MAX - 1100
    frames = dec.feed(b"z" * rest + _frame(b"next-frame"))
    assert [len(f) for f in frames] == [MAX, 10]
    assert bytes(frames[1]) == b"next-frame"
    assert dec.buffered == 0


@pytest.mark.parametrize("size", [-1, -(2**31), 0, 1, MIN_FRAME_SIZE - 1, MAX + 1, 2**31 - 1])
def test_bad_size_is_an_error_value_and_stops_the_decoder(size: int) -> None:
    good = _frame(b"a" * 20)
    dec = FrameDecoder(MAX)
    frames = dec.feed(good + struct.pack(">i", size) + b"\x00" * 64)
    assert [bytes(f) for f in frames] == [b"a" * 20]  # frames before the bad one
    assert dec.error == FrameError(size, MAX)
    assert str(MAX) in str(dec.error)
    assert dec.buffered == 0  # nothing kept for the refused frame
    assert dec.feed(good) == []  # stopped


def test_bad_size_split_across_chunks_is_caught_when_complete() -> None:
    dec = FrameDecoder(MAX)
    raw = struct.pack(">i", MAX + 1)
    assert dec.feed(raw[:2]) == [] and dec.error is None
    assert dec.feed(raw[2:] + b"x" * 10) == []
    assert dec.error is not None and dec.error.size == MAX + 1


def test_minimum_frame_size_accepted_and_max_below_minimum_refused() -> None:
    assert [bytes(f) for f in FrameDecoder(MIN_FRAME_SIZE).feed(_frame(b"12345678"))] == [
        b"12345678"]
    with pytest.raises(ValueError):
        FrameDecoder(MIN_FRAME_SIZE - 1)


def test_lowered_minimum_takes_short_frames_until_raised_again() -> None:
    """SASL v0 raw tokens: the connection lowers the minimum while one is due (a PLAIN
    token can be 4 bytes), then raises it again; split or whole, short frames come out."""
    dec = FrameDecoder(MAX)
    dec.min_size = 0
    token = _frame(b"\0u\0p")
    assert [bytes(f) for f in dec.feed(token + _frame(b""))] == [b"\0u\0p", b""]
    assert [bytes(f) for f in _feed_all(dec, [token[:3], token[3:5], token[5:]])] == [
        b"\0u\0p"]
    assert dec.error is None
    dec.min_size = MIN_FRAME_SIZE
    assert dec.feed(token) == []
    assert dec.error == FrameError(4, MAX, MIN_FRAME_SIZE)
    assert "[8, " in str(dec.error)
    lowered = FrameDecoder(MAX, min_size=0)
    assert lowered.feed(struct.pack(">i", -1)) == [] and lowered.error is not None


# ---------------------------------------------------------------- request header


def _every_request() -> list[tuple[int, int]]:
    out = []
    for key in range(100):
        out.extend((key, v) for v in kio_compat.known_versions(key))
    return out


@pytest.mark.parametrize("client_id", ["rdkafka", None, "", "é-client"])
def test_header_of_every_api_version_as_kio_writes_it(client_id: str | None) -> None:
    """For every request kio knows, the parsed header and the body offset match what the
    encoder wrote: the body then decodes with kio from that offset."""
    from tests.protocol.samples import sample_request

    checked = 0
    requests = _every_request()
    if client_id != "rdkafka":  # the other client ids: each API's newest version is enough
        requests = [(k, max(kio_compat.known_versions(k))) for k in {k for k, _ in requests}]
    for key, version in requests:
        cls = kio_compat.request_class(key, version)
        try:
            req = sample_request(cls, nulls=False)
            raw = kio_compat.encode_request(req, correlation_id=4242, client_id=client_id)
        except Exception:  # a sample kio cannot encode: not what this test is about
            continue
        frame = memoryview(raw)[4:]
        api_key, api_version, correlation_id, cid, pos = parse_request_header(frame)
        assert (api_key, api_version, correlation_id, cid) == (key, version, 4242, client_id)
        if kio_compat.request_header_version(key, version) >= 2:
            pos = skip_header_tagged_fields(frame, pos)
        decoded, used = kio_compat.decode(cls, frame, pos)
        assert pos + used == len(frame) and decoded == req
        checked += 1
    assert checked > (300 if client_id == "rdkafka" else 50)


def test_header_with_tagged_fields_is_skipped() -> None:
    head = struct.pack(">hhih", 0, 9, 7, 3) + b"cid"
    tags = bytes([2, 0, 3]) + b"abc" + bytes([5, 1]) + b"z"
    frame = memoryview(head + tags + b"BODY")
    *_, client_id, size = parse_request_header(frame)
    assert client_id == "cid" and size == len(head)
    assert skip_header_tagged_fields(frame, size) == len(head) + len(tags)


def test_non_utf8_client_id_is_replaced_not_refused() -> None:
    frame = memoryview(struct.pack(">hhih", 3, 1, 1, 2) + b"\xff\xfe")
    assert parse_request_header(frame)[3] == "\ufffd\ufffd"


@pytest.mark.parametrize("frame", [
    b"",
    b"\x00\x03\x00\x01\x00\x00\x00\x01\x00",  # 9 bytes: no client id length
    struct.pack(">hhih", 3, 1, 1, 10) + b"short",  # client id overruns
])
def test_bad_header_raises_header_error(frame: bytes) -> None:
    with pytest.raises(HeaderError):
        parse_request_header(memoryview(frame))


@pytest.mark.parametrize("tags", [
    b"\x80\x80\x80\x80\x08",  # 2^31 tags announced in 5 bytes
    bytes([3, 0, 1]),  # three announced, one present and truncated
    bytes([1, 0, 100, 1, 2]),  # a field of 100 bytes with 2 left
    b"\xff\xff\xff\xff\xff\xff",  # varint longer than 5 bytes
])
def test_hostile_header_tags_refused_without_work(tags: bytes) -> None:
    frame = memoryview(struct.pack(">hhih", 0, 9, 7, -1) + tags)
    with pytest.raises(HeaderError):
        skip_header_tagged_fields(frame, 10)


def test_tag_count_capped_even_when_the_bytes_are_there() -> None:
    n = MAX_TAGGED_FIELDS + 1
    tags = bytes([0x81, 0x08]) + bytes([0, 0]) * n  # uvarint 1025, then n empty fields
    assert tags[:2] == bytes([n & 0x7F | 0x80, n >> 7])
    with pytest.raises(HeaderError, match="tagged fields"):
        skip_header_tagged_fields(memoryview(tags), 0)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_parse_or_raise_header_error(data: bytes) -> None:
    frame = memoryview(data)
    try:
        size = parse_request_header(frame)[4]
        end = skip_header_tagged_fields(frame, size)
    except HeaderError:
        return
    assert size <= end <= len(data)


# ---------------------------------------------------------------- response frame head


@pytest.mark.parametrize(("api", "version"), [("api_versions", 3), ("metadata", 12),
                                              ("fetch", 11), ("fetch", 16)])
def test_response_frame_head_matches_the_header_kio_reads(api: str, version: int) -> None:
    """Size and header v0/v1 in front of a body: a client (here kio) reads it back."""
    key = kio_compat.api_key_for(api)
    cls = kio_compat.response_class(key, version)
    body = kio_compat.encode(sample_response(cls))
    flexible = kio_compat.response_header_version(key, version) >= 1
    frame = response_frame_head(len(body), 99, flexible) + body
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    correlation_id, decoded = kio_compat.decode_response(key, version, frame[4:])
    assert correlation_id == 99 and kio_compat.encode(decoded) == body
    assert frame == kio_compat.encode_response(99, decoded)


def sample_response(cls: type) -> object:
    from tests.protocol.samples import sample_request

    return sample_request(cls, nulls=False)
