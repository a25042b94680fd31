"""Unclean shutdown: Kafka's LogLoaderTest.testCorruptLog as a seeded matrix, and clean restarts."""

from __future__ import annotations

import os
import random
import struct

import pytest

from yak.protocol.records import Record, build_batch, iter_batches, parse_header
from yak.storage import LogConfig, LogManager
from yak.storage.segment import LogSegment

CFG = LogConfig(segment_bytes=4000, index_interval_bytes=300)
CASES = ["garbage_log", "garbage_index", "cut_last", "flip_last"]


def stored_batches(log) -> list[bytes]:
    out = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        data = log.read(off, 10**7, max_offset=log.log_end_offset).to_bytes()
        if not data:
            break
        for p, h in iter_batches(data):
            out.append(data[p : p + h.size])
            off = h.next_offset
    return out


def open_manager(path: str) -> LogManager:
    m = LogManager(path, CFG, start_cleaner=False)
    m.startup()
    return m


@pytest.mark.parametrize("seed", range(100))
def test_corrupt_log(tmp_path, seed):
    rng = random.Random(seed)
    case = CASES[seed % len(CASES)]
    path = str(tmp_path)
    m = open_manager(path)
    log = m.create("t", 0)
    for i in range(rng.randint(5, 60)):
        recs = [Record(b"k%d" % rng.randrange(9), rng.randbytes(rng.randint(1, 300)))
                for _ in range(rng.randint(1, 4))]
        pid = 7 if rng.random() < 0.5 else -1
        log.append_as_leader(build_batch(recs), 1)
        if rng.random() < 0.05:
            log.flush()
            m.checkpoint()
        del pid, i
    if rng.random() < 0.3:  # sometimes everything is flushed: the active segment is clean
        log.flush()
        m.checkpoint()
    log.update_high_watermark()
    before = stored_batches(log)
    seg = log.segments[-1]
    log_path, index_path = seg.log_path, seg.index.path
    seg.flush_indexes(sync=False)
    m.crash()

    with open(log_path, "rb") as f:
        active = f.read()
    positions = [p for p, _h in iter_batches(active)]
    expected = list(before)
    if case == "garbage_log":
        with open(log_path, "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 5000)))
    elif case == "garbage_index":
        with open(index_path, "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 100)))
    elif positions:
        last = positions[-1]
        size = len(active) - last
        if case == "cut_last":
            os.truncate(log_path, last + rng.randrange(0, size))
        else:
            # Every byte but the base offset and leader epoch (outside Kafka's CRC by format).
            at = rng.choice([*range(8, 12), *range(16, size)])
            data = bytearray(active)
            data[last + at] ^= 1 << rng.randrange(8)
            with open(log_path, "wb") as f:
                f.write(data)
        expected = expected[:-1]

    m2 = open_manager(path)
    assert not m2.was_clean_shutdown
    log2 = m2.get("t", 0)
    expected_leo = parse_header(expected[-1]).next_offset if expected else 0
    assert log2.log_end_offset == expected_leo
    log2.update_high_watermark()
    assert stored_batches(log2) == expected
    # Indexes rebuilt: every offset is found through them, and they match a fresh rebuild.
    for b in expected:
        h = parse_header(b)
        for off in range(h.base_offset, h.next_offset):
            got = log2.read(off, 1).to_bytes()
            assert got == b
    for s in log2.segments:
        s.ensure_indexes()
        rel, pos = list(s.index.rel_offsets), list(s.index.positions)
        s.rebuild_indexes()
        assert (rel, pos) == (list(s.index.rel_offsets), list(s.index.positions))
    # Appendable at the right offset after recovery, and a clean restart keeps it all.
    r = log2.append_as_leader(build_batch([Record(b"new", b"v")]), 2)
    assert r.base_offset == expected_leo
    m2.shutdown()
    m3 = open_manager(path)
    assert m3.was_clean_shutdown
    log3 = m3.get("t", 0)
    assert log3.log_end_offset == expected_leo + 1
    log3.update_high_watermark()
    assert stored_batches(log3)[:-1] == expected
    m3.shutdown()


def test_clean_restart_scans_nothing(tmp_path, monkeypatch):
    path = str(tmp_path)
    m = open_manager(path)
    log = m.create("t", 0)
    for _ in range(300):
        log.append_as_leader(build_batch([Record(b"k", b"x" * 200)]), 0)
    n_segments = len(log.segments)
    assert n_segments > 10
    m.shutdown()
    calls = {"recover": 0, "bytes": 0}
    real_recover = LogSegment.recover
    real_pread = os.pread

    def counting_recover(self, *a, **kw):
        calls["recover"] += 1
        return real_recover(self, *a, **kw)

    def counting_pread(fd, n, pos):
        data = real_pread(fd, n, pos)
        calls["bytes"] += len(data)
        return data

    monkeypatch.setattr(LogSegment, "recover", counting_recover)
    monkeypatch.setattr(os, "pread", counting_pread)
    m2 = open_manager(path)
    assert m2.was_clean_shutdown
    assert calls["recover"] == 0
    # Only the tail of the active segment (after its last index entry) was read.
    assert calls["bytes"] < CFG.segment_bytes
    assert m2.get("t", 0).log_end_offset == 300
    m2.crash()
    calls["recover"] = 0
    m3 = open_manager(path)
    assert not m3.was_clean_shutdown
    # Unclean, with the recovery point at the log end (clean shutdown flushed): only the
    # segment holding the recovery point is scanned, not the whole log.
    assert calls["recover"] == 1
    assert m3.get("t", 0).log_end_offset == 300
    m3.shutdown()


def test_leftover_swap_and_cleaned_files(tmp_path):
    path = str(tmp_path)
    m = open_manager(path)
    log = m.create("t", 0)
    for _ in range(50):
        log.append_as_leader(build_batch([Record(b"k", b"x" * 200)]), 0)
    d = log.directory
    first = log.segments[0]
    m.shutdown()
    # A cleaned copy of the first segment that got as far as `.swap` before a crash.
    with open(first.log_path, "rb") as f:
        data = f.read()
    with open(os.path.join(d, "00000000000000000000.log.swap"), "wb") as f:
        f.write(data)
    with open(os.path.join(d, "00000000000000000000.log.cleaned"), "wb") as f:
        f.write(b"junk")
    os.remove(os.path.join(path, ".kafka_cleanshutdown"))
    m2 = open_manager(path)
    log2 = m2.get("t", 0)
    assert log2.log_end_offset == 50
    names = os.listdir(d)
    assert not [n for n in names if n.endswith((".swap", ".cleaned"))]
    m2.shutdown()


def test_missing_or_corrupt_index_rebuilt_on_clean_start(tmp_path):
    path = str(tmp_path)
    m = open_manager(path)
    log = m.create("t", 0)
    for i in range(200):
        log.append_as_leader(build_batch([Record(b"k", b"%d" % i * 40)]), 0)
    log.update_high_watermark()
    before = stored_batches(log)
    segs = log.segments
    assert len(segs) > 4
    m.shutdown()
    os.remove(segs[1].index.path)
    with open(segs[2].index.path, "r+b") as f:  # a plausible-size index pointing past the end
        f.write(b"\x00\x00\x00\x05\x7f\xff\xff\xff")
    with open(segs[3].time_index.path, "ab") as f:
        f.write(b"\x01\x02\x03")
    m2 = open_manager(path)
    assert m2.was_clean_shutdown
    log2 = m2.get("t", 0)
    log2.update_high_watermark()
    assert stored_batches(log2) == before
    for off in range(0, 200, 7):
        assert parse_header(log2.read(off, 1).to_bytes()).base_offset == off
    m2.shutdown()


def test_plausible_wrong_index_is_rebuilt_on_read(tmp_path):
    path = str(tmp_path)
    m = open_manager(path)
    log = m.create("t", 0)
    for i in range(200):
        log.append_as_leader(build_batch([Record(b"k", b"%d" % i * 40)]), 0)
    seg = log.segments[1]
    m.shutdown()
    with open(seg.index.path, "r+b") as f:  # entry 0 now points 3 bytes into a batch
        rel, pos = struct.unpack(">ii", f.read(8))
        f.seek(0)
        f.write(struct.pack(">ii", rel, pos + 3))
    m2 = open_manager(path)
    log2 = m2.get("t", 0)
    log2.update_high_watermark()
    first = seg.base_offset + rel
    assert parse_header(log2.read(first, 1).to_bytes()).base_offset == first
    m2.shutdown()


def test_epochs_lost_with_an_unsynced_checkpoint_are_rederived(tmp_path):
    """The epoch checkpoint is written without fsync on the append path: after a crash that
    lost it, recovery rebuilds the epochs from the recovered batches' headers."""
    path = str(tmp_path)
    m = open_manager(path)
    log = m.create("t", 0)
    log.append_as_leader(build_batch([Record(b"a", b"1")]), 0)
    log.append_as_leader(build_batch([Record(b"b", b"2"), Record(b"c", b"3")]), 2)
    log.append_as_leader(build_batch([Record(b"d", b"4")]), 5)
    assert log.leader_epoch_cache.entries == [(0, 0), (2, 1), (5, 3)]
    epoch_file = os.path.join(log.directory, "leader-epoch-checkpoint")
    m.crash()  # no clean shutdown
    os.remove(epoch_file)  # and the write never reached the disk
    m2 = open_manager(path)
    log2 = m2.get("t", 0)
    assert log2.log_end_offset == 4
    assert log2.leader_epoch_cache.entries == [(0, 0), (2, 1), (5, 3)]
    assert log2.leader_epoch_cache.end_offset_for(2, log2.log_end_offset) == (2, 3)
    m2.shutdown()
