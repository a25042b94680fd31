"""Kafka's segment files: both indexes with every segment, the roll flush off the append
thread, the recovery point it advances, and an unclean restart that scans only from it."""

from __future__ import annotations

import os
import threading

import pytest

from yak.errors import KafkaStorageError
from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager, checkpoint

CFG = LogConfig(segment_bytes=2000, index_interval_bytes=200)


def open_manager(path: str, cfg: LogConfig = CFG) -> LogManager:
    m = LogManager(path, cfg, start_cleaner=False)
    m.startup()
    return m


def fill(log, n: int, size: int = 150) -> None:
    for i in range(n):
        log.append_as_leader(build_batch([Record(b"k%d" % i, b"x" * size)]), 0)


def segment_files(directory: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name in os.listdir(directory):
        stem, _, ext = name.partition(".")
        if stem.isdigit():
            out.setdefault(stem, set()).add(ext)
    return out


def recovery_point_on_disk(path: str, topic: str, partition: int) -> int | None:
    rp = checkpoint.read_offsets(os.path.join(path, checkpoint.RECOVERY_POINT_FILE))
    return rp.get((topic, partition))


def test_every_segment_has_both_indexes_from_creation(tmp_path):
    m = open_manager(str(tmp_path))
    log = m.create("t", 0)
    files = segment_files(log.directory)
    assert files == {"00000000000000000000": {"log", "index", "timeindex"}}
    fill(log, 60)
    assert len(log.segments) >= 4
    # Nothing flushed or closed yet: the files exist anyway, rolled and active alike.
    for stem, exts in segment_files(log.directory).items():
        assert {"log", "index", "timeindex"} <= exts, stem
    m.crash()


def test_roll_flush_advances_recovery_point_and_checkpoint(tmp_path):
    path = str(tmp_path)
    m = open_manager(path)
    log = m.create("t", 0)
    fill(log, 60)
    assert m.wait_for_flushes(10)
    active_base = log.segments[-1].base_offset
    assert active_base > 0
    # Everything below the active segment is synced and the checkpoint says so.
    assert log.recovery_point == active_base
    assert recovery_point_on_disk(path, "t", 0) == active_base
    assert not any(s.unflushed for s in log.segments[:-1])
    # The rolled segments' index files hold their entries (written at roll, synced after).
    for seg in log.segments[:-1]:
        assert os.path.getsize(seg.index.path) == 8 * len(seg.index)
        assert os.path.getsize(seg.time_index.path) == 12 * len(seg.time_index)
        assert len(seg.time_index) >= 1  # the final entry Kafka adds at roll
    m.shutdown()


def test_fsyncs_never_run_on_the_appending_thread(tmp_path, monkeypatch):
    """Rolls hand the fsync to the flusher thread: the append path never waits on disk."""
    m = open_manager(str(tmp_path))
    log = m.create("t", 0)
    threads: list[str] = []
    real_fdatasync, real_fsync = os.fdatasync, os.fsync

    def fdatasync(fd: int) -> None:
        threads.append(threading.current_thread().name)
        real_fdatasync(fd)

    def fsync(fd: int) -> None:
        threads.append(threading.current_thread().name)
        real_fsync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "fsync", fsync)
    me = threading.current_thread().name
    fill(log, 80)
    rolled = len(log.segments) - 1
    assert rolled >= 5
    assert m.wait_for_flushes(10)
    assert me not in threads
    assert threads and set(threads) == {"yak-log-flusher"}
    assert log.recovery_point == log.segments[-1].base_offset
    monkeypatch.undo()
    m.shutdown()


def test_unclean_restart_scans_only_from_the_recovery_point(tmp_path):
    path = str(tmp_path)
    m = open_manager(path)
    log = m.create("t", 0)
    fill(log, 70)
    assert m.wait_for_flushes(10)
    bases = [s.base_offset for s in log.segments]
    leo = log.log_end_offset
    fill(log, 3)  # after the last roll flush: only in the page cache
    assert log.segments[-1].base_offset == bases[-1]
    m.crash()

    m2 = open_manager(path)
    log2 = m2.get("t", 0)
    stats = log2.recovery_stats
    assert not stats.clean
    assert stats.recovery_point == bases[-1]
    assert stats.segments == len(bases)
    assert stats.scanned == [bases[-1]]  # the active segment only, not the rolled ones
    assert stats.bytes_truncated == 0
    assert log2.log_end_offset == leo + 3
    m2.shutdown()
    m3 = open_manager(path)
    assert m3.get("t", 0).recovery_stats.scanned == []  # clean: nothing scanned
    m3.shutdown()


