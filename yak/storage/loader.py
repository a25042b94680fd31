"""Loading a partition log from its directory (Kafka's LogLoader): one job, turn the files
left by the last run, cleanly shut down or crashed, into a list of trusted segments, the
offsets that go with them, and the producer state replayed from them.

Separate from the log because it runs once, at start-up, before the log serves anything,
and its reasoning (what a crash may have left half-written, which files to trust, which to
finish or drop) has nothing to do with appending or reading. It works on what it is given
(the directory, a segment factory, the epoch cache and the producer state) and returns a
`LoadedLog`; `PartitionLog.__init__` adopts it. The producer-state replay
(`rebuild_producer_state`) and a control batch's replay (`end_txn_from_batch`) live here
too: a truncation rebuilds producer state the same way, and a follower ends a replicated
transaction the way recovery does.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

from yak.errors import CorruptRecordError, InvalidRecordError
from yak.protocol.control_records import ABORT, read_control_fields
from yak.protocol.records import (
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    read_header,
)
from yak.storage import checkpoint
from yak.storage.epoch_cache import LeaderEpochCache
from yak.storage.producer_state import ProducerStateManager
from yak.storage.segment import LogSegment
from yak.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

_SEGMENT_EXTS = (".log", ".index", ".timeindex", ".txnindex")


@dataclass(slots=True)
class RecoveryStats:
    """What loading a log did: which segments were validated batch by batch.

    After a clean shutdown nothing is scanned. After a crash, Kafka's LogLoader.recoverLog:
    only the segments from the one holding the recovery point on (`scanned`, base offsets),
    and in the one holding it only from its last index entry below the recovery point
    (`scan_start`), so the work is bounded by what was written since the last flush, not
    by the size of the log or of its active segment.
    """

    clean: bool
    recovery_point: int  # from the checkpoint
    segments: int  # segments found on disk
    scanned: list[int] = field(default_factory=list)  # base offsets of validated segments
    scan_start: int = -1  # the offset the first scanned segment's scan started at
    bytes_scanned: int = 0
    bytes_truncated: int = 0
    segments_deleted: int = 0  # after a cut: everything later is untrusted


@dataclass(slots=True)
class LoadedLog:
    """The outcome of `load_log`: the trusted segments (oldest first, the last one active)
    and the log's offsets. `txn_rebuild_from`: the first scanned segment's base offset after
    a crash (its `.txnindex` entries are rebuilt by the producer-state replay), else None."""

    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    high_watermark: int
    stats: RecoveryStats
    txn_rebuild_from: int | None


def load_log(
    directory: str,
    topic: str,
    partition: int,
    new_segment: Callable[[int], LogSegment],
    epoch_cache: LeaderEpochCache,
    producer_state: ProducerStateManager,
    recovery_point: int,
    log_start: int,
    hw: int,
    clean: bool,
    now: int,
) -> LoadedLog:
    """Open the segments of `directory`: finish or drop an interrupted cleaner swap, drop
    orphan indexes, and after a crash (`clean` false) recover from `recovery_point`.
    The epoch cache is cut at the log end; producer state is left to
    `rebuild_producer_state` (it needs the offsets decided here)."""
    complete_interrupted_swaps(directory)
    bases = sorted(
        int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log") and n[:-4].isdigit()
    )
    # Orphan indexes (their .log is gone) would confuse a later segment with that base.
    for n in os.listdir(directory):
        stem, _, ext = n.partition(".")
        if ext in ("index", "timeindex", "txnindex") and stem.isdigit() \
                and int(stem) not in bases:
            checkpoint.remove_quietly(os.path.join(directory, n))
    segments = [new_segment(b) for b in bases]
    if not segments:
        segments = [new_segment(max(log_start, 0))]
    stats = RecoveryStats(clean, recovery_point, len(segments))
    txn_rebuild_from = None
    if clean:
        active = segments[-1]
        active.load_tail()
        log_end = active.next_offset
        recovered_point = log_end
    else:
        scanned = _recover(segments, recovery_point, stats, epoch_cache)
        segments = [s for s in segments if not s.closed]
        log_end = segments[-1].next_offset
        recovered_point = min(recovery_point, log_end)
        _log_recovery(topic, partition, stats, recovery_point, log_end)
        txn_rebuild_from = _txn_rebuild_point(scanned, stats, producer_state,
                                              recovered_point)
    active = segments[-1]
    if active.size:
        # segment.ms counts from the first batch's timestamp, as Kafka's rollingBasedTimestamp
        for _pos, h in active.iter_headers(0):
            active.first_append_ms = min(h.max_timestamp, now)
            break
    log_start_offset = max(log_start, segments[0].base_offset)
    if log_start_offset > log_end:
        log_start_offset = log_end
    high_watermark = min(max(hw, log_start_offset), log_end)
    epoch_cache.truncate_from_end(log_end)
    # A truncation from the start is written lazily (epoch_cache): a crash may have lost it.
    epoch_cache.truncate_from_start(log_start_offset)
    return LoadedLog(segments, log_start_offset, log_end, recovered_point, high_watermark,
                     stats, txn_rebuild_from)


def _recover(
    segs: list[LogSegment],
    recovery_point: int,
    stats: RecoveryStats,
    cache: LeaderEpochCache,
) -> list[LogSegment]:
    """Kafka's LogLoader.recoverLog: scan only what may hold unflushed data (the segments
    from the one holding the recovery point on, that one from its last index entry below
    the point: `LogSegment.recover`), cut the log at the first invalid byte and drop
    everything after it. What lies below was fsynced with its indexes before the recovery
    point passed it, so it is trusted as it is. Deletes the segments dropped (their
    `closed` is then set); returns the scanned segments that are kept."""
    start_idx = max(bisect_right([s.base_offset for s in segs], recovery_point) - 1, 0)
    keep = segs[:start_idx]
    recovered: list[LogSegment] = []

    def on_epoch(epoch: int, base_offset: int) -> None:
        # Epochs of recovered batches: their checkpoint may not have reached the disk.
        cache.assign(epoch, base_offset)

    for i in range(start_idx, len(segs)):
        seg = segs[i]
        cut = seg.recover(on_epoch, recovery_point if i == start_idx else None)
        start_pos, start_offset = seg.recovered_from
        if i == start_idx:
            stats.scan_start = start_offset
        stats.scanned.append(seg.base_offset)
        stats.bytes_scanned += seg.size + cut - start_pos
        stats.bytes_truncated += cut
        keep.append(seg)
        recovered.append(seg)
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
        # Cut short, or overlapping its successor: nothing after it can be trusted.
        if nxt is not None and (cut or seg.next_offset > nxt):
            for later in segs[i + 1 :]:
                later.delete_files()
                stats.segments_deleted += 1
            break
    # Empty trailing segments (a roll just before the crash, or cut to nothing) go,
    # except the first one, which carries the log's base offset.
    while len(keep) > 1 and keep[-1].size == 0:
        keep.pop().delete_files()
    active = keep[-1]
    if active not in recovered:
        active.load_tail()
    if active.size == 0:
        active.next_offset = active.base_offset
    recovered = [s for s in recovered if not s.closed]
    for seg in recovered:
        # Rebuilt indexes reach their files now; the segment counts as unflushed, so
        # the recovery point passes it only after an fsync of it and its indexes.
        seg.flush_indexes(sync=False)
        seg.unflushed = True
    return recovered


def _txn_rebuild_point(
    scanned: list[LogSegment],
    stats: RecoveryStats,
    producer_state: ProducerStateManager,
    recovered_point: int,
) -> int | None:
    """Where the producer-state replay must rebuild `.txnindex` entries from, after a crash;
    the scanned segments' entries from there on are dropped here.

    The replay starts at the newest producer snapshot at or below the recovery point (one
    above it is not trusted after a crash, as in Kafka: it is deleted), and writes the
    entries of the aborts it meets from the rebuild point on. Entries of markers below the
    scan's start and below that snapshot are kept: they were fsynced with the data
    (`LogSegment.flush`) before the recovery point passed them, and the scan did not
    touch that data. So the rebuild point is the later of the two, and a replay from an
    older snapshot (a newer one unreadable) only meets markers whose entries are kept."""
    if not scanned:
        return None
    snaps = [o for o in producer_state.snapshot_offsets() if o <= recovered_point]
    rebuild = max(stats.scan_start, snaps[-1] if snaps else -1)
    producer_state.delete_snapshots_after(rebuild)
    for seg in scanned:
        before = len(seg.txn_index)
        seg.txn_index.truncate_to(rebuild)
        if len(seg.txn_index) != before and len(seg.txn_index):
            # The kept entries were rewritten to a new file: on disk before they are
            # relied on (a later crash keeps the rebuild point).
            seg.txn_index.sync()
    return rebuild


def _log_recovery(topic: str, partition: int, stats: RecoveryStats, recovery_point: int,
                  log_end: int) -> None:
    log.info(
        "recovered %s-%d after an unclean shutdown: scanned %d of %d segments from "
        "recovery point %d (base offsets %s) from offset %d, %d bytes; truncated %d bytes, "
        "deleted %d later segments; log end offset %d",
        topic,
        partition,
        len(stats.scanned),
        stats.segments,
        recovery_point,
        f"{stats.scanned[0]}..{stats.scanned[-1]}" if stats.scanned else "none",
        stats.scan_start,
        stats.bytes_scanned,
        stats.bytes_truncated,
        stats.segments_deleted,
        log_end,
    )


def complete_interrupted_swaps(directory: str) -> None:
    """`.cleaned` files are from an unfinished cleaning: drop them. A `.swap` means the
    cleaner finished writing and began replacing: finish the job (as Kafka does)."""
    names = os.listdir(directory)
    for n in names:
        path = os.path.join(directory, n)
        if n.endswith(".cleaned") or n.endswith(".deleted") or n.endswith(".tmp"):
            checkpoint.remove_quietly(path)
    swaps = sorted(n for n in names if n.endswith(".log.swap"))
    for n in swaps:
        base = int(n.split(".")[0])
        with open(os.path.join(directory, n), "rb") as f:
            data = f.read()
        end = base
        pos = 0
        while pos + HEADER_SIZE <= len(data):
            h = read_header(data, pos)
            end = h.base_offset + h.last_offset_delta + 1
            pos += h.batch_length + LOG_OVERHEAD
        for m in os.listdir(directory):
            if m.endswith(".log") and m[:-4].isdigit():
                b = int(m[:-4])
                if base <= b < end:
                    for ext in _SEGMENT_EXTS:
                        checkpoint.remove_quietly(os.path.join(directory, m[:-4] + ext))
        stem = os.path.join(directory, n[: -len(".log.swap")])
        for ext in _SEGMENT_EXTS:
            if os.path.exists(stem + ext + ".swap"):
                os.replace(stem + ext + ".swap", stem + ext)


def rebuild_producer_state(
    ps: ProducerStateManager,
    segments: tuple[LogSegment, ...],
    bases: tuple[int, ...],
    log_start: int,
    log_end: int,
    txn_rebuild_from: int | None,
    topic: str,
    partition: int,
) -> None:
    """Latest snapshot, then replay the batch headers after it (markers are read to
    end their transactions). Aborts whose marker is at or after `txn_rebuild_from` are
    written to their segment's `.txnindex` again (recovery emptied those)."""
    ps.delete_snapshots_after(log_end)
    snap = ps.load_snapshot(log_end)
    start = max(snap, log_start)
    if start >= log_end:
        return
    rebuild = log_end if txn_rebuild_from is None else txn_rebuild_from
    i = max(bisect_right(bases, start) - 1, 0)
    for seg in segments[i:]:
        found = seg.find_position(start)
        if found is None:
            continue
        for pos, h in seg.iter_headers(found[0]):
            if h.base_offset + h.last_offset_delta >= start and h.producer_id >= 0:
                ts = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_BIT else -1
                ps.update(h, h.base_offset, ts)
                if h.attributes & CONTROL_BIT:
                    batch = seg.read_batch(pos, h.batch_length + LOG_OVERHEAD)
                    end_txn_from_batch(ps, batch, h, seg, rebuild, topic, partition)


def end_txn_from_batch(
    ps: ProducerStateManager,
    batch: bytes | memoryview,
    h: BatchHeader,
    seg: LogSegment,
    rebuild: int,
    topic: str,
    partition: int,
) -> None:
    """A control batch read back (recovery, replication): end the transaction it
    closes; an ABORT at or after `rebuild` gets its `.txnindex` entry in `seg`."""
    try:
        control_type, coordinator_epoch = read_control_fields(batch, h)
    except (InvalidRecordError, CorruptRecordError, ValueError, IndexError) as e:
        log.warning("unreadable control batch at %d in %s-%d: %s", h.base_offset,
                    topic, partition, e)
        return
    if control_type not in (ABORT, 1):
        return  # other control records (none Yak writes) end nothing
    done = ps.end_txn(h.producer_id, h.producer_epoch, coordinator_epoch, h.base_offset)
    if done is not None and control_type == ABORT and h.base_offset >= rebuild:
        seg.txn_index.append(AbortedTxn(done.producer_id, done.first_offset,
                                        done.last_offset, done.last_stable_offset))
