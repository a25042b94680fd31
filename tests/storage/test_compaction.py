from __future__ import annotations

import random
import threading
import time

from yak.protocol import compression
from yak.protocol.records import Record, build_batch, decode_records, iter_batches
from yak.storage import LogConfig
from yak.storage.cleaner import clean_log


def all_records(log) -> list:
    out = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        data = log.read(off, 10**7, max_offset=log.log_end_offset).to_bytes()
        nxt = off
        for p, h in iter_batches(data):
            out += [r for r in decode_records(data[p : p + h.size]) if r.offset >= off]
            nxt = h.next_offset  # a consumer skips past a batch emptied by the cleaner
        if nxt == off:
            break
        off = nxt
    return out


def fill(log, n_batches: int, keys: int, seed: int, now: int, codec: int = 0) -> dict:
    rng = random.Random(seed)
    written = {}
    for b in range(n_batches):
        recs = []
        for i in range(rng.randint(1, 5)):
            k = f"key-{rng.randrange(keys)}".encode()
            v = None if rng.random() < 0.1 else f"v{b}-{i}".encode()
            recs.append(Record(k, v, now))
        r = log.append_as_leader(build_batch(recs, compression_type=codec), 0)
        for j, rec in enumerate(recs):
            written[r.base_offset + j] = (rec.key, rec.value)
    return written


def latest_by_key(written: dict) -> dict:
    latest = {}
    for off in sorted(written):
        latest[written[off][0]] = off
    return latest


def test_compaction_keeps_latest_per_key_and_offsets(manager):
    cfg = LogConfig(segment_bytes=2048, cleanup_policy="compact", min_cleanable_dirty_ratio=0.1,
                    delete_retention_ms=86_400_000)
    log = manager(cfg).create("c", 0)
    now = int(time.time() * 1000)
    written = fill(log, 300, 40, seed=1, now=now, codec=compression.LZ4)
    log.update_high_watermark()
    before = all_records(log)
    size_before = log.size_in_bytes
    stats = clean_log(log, now)
    assert stats is not None and stats.records_kept < stats.records_read
    after = all_records(log)
    active_base = log.segments[-1].base_offset
    # the cleaner only sees up to the active segment: "latest" is latest below it
    latest = latest_by_key({o: kv for o, kv in written.items() if o < active_base})
    for rec in after:  # every survivor is the original record at its original offset
        assert written[rec.offset] == (rec.key, rec.value)
        if rec.offset < active_base:
            assert latest[rec.key] == rec.offset
    kept = {r.offset for r in after}
    for key, off in latest.items():  # the latest record of every key survives (tombstones too)
        assert off in kept, key
    assert len(after) < len(before) and log.size_in_bytes < size_before
    assert [r.offset for r in after] == sorted(kept)
    # still appendable; log end unchanged
    leo = log.log_end_offset
    assert log.append_as_leader(build_batch([Record(b"x", b"y")]), 0).base_offset == leo


def test_tombstones_removed_after_delete_retention(manager):
    cfg = LogConfig(segment_bytes=1024, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                    delete_retention_ms=1000)
    log = manager(cfg).create("c", 0)
    old = int(time.time() * 1000) - 10_000
    for i in range(50):
        log.append_as_leader(build_batch([Record(f"k{i % 5}".encode(), b"v" * 50, old)]), 0)
    for i in range(5):
        log.append_as_leader(build_batch([Record(f"k{i}".encode(), None, old)]), 0)
    for _ in range(30):
        log.append_as_leader(build_batch([Record(b"other", b"x" * 50)]), 0)
    log.update_high_watermark()
    now = int(time.time() * 1000)
    assert clean_log(log, now, force=True) is not None
    keys = {r.key for r in all_records(log)}
    assert not {f"k{i}".encode() for i in range(5)} & keys


