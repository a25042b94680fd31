"""Log compaction (cleanup.policy=compact): keep the latest record per key, offsets unchanged.

Kafka's two passes: (1) read the dirty part of the log (from the cleaner checkpoint to the
first uncleanable offset) into an offset map key -> latest offset; (2) recopy every cleanable
segment, keeping a record only if no later record has its key, into `.cleaned` files that
replace the originals atomically (`PartitionLog.replace_segments`). Only inactive segments
below the high watermark are touched, so appends never wait on the cleaner, and readers keep
their old segments' file descriptors until `file.delete.delay.ms` passes.

Transactions, as Kafka's cleaner treats them: the cleaner never passes the last stable
offset; batches of aborted transactions (known from the `.txnindex` entries) are removed and
never enter the offset map, so an aborted write cannot shadow a committed one; a COMMIT
marker stays while any batch of its transaction does (without it, replaying the producer
state would think the transaction still open and pin the LSO), an ABORT marker stays while
the cleaner still finds aborted data to remove; once not needed, a marker goes after
`delete.retention.ms`, like a tombstone. A kept ABORT marker keeps its `.txnindex` entry in
the cleaned segment.

Simplifications (documented in docs/storage.md): a tombstone (or marker) is dropped once its
timestamp is older than `delete.retention.ms` (Kafka measures from when the cleaner first
passed it); records without a key are dropped (Kafka refuses them at produce time for
compacted topics); a batch left empty is dropped.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

from yak.errors import InvalidRecordError
from yak.protocol.control_records import COMMIT, decode_control_type
from yak.protocol.records import (
    CONTROL_BIT,
    LOG_OVERHEAD,
    TRANSACTIONAL_BIT,
    BatchHeader,
    RecordSpans,
    decode_records,
    parse_header,
    rebuild_batch,
    scan_keys,
)
from yak.storage.log import PartitionLog
from yak.storage.segment import LogSegment
from yak.storage.txn_index import AbortedTxn

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


class _Transactions:
    """What the cleaner knows about transactions while it walks the log in order (Kafka's
    CleanedTransactionMetadata): which batches are aborted, and whether each marker still
    has data of its transaction behind it."""

    def __init__(self, aborted: list[AbortedTxn], horizon: int) -> None:
        self.ranges: dict[int, list[tuple[int, int]]] = {}
        self.entries: dict[tuple[int, int], AbortedTxn] = {}
        for e in aborted:
            self.ranges.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
            self.entries[(e.producer_id, e.last_offset)] = e
        self.horizon = horizon
        self._committed_data: set[int] = set()  # producers with data since their last marker
        self._aborted_data: set[int] = set()
        self.kept: set[tuple[int, int]] = set()  # (producer id, offset) of kept markers

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        return any(first <= offset <= last for first, last in self.ranges.get(producer_id, ()))

    def keep_data(self, h: BatchHeader) -> bool:
        """A transactional data batch: False (remove it) if its transaction aborted."""
        if self.is_aborted(h.producer_id, h.base_offset):
            self._aborted_data.add(h.producer_id)
            return False
        self._committed_data.add(h.producer_id)
        return True

    def keep_marker(self, raw: bytes, h: BatchHeader) -> bool:
        try:
            recs = decode_records(raw)
            control_type = decode_control_type(recs[0].key if recs else None)
        except (InvalidRecordError, ValueError, IndexError):
            return True  # not understood: never drop what cannot be read
        if control_type == COMMIT:
            needed = h.producer_id in self._committed_data
            self._committed_data.discard(h.producer_id)
        else:
            needed = h.producer_id in self._aborted_data
            self._aborted_data.discard(h.producer_id)
        return needed or h.max_timestamp >= self.horizon

    def index_entries(self, base: int, end: int) -> list[AbortedTxn]:
        """The `.txnindex` entries of the markers kept in [base, end) (set by recopy)."""
        return [e for (pid, last), e in self.entries.items() if base <= last < end
                and (pid, last) in self.kept]


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

    txns = _Transactions(log.aborted_txns(), now - cfg.delete_retention_ms)

    # Pass 1: key -> latest offset over the dirty range (aborted data never counts).
    offset_map: dict[bytes, int] = {}
    spans_cache: dict[tuple[int, int], tuple[bytes, RecordSpans]] = {}
    bytes_read = 0
    for i, seg in dirty:
        for pos, h in list(seg.iter_headers(0)):
            if h.base_offset + h.last_offset_delta < first_dirty or h.attributes & CONTROL_BIT:
                continue
            if h.attributes & TRANSACTIONAL_BIT and txns.is_aborted(h.producer_id,
                                                                  h.base_offset):
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
        new = _recopy(log, group, offset_map, tombstone_horizon, stats, spans_cache, txns)
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
    txns: _Transactions,
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
                if h.attributes & CONTROL_BIT:
                    if not txns.keep_marker(raw, h):
                        continue
                    txns.kept.add((h.producer_id, h.base_offset))
                    out: bytes | None = raw
                elif h.attributes & TRANSACTIONAL_BIT and not txns.keep_data(h):
                    continue
                else:
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
        nxt = _next_base(log, group[-1])
        end = nxt if nxt is not None else 2**63 - 1
        entries = txns.index_entries(group[0].base_offset, end)
        if entries:
            new.txn_index.replace(sorted(entries, key=lambda e: e.last_offset))
        new.on_become_inactive()
        return new
    except Exception:
        with contextlib.suppress(OSError):
            new.delete_files()
        raise


def _next_base(log: PartitionLog, seg: LogSegment) -> int | None:
    segs = log.segments
    for i, s in enumerate(segs):
        if s is seg and i + 1 < len(segs):
            return segs[i + 1].base_offset
    return None


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
