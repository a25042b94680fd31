"""Checks on the replicas themselves, after a run has healed: are their logs the same?

A follower copies its leader's batches byte for byte (offsets, leader epochs, producer ids,
CRCs), and truncates whatever a former leader wrote that the current one does not have.
So once every replica is back in sync, the logs must be byte-identical up to the high
watermark, whatever the faults were; a difference is a replication bug even when no
client noticed. This reads each replica's segment files directly from its data
directory (the committed part below the high watermark is never rewritten while the
broker runs), concatenates its batches in offset order, and compares.

Also here: the offsets a full read returned must have no gaps (an idempotent producer's
batches take consecutive offsets; a hole means a batch vanished or offsets were assigned
twice).
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yak.protocol.records import iter_batches

__all__ = ["ReplicaComparison", "committed_bytes", "compare_replicas", "offset_gaps"]


def committed_bytes(data_dir: Path, topic: str, partition: int, upto: int,
                    since: int = 0) -> tuple[int, bytes]:
    """(first offset, the batches from `since` and below `upto` concatenated) of one
    replica, read from its segment files in base-offset order. A batch reaching `upto` or
    beyond is not committed and is left out (the high watermark is always at a batch
    boundary)."""
    d = Path(data_dir) / f"{topic}-{partition}"
    bases = sorted(int(n[:-4]) for n in os.listdir(d) if n.endswith(".log")
                   and n[:-4].isdigit())
    out = bytearray()
    first = -1
    for base in bases:
        data = (d / f"{base:020d}.log").read_bytes()
        for pos, h in iter_batches(data):
            if h.base_offset + h.last_offset_delta >= upto:
                return first, bytes(out)
            if h.base_offset < since:
                continue
            if first < 0:
                first = h.base_offset
            out += data[pos:pos + h.size]
    return first, bytes(out)


@dataclass
class ReplicaComparison:
    topic: str
    partition: int
    high_watermark: int
    digests: dict[int, tuple[int, int, str]]  # node -> (first offset, bytes, sha256)

    @property
    def identical(self) -> bool:
        return len(set(self.digests.values())) <= 1

    def describe(self) -> str:
        parts = ", ".join(f"broker {n}: from {f}, {size} bytes, {digest[:12]}"
                          for n, (f, size, digest) in sorted(self.digests.items()))
        state = "identical" if self.identical else "DIFFER"
        return f"{self.topic}-{self.partition} below {self.high_watermark}: {state} ({parts})"


def compare_replicas(data_dirs: Mapping[int, Path], topic: str, partition: int,
                     high_watermark: int, common_start: bool = False) -> ReplicaComparison:
    """Compare the committed bytes of one partition on each broker in `data_dirs`.

    `common_start` (tiered topics): compare from the highest local log start among the
    replicas. Each replica deletes its uploaded segments by local retention on its own
    schedule, so their local logs start at different offsets; below the highest start
    the data lives in the object store, which the final reads read back."""
    since = 0
    if common_start:
        since = max((committed_bytes(d, topic, partition, high_watermark)[0]
                     for d in data_dirs.values()), default=0)
    digests = {}
    for node, d in data_dirs.items():
        first, data = committed_bytes(d, topic, partition, high_watermark, since)
        digests[node] = (first, len(data), hashlib.sha256(data).hexdigest())
    return ReplicaComparison(topic, partition, high_watermark, digests)


def offset_gaps(history: Iterable[Mapping[str, Any]], process: str = "final"
                ) -> dict[Any, list[int]]:
    """Per partition, the offsets missing between 0 and the last one `process` read
    (empty dict: no gaps). Records may be dicts or compact [partition, offset, value]."""
    seen: dict[Any, set[int]] = defaultdict(set)
    for op in history:
        if op.get("op") != "poll" or op.get("process") != process:
            continue
        for r in op.get("records", ()):
            if isinstance(r, Mapping):
                seen[r["partition"]].add(int(r["offset"]))
            else:
                seen[r[0]].add(int(r[1]))
    gaps = {}
    for partition, offsets in seen.items():
        missing = sorted(set(range(max(offsets) + 1)) - offsets)
        if missing:
            gaps[partition] = missing
    return gaps
