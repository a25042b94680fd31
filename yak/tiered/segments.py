"""Which local segments the leader copies next, and what of them goes up (Kafka's
RemoteLogManager.candidateLogSegments and LogSegmentData): run in a thread, because it
reads index files, so the event loop never waits on the disk."""

from __future__ import annotations

import os
import time

import crc32c

from yak.storage import PartitionLog
from yak.tiered.metadata import RemoteLogSegmentMetadata, SegmentState

__all__ = ["segments_to_copy"]


def _now_ms() -> int:
    return int(time.time() * 1000)


def segments_to_copy(plog: PartitionLog, copied_upto: int, bound: int, limit: int,
                      node_id: int) -> list[tuple[RemoteLogSegmentMetadata, str, dict[str, bytes]]]:
    """In a thread (it reads index files): the oldest rolled segments not yet copied that
    end at or below `bound`, with their metadata (COPY_SEGMENT_STARTED), `.log` path and
    the small files' bytes (uploaded as read, so their CRCs in the manifest match)."""
    segs = plog.segments
    epochs = plog.leader_epoch_cache.entries
    out = []
    now = _now_ms()
    for i in range(len(segs) - 1):
        seg = segs[i]
        nxt = segs[i + 1].base_offset
        end = nxt - 1
        if nxt > bound or len(out) >= limit:
            break
        if end < copied_upto or seg.size == 0:
            continue
        seg.ensure_indexes()
        small: dict[str, bytes] = {}
        for kind, path in (("index", seg.index.path), ("timeindex", seg.time_index.path),
                           ("txnindex", seg.txn_index.path),
                           ("snapshot", os.path.join(plog.directory, f"{nxt:020d}.snapshot"))):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                if kind in ("index", "timeindex"):
                    raise
                continue
            if kind == "txnindex" and not data:
                continue
            small[kind] = data
        spans = _epochs_in(epochs, seg.base_offset, end)
        small["leader-epoch-checkpoint"] = (
            f"0\n{len(spans)}\n" + "".join(f"{e} {o}\n" for e, o in spans)).encode()
        files = {"log": (seg.size, 0)}
        files.update({k: (len(v), crc32c.crc32c(v)) for k, v in small.items()})
        meta = RemoteLogSegmentMetadata(
            segment_id=RemoteLogSegmentMetadata.new_id(), base_offset=seg.base_offset,
            end_offset=end, max_timestamp=seg.largest_timestamp, size=seg.size,
            leader_epochs=spans, state=SegmentState.COPY_SEGMENT_STARTED, files=files,
            broker_id=node_id, event_ms=now)
        out.append((meta, seg.log_path, small))
    return out


def _epochs_in(entries: list[tuple[int, int]], base: int, end: int) -> list[tuple[int, int]]:
    """The leader epochs of [base, end]: the one in force at `base` (from `base`) and every
    later one that starts inside."""
    out: list[tuple[int, int]] = []
    for e, start in entries:
        if start <= base:
            out = [(e, base)]
        elif start <= end:
            out.append((e, start))
    return out
