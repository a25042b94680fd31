"""The follower's append in Kafka's shape (appendAsFollower, issue 28): the fetched bytes
written as they are in one vectored write of the received buffer itself (no copy into new
Python objects), every batch's CRC checked before a byte is written, and the record size
not re-checked (the leader accepted it)."""

from __future__ import annotations

import os

import pytest

from yak.errors import CorruptRecordError, RecordTooLargeError
from yak.storage import LogConfig
from yak.storage import segment as segment_mod

from .conftest import make_batch


def _leader_bytes(manager, batches: int, size: int = 10) -> tuple[object, bytearray]:
    m = manager()
    leader = m.create("l", 0)
    for i in range(batches):
        leader.append_as_leader(make_batch(3, size=size), 1 + i // 4)
    return m, bytearray(leader.read(0, 10**7).to_bytes())


def test_one_vectored_write_of_the_received_buffer(manager, monkeypatch) -> None:
    m, data = _leader_bytes(manager, 20)
    follower = m.create("f", 0)
    writes: list[list[object]] = []
    pwritev = os.pwritev

    def spy(fd: int, iov: list, offset: int) -> int:
        writes.append([v.obj if isinstance(v, memoryview) else v for v in iov])
        return pwritev(fd, iov, offset)

    monkeypatch.setattr(segment_mod.os, "pwritev", spy)
    r = follower.append_as_follower(memoryview(data))
    assert (r.base_offset, r.last_offset) == (0, 59)
    assert len(writes) == 1 and writes[0] and all(o is data for o in writes[0])
    monkeypatch.undo()
    assert follower.read(0, 10**7, max_offset=60).to_bytes() == bytes(data)
    assert follower.leader_epoch_cache.entries == [(1, 0), (2, 12), (3, 24), (4, 36),
                                                   (5, 48)]


def test_a_corrupt_batch_is_refused_before_anything_is_written(manager) -> None:
    m, data = _leader_bytes(manager, 5)
    follower = m.create("f", 0)
    third = 0
    for _ in range(2):  # skip two batches: length at byte 8 of each
        third += int.from_bytes(data[third + 8 : third + 12], "big") + 12
    data[third + 70] ^= 0xFF  # a record byte of the third batch: only its CRC tells
    with pytest.raises(CorruptRecordError, match="CRC"):
        follower.append_as_follower(memoryview(data))
    assert follower.log_end_offset == 0 and follower.size_in_bytes == 0


def test_a_follower_takes_batches_above_its_own_max_message_bytes(manager) -> None:
    """Kafka's appendAsFollower ignores the record size: a topic whose limit was lowered
    after the leader accepted larger batches still replicates them."""
    m, data = _leader_bytes(manager, 3, size=400)
    follower = m.create("f", 0, LogConfig(max_message_bytes=500))
    assert int.from_bytes(data[8:12], "big") + 12 > 500
    assert follower.append_as_follower(memoryview(data)).last_offset == 8
    with pytest.raises(RecordTooLargeError):  # a client's batch is still refused
        follower.append_as_leader(make_batch(3, size=400), 1)
