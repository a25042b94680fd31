"""Retention policy (the part of Kafka's UnifiedLog.deleteOldSegments that decides): one
job, say how many of a log's oldest segments `retention.ms` and `retention.bytes` let go.

Separate from the log because the decision is pure: it reads the segment list, the log end
offset, the high watermark and the config, and changes nothing. Applying it (rolling an
expired active segment, advancing the log start offset, retiring the segments, trimming
the epoch cache and the producer snapshots) needs the log's lock and its state, and stays
in `PartitionLog.apply_retention`. Only whole segments entirely below the high watermark
ever go.
"""

from __future__ import annotations

from collections.abc import Sequence

from yak.storage.config import LogConfig
from yak.storage.segment import LogSegment


def segments_to_delete(
    segs: Sequence[LogSegment], log_end: int, hw: int, cfg: LogConfig, now: int
) -> int:
    """How many of the oldest segments may go. `len(segs)` means the active segment
    expired too: the caller rolls it first so that it can go (Kafka 2.x+), and still keeps
    the new, empty one."""
    n = 0
    if cfg.retention_ms >= 0:
        n = _expired(segs, log_end, hw, cfg.retention_ms, now)
    if cfg.retention_bytes >= 0:
        n = _over_size(segs, n, hw, cfg.retention_bytes)
    return n


def _expired(
    segs: Sequence[LogSegment], log_end: int, hw: int, retention_ms: int, now: int
) -> int:
    """By time: the oldest segments whose largest timestamp is older than `retention.ms`,
    stopping at the first one that is not, is empty, or reaches past the high watermark."""
    n = 0
    while n < len(segs):
        seg = segs[n]
        upper = segs[n + 1].base_offset if n + 1 < len(segs) else log_end
        if upper > hw or seg.size == 0:
            break
        if now - seg.largest_timestamp <= retention_ms:
            break
        n += 1
    return n


def _over_size(segs: Sequence[LogSegment], n: int, hw: int, retention_bytes: int) -> int:
    """By size: after the first `n`, more of the oldest segments while what is left stays at
    or over `retention.bytes`; never the active one, never past the high watermark."""
    total = sum(s.size for s in segs[n:])
    while n < len(segs) - 1:
        seg = segs[n]
        if total - seg.size < retention_bytes:
            break
        if segs[n + 1].base_offset > hw:
            break
        total -= seg.size
        n += 1
    return n
