"""Follower appends, leader epochs across restarts, transactions' hook, cleaner concurrency."""

from __future__ import annotations

import threading
import time

import pytest

from yak.errors import InvalidRecordError
from yak.protocol.records import Record, build_batch, parse_header
from yak.storage import LogConfig
from yak.storage import cleaner as cleaner_mod

from .conftest import make_batch


def test_follower_append_keeps_offsets_and_epochs(manager):
    m = manager()
    leader = m.create("l", 0)
    follower = m.create("f", 0)
    for epoch in (1, 1, 3):
        leader.append_as_leader(make_batch(2), epoch)
    leader.update_high_watermark()
    data = leader.read(0, 10**6).to_bytes()
    r = follower.append_as_follower(data)
    assert (r.base_offset, r.last_offset) == (0, 5)
    assert follower.read(0, 10**6, max_offset=6).to_bytes() == data
    assert follower.leader_epoch_cache.entries == [(1, 0), (3, 4)]
    with pytest.raises(InvalidRecordError):  # below the log end
        follower.append_as_follower(data)
    # a follower that starts mid-log (after truncate_fully_and_start_at)
    f2 = m.create("f2", 0)
    f2.truncate_fully_and_start_at(4)
    tail = leader.read(4, 10**6).to_bytes()
    assert f2.append_as_follower(tail).base_offset == 4 and f2.log_end_offset == 6
    m.shutdown()
    m2 = manager()
    assert m2.get("f", 0).leader_epoch_cache.entries == [(1, 0), (3, 4)]
    assert m2.get("f2", 0).log_start_offset == 4


def test_control_batches_allowed_for_followers_only_and_lso(manager):
    log = manager().create("t", 0)
    txn = build_batch([Record(b"k", b"v")], producer_id=9, producer_epoch=0, base_sequence=0,
                      transactional=True)
    log.append_as_leader(make_batch(1), 0)
    r = log.append_as_leader(txn, 0)
    log.append_as_leader(make_batch(1), 0)
    log.update_high_watermark()
    assert log.last_stable_offset == r.base_offset  # open transaction pins the LSO
    marker = build_batch([Record(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
                         producer_id=9, producer_epoch=0, control=True, transactional=True,
                         base_offset=log.log_end_offset)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(marker, 0)
    log.append_as_follower(marker)
    log.update_high_watermark()
    assert log.last_stable_offset == log.high_watermark == 4
    stored = log.read(3, 10**6).to_bytes()
    assert parse_header(stored).is_control


def test_cleaner_never_blocks_appends(manager, monkeypatch):
    cfg = LogConfig(segment_bytes=2048, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log = manager(cfg).create("c", 0)
    for i in range(200):
        log.append_as_leader(build_batch([Record(b"k%d" % (i % 7), b"v" * 100)]), 0)
    log.update_high_watermark()
    inside = threading.Event()
    release = threading.Event()
    real = cleaner_mod._filter_batch

    def slow_filter(*a, **kw):
        inside.set()
        release.wait(5)
        return real(*a, **kw)

    monkeypatch.setattr(cleaner_mod, "_filter_batch", slow_filter)
    t = threading.Thread(target=cleaner_mod.clean_log, args=(log, int(time.time() * 1000), True))
    t.start()
    assert inside.wait(5)
    t0 = time.monotonic()
    for _ in range(20):  # the cleaner is parked mid-recopy: appends and reads must not wait
        log.append_as_leader(make_batch(1), 0)
        log.update_high_watermark()
        assert log.read(0, 1000).size
    assert time.monotonic() - t0 < 2
    release.set()
    t.join()
    assert log.log_end_offset == 220


def test_segment_ms_survives_restart(manager):
    cfg = LogConfig(segment_ms=60_000)
    m = manager(cfg)
    log = m.create("t", 0)
    old = int(time.time() * 1000) - 120_000
    log.append_as_leader(make_batch(1, ts=old), 0)
    m.shutdown()
    m2 = manager(cfg)
    log = m2.get("t", 0)
    m2.maintenance()
    assert len(log.segments) == 2
