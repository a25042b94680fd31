"""Unclean restart: the scan of the segment holding the recovery point starts at the last
offset-index entry below it (issue 27), not at the segment's start.

Real files through the storage layer: a LogManager writes, flushes (the recovery point),
writes more, and stops as a SIGKILL would (`crash`); a new LogManager recovers the same
directory. Each test checks what the restart finds against what was written, and the
rebuilt indexes against a full rebuild of the same segment file.
"""

from __future__ import annotations

import os
import time

import pytest

from yak.errors import OutOfOrderSequenceError
from yak.protocol.records import Record, build_batch, iter_batches
from yak.storage import LogConfig, LogManager, checkpoint
from yak.storage.segment import LogSegment

# Small index interval: many entries per segment; large segments: one active segment.
CFG = LogConfig(index_interval_bytes=1024)
TOPIC = "t"
T0 = int(time.time() * 1000) - 60_000  # recent: no roll by segment.ms


def open_manager(path: str) -> LogManager:
    m = LogManager(path, CFG, start_cleaner=False)
    m.startup()
    return m


def batch(i: int, pid: int = -1, seq: int = -1, **kw) -> bytes:
    recs = [Record(b"k%d" % (i % 7), b"v%06d" % i * 20, T0 + i)
            for _ in range(3)]
    if pid >= 0:
        return build_batch(recs, producer_id=pid, producer_epoch=0, base_sequence=seq, **kw)
    return build_batch(recs, **kw)


def stored(log) -> list[bytes]:
    """Every batch the log returns, in order."""
    out = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        data = log.read(off, 10**7, max_offset=log.log_end_offset).to_bytes()
        assert data, off
        for p, h in iter_batches(data):
            out.append(data[p : p + h.size])
            off = h.next_offset
    return out


def write(log, start: int, n: int, pid: int = -1) -> None:
    for i in range(start, start + n):
        log.append_as_leader(batch(i, pid, i * 3 if pid >= 0 else -1), 2)


def crashed(path: str, before: int, after: int, pid: int = -1) -> tuple[list[bytes], int, int]:
    """`before` batches, flush + checkpoint (the recovery point), `after` more, crash.
    Returns (batches, recovery point, log end offset)."""
    m = open_manager(path)
    log = m.create(TOPIC, 0)
    write(log, 0, before, pid)
    log.flush()
    m.checkpoint()
    rp = log.recovery_point
    write(log, before, after, pid)
    log.update_high_watermark()
    batches, end = stored(log), log.log_end_offset
    m.crash()
    return batches, rp, end


def full_rebuild(seg_log_path: str, base: int) -> tuple[list, list, list, list]:
    """The indexes a scan of the whole file builds (a fresh segment on a copy)."""
    d = os.path.dirname(seg_log_path) + "-copy"
    os.makedirs(d, exist_ok=True)
    with open(seg_log_path, "rb") as src, \
            open(os.path.join(d, os.path.basename(seg_log_path)), "wb") as dst:
        dst.write(src.read())
    seg = LogSegment(d, base, CFG.segment_index_bytes, CFG.index_interval_bytes)
    seg.rebuild_indexes()
    out = (list(seg.index.rel_offsets), list(seg.index.positions),
           list(seg.time_index.timestamps), list(seg.time_index.rel_offsets))
    seg.close()
    return out


def indexes(seg: LogSegment) -> tuple[list, list, list, list]:
    return (list(seg.index.rel_offsets), list(seg.index.positions),
            list(seg.time_index.timestamps), list(seg.time_index.rel_offsets))


