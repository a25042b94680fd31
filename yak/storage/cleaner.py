"""Log compaction (cleanup.policy=compact): keep the latest record per key, offsets unchanged.

Kafka's two passes: (1) read the dirty part of the log (from the cleaner checkpoint to the
first uncleanable offset) into an offset map key -> latest offset; (2) recopy every cleanable
segment, keeping a record only if no later record has its key, into `.cleaned` files that
replace the originals atomically (`PartitionLog.replace_segments`). Only inactive segments
below the high watermark are touched, so appends never wait on the cleaner, and readers keep
their old segments' file descriptors until `file.delete.delay.ms` passes.

Simplifications (documented in docs/storage.md): a tombstone is dropped once its timestamp is
older than `delete.retention.ms` (Kafka measures from when the cleaner first passed it);
records without a key are dropped (Kafka refuses them at produce time for compacted topics);
a batch left empty is dropped.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

from yak.protocol.records import (
    CONTROL_BIT,
    LOG_OVERHEAD,
    BatchHeader,
    RecordSpans,
    parse_header,
    rebuild_batch,
    scan_keys,
)
from yak.storage.log import PartitionLog
from yak.storage.segment import LogSegment

MAX_MAP_ENTRIES = 4_000_000
SPANS_CACHE_BYTES = 64 * 1024 * 1024  # parsed dirty batches kept for the recopy pass
_WRITE_CHUNK = 1 << 20


@dataclass
class CleanStats:
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int
    segments_before: int
    segments_after: int
    elapsed_s: float
    cpu_s: float


def _largest_ts(seg: LogSegment) -> int:
    return seg.largest_timestamp


def clean_log(log: PartitionLog, now: int, force: bool = False) -> CleanStats | None:
    """One cleaning round if the log is dirty enough (or `force`); None if nothing to do."""
    cfg = log.config
    t0, c0 = time.perf_counter(), time.process_time()
    with log.lock:
        segs = list(log.segments)
        upper_bound = min(log.high_watermark, log.last_stable_offset)
        first_dirty = max(log.first_dirty_offset, log.log_start_offset)
    # Cleanable: inactive segments wholly below the high watermark / first open transaction
    # and older than min.compaction.lag.ms.
    cleanable: list[LogSegment] = []
    for i, seg in enumerate(segs[:-1]):
        upper = segs[i + 1].base_offset
        if upper > upper_bound:
            break
        if cfg.min_compaction_lag_ms and now - _largest_ts(seg) < cfg.min_compaction_lag_ms:
            break
        cleanable.append(seg)
    if not cleanable:
        return None
    end_offset = segs[len(cleanable)].base_offset
    if first_dirty >= end_offset:
        return None
    dirty = [(i, s) for i, s in enumerate(cleanable) if segs[i + 1].base_offset > first_dirty]
    dirty_bytes = sum(s.size for _i, s in dirty)
    total_bytes = sum(s.size for s in cleanable)
    forced = force or any(now - _largest_ts(s) > cfg.max_compaction_lag_ms for _i, s in dirty)
    if not dirty_bytes or (
        not forced and dirty_bytes / max(total_bytes, 1) < cfg.min_cleanable_dirty_ratio
    ):
        return None

    # Pass 1: key -> latest offset over the dirty range.
    offset_map: dict[bytes, int] = {}
    spans_cache: dict[tuple[int, int], tuple[bytes, RecordSpans]] = {}
    bytes_read = 0
    for i, seg in dirty:
        for pos, h in list(seg.iter_headers(0)):
            if h.base_offset + h.last_offset_delta < first_dirty or h.attributes & CONTROL_BIT:
                continue
            batch = seg.read_batch(pos, h.batch_length + LOG_OVERHEAD)
            bytes_read += len(batch)
            spans = scan_keys(batch)
            if bytes_read <= SPANS_CACHE_BYTES:  # pass 2 would parse the same batch again
                spans_cache[(id(seg), pos)] = (batch, spans)
            for off, key, _tomb, _s, _e in spans.records:
                if key is not None and off >= first_dirty:
                    offset_map[key] = off
        if len(offset_map) >= MAX_MAP_ENTRIES:
            end_offset = segs[i + 1].base_offset  # clean what the map covers; rest next round
            cleanable = [s for s in cleanable if s.base_offset < end_offset]
            break

    # Pass 2: recopy, grouped so each replacement segment stays under segment.bytes.
    tombstone_horizon = now - cfg.delete_retention_ms
    stats = CleanStats(
        log.topic,
        log.partition,
        log.log_start_offset,
        end_offset,
        0,
        0,
        0,
        0,
        len(cleanable),
        0,
        0.0,
        0.0,
    )
    for group in _group_by_size(cleanable, cfg.segment_bytes):
        new = _recopy(log, group, offset_map, tombstone_horizon, stats, spans_cache)
        if new is None or not log.replace_segments(group, [new]):
            if new is not None:
                new.delete_files()
            return None
        stats.segments_after += 1
    log.first_dirty_offset = end_offset
    stats.bytes_read += bytes_read
    stats.elapsed_s = time.perf_counter() - t0
    stats.cpu_s = time.process_time() - c0
    return stats


def _group_by_size(segs: list[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
    groups: list[list[LogSegment]] = []
    cur: list[LogSegment] = []
    size = 0
    for s in segs:
        if cur and size + s.size > max_bytes:
            groups.append(cur)
            cur, size = [], 0
        cur.append(s)
        size += s.size
    if cur:
        groups.append(cur)
    return groups


def _recopy(
    log: PartitionLog,
    group: list[LogSegment],
    offset_map: dict[bytes, int],
    tombstone_horizon: int,
    stats: CleanStats,
    spans_cache: dict[tuple[int, int], tuple[bytes, RecordSpans]],
) -> LogSegment | None:
    cfg = log.config
    new = LogSegment(
        log.directory,
        group[0].base_offset,
        cfg.segment_index_bytes,
        cfg.index_interval_bytes,
        suffix=".cleaned",
    )
    try:
        if new.size:
            os.ftruncate(new.fd, 0)
            new.size = 0
        new.rebuild_indexes()
        iov: list[bytes] = []
        meta: list[tuple[int, int, int, int]] = []
        pending = 0
        for seg in group:
            for pos, h in list(seg.iter_headers(0)):
                size = h.batch_length + LOG_OVERHEAD
                cached = spans_cache.pop((id(seg), pos), None)
                if cached is None:
                    raw, spans = seg.read_batch(pos, size), None
                    stats.bytes_read += size
                else:
                    raw, spans = cached
                out = _filter_batch(raw, h, offset_map, tombstone_horizon, stats, spans)
                if out is None:
                    continue
                oh = parse_header(out)
                iov.append(out)
                meta.append((oh.base_offset, oh.last_offset, oh.max_timestamp, len(out)))
                pending += len(out)
                if pending >= _WRITE_CHUNK:
                    new.append(iov, pending, meta)
                    stats.bytes_written += pending
                    iov, meta, pending = [], [], 0
        if iov:
            new.append(iov, pending, meta)
            stats.bytes_written += pending
        new.on_become_inactive()
        return new
    except Exception:
        with contextlib.suppress(OSError):
            new.delete_files()
        raise


def _filter_batch(
    raw: bytes,
    h: BatchHeader,
    offset_map: dict[bytes, int],
    tombstone_horizon: int,
    stats: CleanStats,
    spans: RecordSpans | None = None,
) -> bytes | None:
    """The batch with superseded records and expired tombstones removed; the original bytes
    when every record stays; None when none does. Kept records are copied, not re-encoded."""
    if h.attributes & CONTROL_BIT:
        return raw
    if spans is None:
        spans = scan_keys(raw)
    stats.records_read += len(spans.records)
    expired = h.max_timestamp < tombstone_horizon
    keep = []
    for i, (off, key, tomb, _s, _e) in enumerate(spans.records):
        if key is None:
            continue
        latest = offset_map.get(key)
        if (latest is not None and off < latest) or (tomb and expired):
            continue
        keep.append(i)
    stats.records_kept += len(keep)
    if len(keep) == len(spans.records):
        return raw
    if not keep:
        return None
    return rebuild_batch(spans, keep)
