"""Hostile and malformed input: the broker refuses it cheaply and keeps serving others."""

from __future__ import annotations

import gzip
import struct
import time
import uuid

import psutil
import pytest

from yak.protocol import compression, kio_compat, records
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

from .rawclient import RawClient


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _batch(n: int = 3, value: bytes = b"v") -> bytes:
    return build_batch([Record(b"k%d" % i, value + b"%d" % i) for i in range(n)])


def assert_still_serves(bootstrap: str) -> None:
    """A fresh client can still produce and read back."""
    topic = _topic("alive")
    with RawClient(bootstrap) as c:
        assert c.api_versions().error_code == ErrorCode.none
        c.create_topic(topic)
        code, base = c.produce_one(topic, 0, _batch())
        assert code == ErrorCode.none and base == 0
        resp = c.fetch(topic, 0, 0)
        part = resp.responses[0].partitions[0]
        assert part.error_code == ErrorCode.none
        assert len(records.decode_records(part.records)) == 3


def _rss(broker) -> int:
    return psutil.Process(broker.pid).memory_info().rss


def _frame(api_key: int, version: int, body: bytes, flexible_header: bool,
           header_tags: bytes = b"") -> bytes:
    head = struct.pack(">hhih", api_key, version, 1, 4) + b"test"
    if flexible_header:
        head += header_tags or b"\x00"
    return struct.pack(">i", len(head) + len(body)) + head + body


@pytest.mark.parametrize("size", [200 * 1024 * 1024, 2**31 - 1, -1, -(2**31), 3])
def test_bad_frame_length_closes_without_allocating(module_broker, size: int) -> None:
    before = _rss(module_broker)
    with RawClient(module_broker.bootstrap) as c:
        c.send_bytes(struct.pack(">i", size) + b"\x00" * 16)
        assert c.is_closed_by_peer()
    assert _rss(module_broker) - before < 20 * 1024 * 1024
    assert_still_serves(module_broker.bootstrap)


def test_unknown_api_key_closes(module_broker) -> None:
    with RawClient(module_broker.bootstrap) as c:
        c.send_bytes(_frame(9999, 0, b"", False))
        assert c.is_closed_by_peer()
    assert_still_serves(module_broker.bootstrap)


def test_unsupported_version_closes(module_broker) -> None:
    with RawClient(module_broker.bootstrap) as c:
        c.send_bytes(_frame(0, 99, b"", False))
        assert c.is_closed_by_peer()
    assert_still_serves(module_broker.bootstrap)


def test_unsupported_api_versions_answers_v0_with_range(module_broker) -> None:
    """KIP-511: a too-new ApiVersions gets UNSUPPORTED_VERSION in v0 plus our ranges."""
    with RawClient(module_broker.bootstrap) as c:
        c.send_bytes(_frame(18, 99, b"\x00\x00\x00", True))
        frame = c.recv_frame()
        cid, resp = kio_compat.decode_response(18, 0, frame)
        assert cid == 1
        assert resp.error_code == ErrorCode.unsupported_version
        keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert keys[18] == (0, 4)
        assert keys[0][0] <= 3 and keys[1][0] <= 4
        # The connection stays usable, as clients retry with a version from the range.
        assert c.api_versions(3).error_code == ErrorCode.none


def test_api_versions_v3_has_no_top_level_tagged_fields(module_broker) -> None:
    """kcat 1.7's librdkafka cannot parse them."""
    with RawClient(module_broker.bootstrap) as c:
        req = kio_compat.build(kio_compat.request_class(18, 3), client_software_name="x",
                               client_software_version="1")
        c.send_bytes(kio_compat.encode_request(req, 5))
        frame = c.recv_frame()
    assert frame[-1] == 0  # empty tagged-field section closes the body
    # header v0: correlation id only, then error code 0
    assert struct.unpack_from(">ih", frame, 0) == (5, 0)


@pytest.mark.parametrize("api", ["metadata_v4", "produce_v7", "produce_v9"])
def test_huge_array_count_rejected_fast(module_broker, api: str) -> None:
    if api == "metadata_v4":
        frame = _frame(3, 4, struct.pack(">i", 2**31 - 1) + b"\x01", False)
    elif api == "produce_v7":
        body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 2**31 - 1)
        frame = _frame(0, 7, body, False)
    else:
        body = b"\x00" + struct.pack(">hi", 1, 1000) + b"\xff\xff\xff\xff\x07"
        frame = _frame(0, 9, body, True)
    t0 = time.monotonic()
    before = _rss(module_broker)
    with RawClient(module_broker.bootstrap) as c:
        c.send_bytes(frame)
        assert c.is_closed_by_peer()
    assert time.monotonic() - t0 < 3
    assert _rss(module_broker) - before < 20 * 1024 * 1024
    assert_still_serves(module_broker.bootstrap)


def test_header_tagged_field_count_inflated(module_broker) -> None:
    # 2^31 header tags announced in a 30-byte frame.
    with RawClient(module_broker.bootstrap) as c:
        c.send_bytes(_frame(3, 12, b"\x01\x00\x00", True, header_tags=b"\x80\x80\x80\x80\x08"))
        assert c.is_closed_by_peer()
    assert_still_serves(module_broker.bootstrap)


@pytest.mark.parametrize("where", ["header", "body"])
def test_millions_of_tagged_fields(module_broker, where: str) -> None:
    """Two million real (tiny) tagged fields: refused or parsed, in bounded time and memory."""
    n = 2_000_000
    tags = bytearray()
    v = n
    while v >= 0x80:
        tags.append((v & 0x7F) | 0x80)
        v >>= 7
    tags.append(v)
    tags += b"\x00\x00" * n  # tag 0, size 0 (repeated: also invalid per spec)
    if where == "header":
        frame = _frame(3, 12, b"\x01\x00\x00", True, header_tags=bytes(tags))
    else:
        frame = _frame(3, 12, b"\x01\x00\x00" + bytes(tags), True)
    t0 = time.monotonic()
    with RawClient(module_broker.bootstrap, timeout=20) as c:
        c.send_bytes(frame)
        assert c.is_closed_by_peer(wait=15)
    assert time.monotonic() - t0 < 10
    assert_still_serves(module_broker.bootstrap)