def test_recovered_segments_are_synced_before_the_recovery_point_passes_them(tmp_path):
    """With no roll flush (flusher stopped), a crash makes recovery scan every segment; they
    count as unflushed, so their rebuilt indexes are written and synced before the point
    moves past them, and the next crash scans only the active segment."""
    path = str(tmp_path)
    m = open_manager(path)
    m.flusher.stop()  # rolls are not flushed: the recovery point stays at 0
    log = m.create("t", 0)
    fill(log, 50)
    n_segments = len(log.segments)
    assert n_segments >= 4 and log.recovery_point == 0
    m.crash()

    m2 = open_manager(path)
    log2 = m2.get("t", 0)
    assert log2.recovery_stats.scanned == [s.base_offset for s in log2.segments]
    assert all(s.unflushed for s in log2.segments)
    log2.flush_if_due(0)  # maintenance: rolled segments not synced yet
    active = log2.segments[-1]
    assert log2.recovery_point == active.base_offset
    m2.checkpoint()
    entries = {s.base_offset: (list(s.index.rel_offsets), list(s.time_index.timestamps))
               for s in log2.segments[:-1]}
    m2.crash()

    m3 = open_manager(path)
    log3 = m3.get("t", 0)
    assert log3.recovery_stats.scanned == [active.base_offset]
    for seg in log3.segments[:-1]:  # loaded from their files, not rebuilt
        seg.ensure_indexes()
        assert (list(seg.index.rel_offsets), list(seg.time_index.timestamps)) == (
            entries[seg.base_offset]
        )
    assert log3.log_end_offset == 50
    m3.shutdown()


def test_failed_roll_flush_keeps_segments_dirty_and_is_retried(tmp_path, monkeypatch):
    path = str(tmp_path)
    m = open_manager(path)
    log = m.create("t", 0)
    real = os.fdatasync
    failures = [0]

    def failing(fd: int) -> None:
        failures[0] += 1
        raise OSError(5, "EIO")

    monkeypatch.setattr(os, "fdatasync", failing)
    fill(log, 30)
    assert m.wait_for_flushes(10)
    assert failures[0] >= 1
    assert log.recovery_point == 0
    assert any(s.unflushed for s in log.segments[:-1])
    with pytest.raises(KafkaStorageError):
        log.flush_upto(log.segments[-1].base_offset)
    monkeypatch.setattr(os, "fdatasync", real)
    log.flush_if_due(0)  # maintenance retries
    assert log.recovery_point == log.segments[-1].base_offset
    assert not any(s.unflushed for s in log.segments[:-1])
    m.shutdown()


def test_full_index_rolls_the_segment(tmp_path):
    # Room for 4 offset-index entries; one entry per ~200 bytes of log.
    cfg = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200, segment_index_bytes=32)
    m = open_manager(str(tmp_path), cfg)
    log = m.create("t", 0)
    fill(log, 40)
    assert len(log.segments) >= 3
    for seg in log.segments[:-1]:
        assert len(seg.index) <= 4
    m.shutdown()


def test_orphan_index_of_a_segment_created_at_the_crash_is_removed(tmp_path):
    """A crash between creating a new segment's indexes and its `.log` leaves indexes alone:
    they are removed at load, and the log is intact."""
    path = str(tmp_path)
    m = open_manager(path)
    log = m.create("t", 0)
    fill(log, 10)
    leo = log.log_end_offset
    d = log.directory
    m.crash()
    for ext in ("index", "timeindex"):
        with open(os.path.join(d, f"{leo:020d}.{ext}"), "wb"):
            pass
    m2 = open_manager(path)
    assert m2.get("t", 0).log_end_offset == leo
    # (A producer snapshot at the log end is written after the recovery: not a segment.)
    assert segment_files(d).get(f"{leo:020d}", set()) <= {"snapshot"}
    m2.shutdown()
