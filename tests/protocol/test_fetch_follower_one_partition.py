"""The Fetch request decoder's one-unpack path for a follower's usual request (issue 28):
v15-16, one topic by id, one partition, no forgotten topics, no rack, replica_state as the
only tagged field. Whatever it returns must be what the general reader returns for the same
bytes; any byte that makes the request another shape (a count, a tag, a string length)
must send it to the general reader, which then decides (answers or refuses) as before."""

from __future__ import annotations

import dataclasses
import random
import uuid

import pytest

from yak.protocol import fetch_codec
from yak.protocol.fetch_client_codec import (
    FetchRequestPartition,
    FetchRequestTopic,
    encode_fetch_request,
)
from yak.protocol.fetch_codec import FetchRequestError, decode_fetch_request
from yak.protocol.framing import parse_request_header, skip_header_tagged_fields


def _body(version: int, tid: uuid.UUID, offset: int = 10, epoch: int = 4,
          last_epoch: int = 3, replica: int = 2, broker_epoch: int = 77) -> bytes:
    frame = encode_fetch_request(version, 5, "yak-replica-2", replica, broker_epoch, 500, 1,
                                 10 << 20, [FetchRequestTopic(tid, "t", [FetchRequestPartition(
                                     7, offset, epoch, last_epoch, 0, 1 << 20)])])
    body = memoryview(bytes(frame[4:]))
    _, _, _, _, pos = parse_request_header(body)
    pos = skip_header_tagged_fields(body, pos)
    return bytes(body[pos:])


def _general(version: int, body: bytes) -> object:
    try:
        return dataclasses.asdict(fetch_codec._decode_fetch_request(version, memoryview(body)))
    except FetchRequestError as e:
        return ("refused", str(e))


def _decoded(version: int, body: bytes) -> object:
    try:
        return dataclasses.asdict(decode_fetch_request(version, memoryview(body)))
    except FetchRequestError as e:
        return ("refused", str(e))


@pytest.mark.parametrize("version", [15, 16])
def test_the_follower_request_takes_the_one_unpack_path_and_agrees(version: int) -> None:
    tid = uuid.uuid4()
    for offset, epoch, last, replica, broker_epoch in [
            (0, -1, -1, 2, -1), (10, 4, 3, 3, 77), (2**62, 2**31 - 1, -2**31, 0, 2**63 - 1)]:
        body = _body(version, tid, offset, epoch, last, replica, broker_epoch)
        assert len(body) == fetch_codec._FOLLOWER_ONE.size
        fast = fetch_codec._follower_request(memoryview(body))
        assert fast is not None  # fails if the shape is not recognised
        assert dataclasses.asdict(fast) == _general(version, body)
        assert _decoded(version, body) == _general(version, body)
        assert fast.replica_id == replica and fast.replica_epoch == broker_epoch
        assert fast.topics[0].partitions[0].fetch_offset == offset
    # The same ids come back as the same objects, as the general reader's cache gives.
    a = decode_fetch_request(version, memoryview(_body(version, tid)))
    b = fetch_codec._decode_fetch_request(version, memoryview(_body(version, tid)))
    assert a.topics[0].topic_id is b.topics[0].topic_id
    # The all-zero id is None on both paths.
    zero = _body(version, uuid.UUID(int=0))
    assert _decoded(version, zero) == _general(version, zero)
    assert decode_fetch_request(version, memoryview(zero)).topics[0].topic_id is None


@pytest.mark.parametrize("version", [15, 16])
def test_every_single_byte_change_answers_as_the_general_reader(version: int) -> None:
    """Each byte of the request set to a few values: the decoder's answer (fields or
    refusal) is always the general reader's. Fails if the one-unpack path accepts a shape
    the general reader reads otherwise (a count, a tag, a length it does not compare)."""
    body = bytearray(_body(version, uuid.uuid4()))
    changed_shape = 0
    for i in range(len(body)):
        for value in (0, 1, 2, 3, 0x0D, 0x7F, 0x80, 0xFF):
            if value == body[i]:
                continue
            mutated = bytes(body[:i]) + bytes([value]) + bytes(body[i + 1:])
            assert _decoded(version, mutated) == _general(version, mutated), (i, value)
            if fetch_codec._follower_request(memoryview(mutated)) is None:
                changed_shape += 1
    assert changed_shape > 0


def test_other_versions_and_lengths_take_the_general_reader() -> None:
    rng = random.Random(7)
    tid = uuid.uuid4()
    for version in (13, 14):
        body = _body(version, tid)
        assert _decoded(version, body) == _general(version, body)
    body = _body(15, tid)
    # Same length, another version the one-unpack path is not for: refused or read by
    # the general reader exactly as before.
    for version in (4, 12, 19):
        assert _decoded(version, body) == _general(version, body)
    # A body one byte longer or shorter never takes it.
    for cut in (body[:-1], body + b"\x00", bytes(rng.randrange(256) for _ in range(len(body)))):
        assert _decoded(15, cut) == _general(15, cut)