def test_tombstones_kept_within_delete_retention(manager):
    cfg = LogConfig(segment_bytes=1024, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log = manager(cfg).create("c", 0)
    for i in range(20):
        log.append_as_leader(build_batch([Record(b"k", f"{i}".encode() * 60)]), 0)
    log.append_as_leader(build_batch([Record(b"k", None)]), 0)
    for _ in range(30):
        log.append_as_leader(build_batch([Record(b"z", b"x" * 60)]), 0)
    log.update_high_watermark()
    clean_log(log, int(time.time() * 1000), force=True)
    recs = [r for r in all_records(log) if r.key == b"k"]
    assert [r.value for r in recs] == [None]


def test_dirty_ratio_and_compaction_lag(manager):
    cfg = LogConfig(segment_bytes=1024, cleanup_policy="compact", min_cleanable_dirty_ratio=0.9,
                    min_compaction_lag_ms=0)
    m = manager(cfg)
    log = m.create("c", 0)
    now = int(time.time() * 1000)
    fill(log, 50, 1000, seed=2, now=now)  # all unique keys: cleaning would gain nothing
    log.update_high_watermark()
    assert clean_log(log, now) is not None  # first round: everything is dirty (ratio 1.0)
    assert clean_log(log, now) is None  # nothing new: ratio 0 < 0.9
    lagged = LogConfig(segment_bytes=1024, cleanup_policy="compact",
                       min_compaction_lag_ms=3_600_000)
    log2 = m.create("c2", 0, lagged)  # one manager per data dir (its flusher checkpoints)
    fill(log2, 50, 3, seed=3, now=now)
    log2.update_high_watermark()
    assert clean_log(log2, now) is None  # too recent to compact


def test_reads_during_cleaning_and_restart(manager):
    cfg = LogConfig(segment_bytes=4096, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                    file_delete_delay_ms=60_000)
    m = manager(cfg)
    log = m.create("c", 0)
    now = int(time.time() * 1000)
    written = fill(log, 2000, 50, seed=4, now=now)
    log.update_high_watermark()
    stop = threading.Event()
    errors: list[str] = []

    checked = [log.log_end_offset]  # offsets below it are in `written`

    def reader():
        rng = random.Random(9)
        while not stop.is_set():
            off = rng.randrange(log.log_start_offset, checked[0])
            data = log.read(off, 5000, max_offset=checked[0]).to_bytes()
            for p, h in iter_batches(data):
                for r in decode_records(data[p : p + h.size]):
                    if written.get(r.offset) != (r.key, r.value):
                        errors.append(f"offset {r.offset}: {r.key} {r.value}")

    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(3):
            clean_log(log, now, force=True)
            fill(log, 20, 50, seed=5, now=now)
    finally:
        stop.set()
        t.join()
    assert not errors
    expected = [(r.offset, r.key, r.value) for r in all_records(log)]
    m.crash()  # unclean: recovery must accept the cleaned segments as they are
    log = manager(cfg).get("c", 0)
    assert [(r.offset, r.key, r.value) for r in all_records(log)] == expected


def test_background_cleaner_thread(tmp_path):
    from yak.storage import LogManager
    from yak.storage import manager as manager_mod

    manager_mod.CLEANER_BACKOFF_S = 0.05
    cfg = LogConfig(segment_bytes=1024, cleanup_policy="compact", min_cleanable_dirty_ratio=0.1)
    m = LogManager(str(tmp_path), cfg)
    m.startup()
    try:
        log = m.create("__consumer_offsets", 0)
        for i in range(200):
            log.append_as_leader(build_batch([Record(b"g", f"{i}".encode() * 20)]), 0)
        log.update_high_watermark()
        deadline = time.time() + 10
        while not m.cleaner_stats and time.time() < deadline:
            time.sleep(0.05)  # back-off of this wait-for-cleaner loop
        assert m.cleaner_stats
        vals = [r.value for r in all_records(log) if r.key == b"g"]
        assert vals[-1] == b"199" * 20 and len(vals) < 200
    finally:
        m.shutdown()
        manager_mod.CLEANER_BACKOFF_S = 1.0