def test_scan_starts_at_last_index_entry_below_recovery_point(tmp_path):
    path = str(tmp_path)
    batches, rp, end = crashed(path, 400, 40)
    m = open_manager(path)
    log = m.get(TOPIC, 0)
    stats = log.recovery_stats
    seg = log.segments[-1]
    assert len(log.segments) == 1 and 0 < rp < end
    # The start: the last index entry below the recovery point, and only from there.
    on_disk_entries = [seg.base_offset + r for r in seg.index.rel_offsets]
    assert stats.scan_start == max(o for o in on_disk_entries if o < rp)
    assert rp - stats.scan_start < 40  # within one index interval (1 KiB, ~3 batches)
    start_pos = seg.recovered_from[0]
    assert stats.bytes_scanned == seg.size - start_pos
    assert stats.bytes_scanned < seg.size / 5
    # Nothing lost, nothing added; the indexes are what a whole-file scan builds.
    assert log.log_end_offset == end
    assert stored(log) == batches
    assert indexes(seg) == full_rebuild(seg.log_path, seg.base_offset)
    assert stats.recovery_point == rp
    m.shutdown()


def test_torn_write_after_recovery_point_is_cut_and_data_before_untouched(tmp_path):
    path = str(tmp_path)
    batches, rp, end = crashed(path, 300, 30)
    seg_path = os.path.join(path, f"{TOPIC}-0", "00000000000000000000.log")
    with open(seg_path, "rb") as f:
        original = f.read()
    # The last batch torn half-way, then garbage a crash may leave (a page of zeros).
    last = len(batches[-1])
    with open(seg_path, "r+b") as f:
        f.truncate(len(original) - last // 2)
        f.seek(0, os.SEEK_END)
        f.write(b"\0" * 4096)
    m = open_manager(path)
    log = m.get(TOPIC, 0)
    stats = log.recovery_stats
    assert stats.scan_start < rp
    assert stats.bytes_truncated == last - last // 2 + 4096
    assert log.log_end_offset == end - 3  # the torn batch (3 records) is gone
    assert stored(log) == batches[:-1]
    with open(seg_path, "rb") as f:
        assert f.read() == original[: len(original) - last]
    seg = log.segments[-1]
    assert indexes(seg) == full_rebuild(seg.log_path, seg.base_offset)
    # The log goes on from the cut.
    log.append_as_leader(batch(999), 2)
    assert log.log_end_offset == end
    m.shutdown()


def test_data_before_the_start_is_trusted_not_rescanned(tmp_path):
    """What lies below the start was fsynced before the recovery point passed it: it is not
    read again. (A flipped byte there is the disk's fault, which a full scan would cut; the
    start-point scan leaves it, as Kafka leaves segments below the recovery point.)"""
    path = str(tmp_path)
    batches, rp, end = crashed(path, 300, 30)
    seg_path = os.path.join(path, f"{TOPIC}-0", "00000000000000000000.log")
    with open(seg_path, "r+b") as f:  # a value byte of the 10th batch
        f.seek(sum(len(b) for b in batches[:9]) + 80)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    m = open_manager(path)
    log = m.get(TOPIC, 0)
    assert log.recovery_stats.bytes_truncated == 0
    assert log.log_end_offset == end
    assert len(stored(log)) == len(batches)
    m.shutdown()


def test_corrupt_start_batch_falls_back_to_a_whole_segment_scan(tmp_path):
    path = str(tmp_path)
    batches, rp, end = crashed(path, 300, 30)
    m = open_manager(path)  # find the start the index gives
    seg = m.get(TOPIC, 0).segments[-1]
    start_pos = seg.recovered_from[0]
    m.crash()
    seg_path = os.path.join(path, f"{TOPIC}-0", "00000000000000000000.log")
    with open(seg_path, "r+b") as f:  # a byte under the start batch's CRC
        f.seek(start_pos + 70)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    m = open_manager(path)
    log = m.get(TOPIC, 0)
    stats = log.recovery_stats
    assert stats.scan_start == 0  # the whole segment
    assert stats.bytes_truncated > 0
    assert log.segments[-1].size == start_pos  # cut at the corrupt batch
    kept = [b for b in batches if sum(len(x) for x in batches[: batches.index(b)]) < start_pos]
    assert stored(log) == kept
    assert log.recovery_point == log.log_end_offset  # clamped to what is left
    m.shutdown()


@pytest.mark.parametrize("damage", ["missing", "garbage", "short"])
def test_unusable_offset_index_falls_back_to_a_whole_segment_scan(tmp_path, damage):
    path = str(tmp_path)
    batches, rp, end = crashed(path, 300, 30)
    index_path = os.path.join(path, f"{TOPIC}-0", "00000000000000000000.index")
    if damage == "missing":
        os.remove(index_path)
    elif damage == "garbage":
        with open(index_path, "r+b") as f:
            f.seek(16)
            f.write(os.urandom(64))
    else:
        with open(index_path, "r+b") as f:
            f.truncate(os.path.getsize(index_path) - 3)
    m = open_manager(path)
    log = m.get(TOPIC, 0)
    seg = log.segments[-1]
    assert log.log_end_offset == end
    assert stored(log) == batches
    assert indexes(seg) == full_rebuild(seg.log_path, seg.base_offset)
    if damage != "garbage":  # random bytes may still look like an ordered prefix
        assert log.recovery_stats.scan_start == 0
    m.shutdown()


@pytest.mark.parametrize("rp_value", ["end", "past_end", "huge", "zero"])
def test_stale_or_overlarge_recovery_point_clamps_safely(tmp_path, rp_value):
    path = str(tmp_path)
    batches, rp, end = crashed(path, 300, 30)
    cp = os.path.join(path, checkpoint.RECOVERY_POINT_FILE)
    value = {"end": end, "past_end": end + 500, "huge": 2**62, "zero": 0}[rp_value]
    checkpoint.write_offsets(cp, {(TOPIC, 0): value})
    # A torn tail too: a recovery point past it must not keep it.
    seg_path = os.path.join(path, f"{TOPIC}-0", "00000000000000000000.log")
    with open(seg_path, "r+b") as f:
        f.truncate(os.path.getsize(seg_path) - 5)
    m = open_manager(path)
    log = m.get(TOPIC, 0)
    stats = log.recovery_stats
    assert log.log_end_offset == end - 3
    assert stored(log) == batches[:-1]
    assert m.wait_for_flushes(30)
    assert log.recovery_point == end - 3  # never past the log end
    seg = log.segments[-1]
    assert indexes(seg) == full_rebuild(seg.log_path, seg.base_offset)
    if rp_value == "zero":
        assert stats.scan_start == 0
    else:  # from the last index entry on disk
        assert stats.scan_start > 0 and stats.bytes_scanned < seg.size / 5
    m.shutdown()


def test_recovery_point_in_a_middle_segment(tmp_path):
    """Rolled segments: the one holding the recovery point is scanned from its index entry,
    every later one whole."""
    path = str(tmp_path)
    cfg = LogConfig(segment_bytes=60_000, index_interval_bytes=1024)
    m = LogManager(path, cfg, start_cleaner=False)
    m.startup()
    log = m.create(TOPIC, 0)
    write(log, 0, 250)
    m.wait_for_flushes(30)
    log.flush()
    m.checkpoint()
    rp = log.recovery_point
    write(log, 250, 400)
    log.update_high_watermark()
    batches, end = stored(log), log.log_end_offset
    bases = [s.base_offset for s in log.segments]
    m.crash()
    # The roll flusher may have moved the checkpoint on meanwhile: put back the point of
    # the flush above (an older checkpoint is a state a crash can leave).
    checkpoint.write_offsets(os.path.join(path, checkpoint.RECOVERY_POINT_FILE),
                             {(TOPIC, 0): rp})
    m = LogManager(path, cfg, start_cleaner=False)
    m.startup()
    log = m.get(TOPIC, 0)
    stats = log.recovery_stats
    holding = max(b for b in bases if b <= rp)
    assert stats.scanned == [b for b in bases if b >= holding]
    assert holding < stats.scan_start < rp
    assert log.log_end_offset == end and stored(log) == batches
    for seg in log.segments:  # (one below is as it was: with its roll's last time entry)
        if seg.base_offset >= holding:
            assert indexes(seg) == full_rebuild(seg.log_path, seg.base_offset), seg.base_offset
    m.shutdown()


def test_producer_state_and_aborted_transactions_survive(tmp_path):
    """Idempotent sequences and aborted transactions on both sides of the recovery point:
    the replay rebuilds the producer state and the `.txnindex` entries after the start,
    and keeps those before it."""
    path = str(tmp_path)
    m = open_manager(path)
    log = m.create(TOPIC, 0)
    seq = {5: 0, 6: 0}

    def txn(pid: int, n: int, commit: bool) -> None:
        for i in range(n):
            log.append_as_leader(batch(i, pid, seq[pid], transactional=True), 2)
            seq[pid] += 3
        log.append_txn_marker(pid, 0, 1, commit=commit, leader_epoch=2)

    write(log, 0, 100, pid=9)
    txn(5, 20, commit=False)
    txn(6, 20, commit=True)
    log.flush()
    m.checkpoint()
    rp = log.recovery_point
    txn(5, 20, commit=False)
    write(log, 100, 50, pid=9)
    log.append_as_leader(batch(0, 6, seq[6], transactional=True), 2)  # left open
    seq[6] += 3
    log.update_high_watermark()
    end = log.log_end_offset
    aborted = log.collect_aborted_txns(0, end)
    lso = log.last_stable_offset
    batches = stored(log)
    m.crash()
    m = open_manager(path)
    log = m.get(TOPIC, 0)
    assert 0 < log.recovery_stats.scan_start < rp
    assert log.log_end_offset == end and stored(log) == batches
    assert log.collect_aborted_txns(0, end) == aborted and len(aborted) == 2
    log.update_high_watermark()
    assert log.last_stable_offset == lso
    # Sequences go on where they were; a gap is refused.
    log.append_as_leader(batch(150, 9, 150 * 3), 2)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(152, 9, 152 * 3), 2)
    m.shutdown()


