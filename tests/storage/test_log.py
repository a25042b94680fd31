from __future__ import annotations

import os
import threading
import time

import pytest

from yak.errors import (
    CorruptRecordError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from yak.protocol.records import Record, build_batch, decode_records, iter_batches, parse_header
from yak.storage import LogConfig

from .conftest import make_batch


def offsets_of(data: bytes) -> list[int]:
    out = []
    for p, h in iter_batches(data):
        out += [r.offset for r in decode_records(data[p : p + h.size])]
    return out


def read_all(log, start: int, end: int) -> list[int]:
    """Every offset readable in [start, end), following segments as a consumer does."""
    out: list[int] = []
    off = start
    while off < end:
        r = log.read(off, 10**6, max_offset=end)
        got = [o for o in offsets_of(r.to_bytes()) if o >= off]
        if not got:
            break
        out += got
        off = got[-1] + 1
    return out


def test_append_assigns_offsets_and_epoch(manager):
    log = manager().create("t", 0)
    r1 = log.append_as_leader(make_batch(3), 5)
    r2 = log.append_as_leader(make_batch(2), 5)
    assert (r1.base_offset, r1.last_offset, r2.base_offset, r2.last_offset) == (0, 2, 3, 4)
    assert log.log_end_offset == 5 and log.high_watermark == 0
    log.update_high_watermark()
    data = log.read(0, 10**6).to_bytes()
    hs = [h for _p, h in iter_batches(data)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in hs] == [(0, 5), (3, 5)]
    assert offsets_of(data) == [0, 1, 2, 3, 4]


def test_several_batches_in_one_append_all_or_nothing(manager):
    log = manager().create("t", 0)
    good = make_batch(2)
    bad = bytearray(make_batch(2))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(good + bytes(bad), 0)
    assert log.log_end_offset == 0 and log.segments[-1].size == 0
    r = log.append_as_leader(good + good, 0)
    assert (r.base_offset, r.last_offset) == (0, 3)


@pytest.mark.parametrize(
    "mutate, exc",
    [
        (lambda b: b.__setitem__(16, 1), CorruptRecordError),  # magic
        (lambda b: b.__setitem__(len(b) - 1, b[-1] ^ 1), CorruptRecordError),  # crc
        (lambda b: b.__setitem__(slice(8, 12), (10**6).to_bytes(4, "big")), CorruptRecordError),
    ],
)
def test_invalid_batches_rejected(manager, mutate, exc):
    log = manager().create("t", 0)
    b = bytearray(make_batch(2))
    mutate(b)
    with pytest.raises(exc):
        log.append_as_leader(bytes(b), 0)
    assert log.log_end_offset == 0 and log.segments[-1].size == 0


def test_count_mismatch_control_size_timestamp(manager):
    m = manager(LogConfig(max_message_bytes=500, message_timestamp_before_max_ms=1000))
    log = m.create("t", 0)
    recs = [Record(b"k", b"v", int(time.time() * 1000))]
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(build_batch(recs, last_offset_delta=3), 0)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(build_batch(recs, control=True), 0)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(make_batch(1, size=600), 0)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(make_batch(1, ts=int(time.time() * 1000) - 5000), 0)
    assert log.log_end_offset == 0


def test_log_append_time(manager):
    log = manager(LogConfig(message_timestamp_type="LogAppendTime")).create("t", 0)
    r = log.append_as_leader(make_batch(2, ts=5), 0, now=123456)
    assert r.log_append_time == 123456
    log.update_high_watermark()
    data = log.read(0, 10**6).to_bytes()
    h = parse_header(data)
    assert h.is_log_append_time and h.max_timestamp == 123456
    assert [x.timestamp for x in decode_records(data)] == [123456, 123456]


def test_read_limits(manager):
    log = manager(LogConfig(segment_bytes=1500)).create("t", 0)
    for _ in range(30):
        log.append_as_leader(make_batch(2, size=100), 0)
    batch_size = len(make_batch(2, size=100))
    log.update_high_watermark(20)
    r = log.read(5, 10**6)  # stops at the high watermark passed as max_offset
    assert r.first_offset == 4
    assert read_all(log, 4, log.high_watermark) == list(range(4, 20))
    r = log.read(0, 10, max_offset=60)
    assert r.size == batch_size  # min_one_message
    r = log.read(0, 10, max_offset=60, min_one_message=False)
    assert r.size == 0
    r = log.read(0, batch_size * 3 + 1, max_offset=60)
    assert r.size == 3 * batch_size
    assert log.read(60, 100).size == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(61, 100)
    # random reads hit the right batch across segments
    assert len(log.segments) > 3
    for off in range(60):
        got = log.read(off, 1, max_offset=60)
        assert got.first_offset == off - off % 2 and got.size == batch_size


def test_idempotent_producer(manager):
    log = manager().create("t", 0)

    def b(seq, n=2, epoch=0, pid=42):
        return make_batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    log.append_as_leader(b(0), 0)
    log.append_as_leader(b(2), 0)
    with pytest.raises(DuplicateSequenceError) as ei:
        log.append_as_leader(b(0), 0)
    assert (ei.value.base_offset, ei.value.last_offset) == (0, 1)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(b(7), 0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(b(5, epoch=1), 0)
    log.append_as_leader(b(0, epoch=1), 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(b(4, epoch=0), 0)
    assert log.log_end_offset == 6


def test_producer_state_survives_restart(manager, tmp_path):
    m = manager(LogConfig(segment_bytes=400))
    log = m.create("t", 0)
    for seq in range(0, 20, 2):
        log.append_as_leader(make_batch(2, producer_id=1, producer_epoch=0, base_sequence=seq), 0)
    m.crash()
    m2 = manager(LogConfig(segment_bytes=400))
    log = m2.get("t", 0)
    with pytest.raises(DuplicateSequenceError) as ei:
        log.append_as_leader(make_batch(2, producer_id=1, producer_epoch=0, base_sequence=18), 0)
    assert ei.value.base_offset == 18
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(make_batch(2, producer_id=1, producer_epoch=0, base_sequence=30), 0)
    m2.shutdown()
    m3 = manager(LogConfig(segment_bytes=400))
    assert m3.was_clean_shutdown
    with pytest.raises(DuplicateSequenceError):
        m3.get("t", 0).append_as_leader(
            make_batch(2, producer_id=1, producer_epoch=0, base_sequence=18), 0
        )


def test_truncate_and_epoch_cache(manager):
    log = manager(LogConfig(segment_bytes=500)).create("t", 0)
    for epoch in (1, 1, 2, 2, 3):
        for _ in range(3):
            log.append_as_leader(make_batch(2), epoch)
    assert log.leader_epoch_cache.entries == [(1, 0), (2, 12), (3, 24)]
    assert log.leader_epoch_cache.end_offset_for(1, log.log_end_offset) == (1, 12)
    assert log.leader_epoch_cache.end_offset_for(3, log.log_end_offset) == (3, 30)
    assert log.leader_epoch_cache.end_offset_for(0, log.log_end_offset) == (-1, -1)
    log.update_high_watermark()
    log.truncate_to(13)  # inside batch 12-13: the whole batch goes
    assert log.log_end_offset == 12 and log.high_watermark == 12
    assert log.leader_epoch_cache.entries == [(1, 0)]
    assert read_all(log, 0, 12) == list(range(12))
    r = log.append_as_leader(make_batch(2), 4)
    assert r.base_offset == 12
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.append_as_leader(make_batch(1), 5).base_offset == 100


def test_retention_and_delete_records(manager):
    cfg = LogConfig(segment_bytes=1000, retention_bytes=2500, file_delete_delay_ms=0)
    m = manager(cfg)
    log = m.create("t", 0)
    for _ in range(40):
        log.append_as_leader(make_batch(1, size=100), 0)
    log.update_high_watermark()
    n_before = len(log.segments)
    assert log.apply_retention() > 0
    assert len(log.segments) < n_before
    assert log.size_in_bytes - log.segments[0].size < 2500
    assert log.log_start_offset == log.segments[0].base_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    start = log.delete_records(log.log_start_offset + 3)
    assert log.read(start, 10**6).first_offset <= start
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(log.high_watermark + 1)
    m.maintenance()
    names = os.listdir(log.directory)
    assert not [n for n in names if n.endswith(".deleted")]


def test_time_retention(manager):
    cfg = LogConfig(segment_bytes=1000, retention_ms=10_000)
    log = manager(cfg).create("t", 0)
    old = int(time.time() * 1000) - 60_000
    for _ in range(20):
        log.append_as_leader(make_batch(1, size=100, ts=old), 0)
    for _ in range(5):
        log.append_as_leader(make_batch(1, size=100), 0)
    log.update_high_watermark()
    log.apply_retention()
    assert log.log_start_offset >= 17
    assert log.offset_for_timestamp(old)[0] == log.log_start_offset


def test_offset_for_timestamp(manager):
    log = manager(LogConfig(segment_bytes=800, index_interval_bytes=100)).create("t", 0)
    for i in range(50):
        recs = [Record(b"k", b"v" * 50, 1000 + 10 * i), Record(b"k", b"v" * 50, 1005 + 10 * i)]
        log.append_as_leader(build_batch(recs), 0)
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1001) == (1, 1005)
    assert log.offset_for_timestamp(1250) == (50, 1250)
    assert log.offset_for_timestamp(1251) == (51, 1255)
    assert log.offset_for_timestamp(99999) is None
    assert log.offset_for_timestamp(-3) == (99, 1495)
    assert log.offset_for_timestamp(-2) == (0, -1)
    assert log.offset_for_timestamp(-1) == (100, -1)


def test_sync_group_commit(manager):
    log = manager(LogConfig(write_caching=False)).create("t", 0)
    calls = []
    orig = os.fdatasync

    def counting(fd):
        calls.append(fd)
        time.sleep(0.01)  # the point: a slow fsync, so appends queue up behind it
        orig(fd)

    os.fdatasync = counting
    try:
        def worker():
            for _ in range(10):
                r = log.append_as_leader(make_batch(1), 0)
                log.sync(r.last_offset + 1)
                assert log.recovery_point > r.last_offset

        ts = [threading.Thread(target=worker) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        os.fdatasync = orig
    assert log.recovery_point == 80
    # 80 acknowledged appends shared far fewer fsyncs (group commit)
    log_fd_syncs = [c for c in calls if c == log.segments[-1].fd]
    assert 1 <= len(log_fd_syncs) < 60


def test_topic_with_dashes_and_dots(manager):
    m = manager()
    m.create("a-b.c_d-1", 3).append_as_leader(make_batch(1), 0)
    m.shutdown()
    m2 = manager()
    assert m2.get("a-b.c_d-1", 3).log_end_offset == 1
    m2.delete("a-b.c_d-1", 3)
    assert m2.get("a-b.c_d-1", 3) is None
    assert not [n for n in os.listdir(m2.data_dir) if n.startswith("a-b")]


def test_dump_tool(manager):
    from yak.storage.dump import dump_index, dump_log

    log = manager(LogConfig(index_interval_bytes=10)).create("t", 0)
    for _ in range(3):
        log.append_as_leader(make_batch(2), 4)
    log.flush()
    seg = log.segments[0]
    lines = list(dump_log(seg.log_path, records=True))
    batches = [ln for ln in lines if ln.startswith("baseOffset")]
    assert len(batches) == 3 and all("isvalid: true" in ln for ln in batches)
    assert "partitionLeaderEpoch: 4" in batches[0]
    assert sum(ln.startswith("| offset") for ln in lines) == 6
    idx = list(dump_index(seg.index.path))
    size = len(make_batch(2))
    assert idx[1:] == [f"offset: 2 position: {size}", f"offset: 4 position: {2 * size}"]
    with open(seg.log_path, "r+b") as f:
        f.seek(seg.size - 1)
        f.write(b"\xff")
    assert "isvalid: false" in list(dump_log(seg.log_path))[-1]


def test_idle_producers_expire(manager):
    m = manager()
    log = m.create("t", 0)
    old = int(time.time() * 1000) - 2 * 86_400_000
    log.append_as_leader(make_batch(1, ts=old, producer_id=1, producer_epoch=0, base_sequence=0), 0)
    log.append_as_leader(make_batch(1, producer_id=2, producer_epoch=0, base_sequence=0), 0)
    m.maintenance()
    assert set(log.producer_state.producers) == {2}
    # forgotten: its next batch is accepted as from an unknown producer
    log.append_as_leader(make_batch(1, producer_id=1, producer_epoch=0, base_sequence=9), 0)