def test_bad_crc_fails_only_that_partition(module_broker) -> None:
    topic = _topic("crc")
    good = _batch()
    bad = bytearray(_batch())
    bad[-1] ^= 0xFF
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic, partitions=3)
        resp = c.produce(topic, {0: good, 1: bytes(bad), 2: good})
        codes = {p.index: p.error_code for p in resp.responses[0].partition_responses}
        assert codes == {0: ErrorCode.none, 1: ErrorCode.corrupt_message, 2: ErrorCode.none}
        assert c.list_offset(topic, 1, -1).offset == 0
        assert c.list_offset(topic, 2, -1).offset == 3
    assert_still_serves(module_broker.bootstrap)


def test_oversize_batch_message_too_large(module_broker) -> None:
    topic = _topic("big")
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic, max_message_bytes="2000")
        code, _ = c.produce_one(topic, 0, _batch(50, b"x" * 100))
        assert code == ErrorCode.message_too_large
        code, base = c.produce_one(topic, 0, _batch(2))
        assert (code, base) == (ErrorCode.none, 0)


def test_two_batches_in_one_partition_rejected(module_broker) -> None:
    topic = _topic("two")
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic)
        code, _ = c.produce_one(topic, 0, _batch() + _batch())
        assert code == ErrorCode.invalid_record
        assert c.list_offset(topic, 0, -1).offset == 0


def test_client_control_batch_rejected(module_broker) -> None:
    topic = _topic("ctl")
    marker = build_batch([Record(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
                         control=True, transactional=True, producer_id=1, producer_epoch=0)
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic)
        code, _ = c.produce_one(topic, 0, marker)
        assert code == ErrorCode.invalid_record
        assert c.list_offset(topic, 0, -1).offset == 0
    assert_still_serves(module_broker.bootstrap)


def test_compression_bomb_is_never_inflated(broker) -> None:
    """A 256 MiB-of-zeros gzip batch (~250 KiB on the wire) is stored and served as is.
    A fresh broker, so RSS growth is meaningful (no freed buffers to reuse)."""
    topic = _topic("bomb")
    inflated = 256 * 1024 * 1024
    raw = gzip.compress(b"\x00" * inflated, compresslevel=9)
    batch = build_batch([Record(None, b"small")], compression_type=compression.GZIP)
    # Replace the compressed records with the bomb (the record count says 1 record).
    bomb = bytearray(batch[: records.HEADER_SIZE]) + raw
    struct.pack_into(">i", bomb, 8, len(bomb) - records.LOG_OVERHEAD)
    struct.pack_into(">I", bomb, records.CRC_OFFSET, records.compute_crc(bomb, 0, len(bomb)))
    before = _rss(broker)
    proc = psutil.Process(broker.pid)
    cpu0 = sum(proc.cpu_times()[:2])
    with RawClient(broker.bootstrap) as c:
        c.create_topic(topic)
        code, base = c.produce_one(topic, 0, bytes(bomb))
        assert (code, base) == (ErrorCode.none, 0)
        part = c.fetch(topic, 0, 0).responses[0].partitions[0]
        assert bytes(part.records)[records.HEADER_SIZE:] == raw
    assert _rss(broker) - before < 50 * 1024 * 1024
    # Inflating 256 MiB costs ~0.8 s of CPU here; storing and serving 250 KiB, milliseconds.
    assert sum(proc.cpu_times()[:2]) - cpu0 < 0.3
    assert_still_serves(broker.bootstrap)


def test_announced_but_unsent_frames_cost_nothing(broker) -> None:
    """Frames that announce 90 MB (under socket.request.max.bytes) and never send it must not
    make the broker allocate 90 MB each: memory follows the bytes actually received.
    (A fresh broker: one that already freed big buffers could reuse them unseen by RSS.)"""
    before = _rss(broker)
    clients = [RawClient(broker.bootstrap) for _ in range(4)]
    try:
        for c in clients:
            c.send_bytes(struct.pack(">i", 90 * 1024 * 1024) + b"\x00\x03\x00\x0c")
        # A window for the broker to read the headers and (wrongly) allocate: what it must
        # not do leaves nothing to poll for.
        time.sleep(0.5)
        assert _rss(broker) - before < 40 * 1024 * 1024
        assert_still_serves(broker.bootstrap)
    finally:
        for c in clients:
            c.close()


def test_random_frames_never_take_the_broker_down(module_broker) -> None:
    """Random bodies for every advertised API/version: each is answered or the connection is
    closed; the broker keeps serving."""
    import random

    rng = random.Random(1234)
    with RawClient(module_broker.bootstrap) as c:
        ranges = [(k.api_key, k.min_version, k.max_version) for k in c.api_versions().api_keys]
    for i in range(300):
        api_key, lo, hi = rng.choice(ranges)
        version = rng.randint(lo, hi)
        body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
        flexible = kio_compat.request_header_version(api_key, version) >= 2
        with RawClient(module_broker.bootstrap, timeout=10) as c:
            c.send_bytes(_frame(api_key, version, body, flexible))
            try:
                c.sock.settimeout(10)
                c.recv_frame()  # an answer (e.g. an error response) is fine
            except (ConnectionError, OSError):
                pass  # so is a close
        if i % 50 == 0:
            assert module_broker.is_alive()
    assert_still_serves(module_broker.bootstrap)