def test_snapshot_at_the_recovery_point_is_kept(tmp_path):
    """A clean shutdown leaves a producer snapshot at the log end and the recovery point
    there; after more writes and a crash the replay starts from that snapshot, not from
    the log's start."""
    path = str(tmp_path)
    m = open_manager(path)
    log = m.create(TOPIC, 0)
    write(log, 0, 200, pid=9)
    m.shutdown()
    m = open_manager(path)
    log = m.get(TOPIC, 0)
    snap = log.log_end_offset
    write(log, 200, 30, pid=9)
    end = log.log_end_offset
    m.crash()
    m = open_manager(path)
    log = m.get(TOPIC, 0)
    assert log.log_end_offset == end
    assert snap in log.producer_state.snapshot_offsets()
    assert log.recovery_stats.scan_start < snap
    log.append_as_leader(batch(230, 9, 230 * 3), 2)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(232, 9, 232 * 3), 2)
    m.shutdown()


def test_recovered_tail_is_flushed_so_the_next_crash_scans_only_new_data(tmp_path):
    """After an unclean start the flusher fsyncs the recovered tail with a producer
    snapshot at the log end and moves the recovery point there: a second crash scans and
    replays only what came after the first restart, not the same tail again."""
    path = str(tmp_path)
    batches, rp, end = crashed(path, 200, 200, pid=9)
    m = open_manager(path)
    log = m.get(TOPIC, 0)
    assert log.recovery_stats.scan_start < rp < end
    assert m.wait_for_flushes(30)
    assert log.recovery_point == end
    assert end in log.producer_state.snapshot_offsets()
    m.checkpoint()
    write(log, 400, 20, pid=9)
    end2 = log.log_end_offset
    m.crash()
    cp = checkpoint.read_offsets(os.path.join(path, checkpoint.RECOVERY_POINT_FILE))
    assert cp[(TOPIC, 0)] == end
    m = open_manager(path)
    log = m.get(TOPIC, 0)
    stats = log.recovery_stats
    assert end - 40 < stats.scan_start < end
    assert log.log_end_offset == end2
    assert end in log.producer_state.snapshot_offsets()
    log.append_as_leader(batch(420, 9, 420 * 3), 2)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(422, 9, 422 * 3), 2)
    m.shutdown()
