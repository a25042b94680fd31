"""Driver side of `tiered.direct=true`: which offsets are read from the bucket, which from
the brokers.

The manifest in the bucket is the source of truth for the remote log (docs/tiered.md): for
each partition the planner reads its newest version (no broker involved), walks the
requested [start, end) through the readable segments (the newest upload wins where two
overlap, as `Manifest.find` decides for the brokers' reads) and makes one `RemoteSplit` per
segment, clipped to the range. What is newer than the last uploaded segment stays an
`OffsetRange` read through the brokers as before (one split per partition for the tail),
as does anything below the remote log's start (the brokers then apply failOnDataLoss to
it, as for any removed offsets).

A topic's objects are under `<topic>-<topic id>/`; the planner finds the id by listing the
bucket's top level (one request), so it needs no Metadata v10+ topic ids from the client.
A re-created topic whose old objects were never deleted leaves two such directories: the
one with the most recent segment event wins, with a warning.

Under read_committed, a transaction whose data lies in a remote segment may have its ABORT
marker in a local segment not uploaded yet (uploads stop at the LSO, not at markers). The
brokers know those from their local `.txnindex`: one read_committed Fetch per partition at
the first offset after the remote log, of one batch, returns them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable

from yak.client import KafkaClient
from yak.errors import error_for_code
from yak.spark.offsets import TP, OffsetRange
from yak.spark.options import SourceOptions
from yak.spark.tiered_read import Bridge, RemoteSplit
from yak.tiered.metadata import Manifest, ManifestStore, partition_dir
from yak.tiered.store import RemoteStore

log = logging.getLogger(__name__)


def plan(client: KafkaClient, opts: SourceOptions,
         ranges: Iterable[OffsetRange]) -> list[OffsetRange | RemoteSplit]:
    """The ranges as remote splits (from the bucket) and broker ranges (the rest)."""
    assert opts.tiered is not None
    ranges = [r for r in ranges if r.size > 0]
    with Bridge() as bridge:
        manifests = bridge.run(_manifests(opts.tiered.store(),
                                          sorted({(r.topic, r.partition) for r in ranges})))
    if ranges and not manifests:
        log.warning("tiered.direct: no remote log of %s under %s; reading through the brokers",
                    ", ".join(sorted({r.topic for r in ranges})), opts.tiered.uri)
    out: list[OffsetRange | RemoteSplit] = []
    for r in ranges:
        m = manifests.get((r.topic, r.partition))
        if m is None:
            out.append(r)
            continue
        remote, rest = clip(m, r)
        if remote and opts.client.isolation_level == 1:
            tail = tail_aborted(client, (r.topic, r.partition), m.copied_upto)
            remote = [_with(s, m, tail) for s in remote]
        out += remote
        out += rest
    return out


def group(splits: list[RemoteSplit], min_partitions: int | None) -> list[tuple[RemoteSplit, ...]]:
    """Consecutive splits of one topic-partition per task: one task per topic-partition,
    as Spark's Kafka source plans (a task per segment cost Spark 1-2 CPU-seconds more for
    the same rows in benchmarks/spark_tiered_bench.py: docs/benchmarks/tiered.md), or more
    with `minPartitions`, each topic-partition's segments cut into runs in proportion to
    its share of the offsets."""
    by_tp: dict[TP, list[RemoteSplit]] = {}
    for s in splits:
        by_tp.setdefault((s.topic, s.partition), []).append(s)
    total = sum(s.size for s in splits)
    out: list[tuple[RemoteSplit, ...]] = []
    for run in by_tp.values():
        size = sum(s.size for s in run)
        want = 1
        if min_partitions and len(by_tp) < min_partitions and total:
            want = max(1, min(len(run), round(size / total * min_partitions)))
        bounds = [size * (i + 1) / want for i in range(want)]
        cur: list[RemoteSplit] = []
        done = k = 0
        for s in run:
            cur.append(s)
            done += s.size
            if done >= bounds[k]:
                out.append(tuple(cur))
                cur = []
                k = min(k + 1, want - 1)
        if cur:
            out.append(tuple(cur))
    return out


def clip(m: Manifest, r: OffsetRange) -> tuple[list[RemoteSplit], list[OffsetRange]]:
    """[r.start, r.end) as splits of `m`'s segments and the ranges left to the brokers."""
    part_dir = partition_dir(m.topic, m.topic_id, m.partition)
    segs = sorted(m.copied, key=lambda s: s.base_offset)
    rest: list[OffsetRange] = []
    remote: list[RemoteSplit] = []
    cur = r.start
    first = m.start_offset
    if first is None:
        return [], [r]
    if cur < first:  # below the remote log: the brokers say what is gone (failOnDataLoss)
        rest.append(OffsetRange(r.topic, r.partition, cur, min(r.end, first)))
        cur = min(r.end, first)
    while cur < r.end:
        seg = m.find(cur)
        if seg is None:
            break
        hi = min(r.end, seg.end_offset + 1)
        later = [s.base_offset for s in segs if cur < s.base_offset < hi]
        if later:
            hi = min(later)  # a newer upload overlaps from there on: it is read instead
        remote.append(RemoteSplit(r.topic, r.partition, cur, hi, part_dir, seg))
        cur = hi
    if cur < r.end:
        rest.append(OffsetRange(r.topic, r.partition, cur, r.end))
    return remote, rest


def _with(s: RemoteSplit, m: Manifest, tail: tuple[tuple[int, int], ...]) -> RemoteSplit:
    txn = tuple(x for x in sorted(m.copied, key=lambda x: x.base_offset)
                if x.end_offset >= s.start and "txnindex" in x.files)
    return RemoteSplit(s.topic, s.partition, s.start, s.end, s.part_dir, s.segment, txn, tail)


def tail_aborted(client: KafkaClient, tp: TP, offset: int) -> tuple[tuple[int, int], ...]:
    """Aborted transactions open at `offset` (their marker at or after it), from the
    partition's leader: a read_committed Fetch of one batch at `offset`."""
    resp = client.fetch({tp: offset}, max_wait_ms=0, max_bytes=1, partition_max_bytes=1,
                        isolation_level=1)[tp]
    if resp.error != 0:
        raise error_for_code(resp.error, f"fetch {tp[0]}-{tp[1]}@{offset} for the aborted"
                             " transactions past the remote log")
    return tuple(a for a in resp.aborted if a[1] < offset)


async def _manifests(store: RemoteStore, tps: list[TP]) -> dict[TP, Manifest]:
    """The newest manifest of each partition that has a remote log in the bucket."""
    dirs = await store.list_dirs("")
    ids: dict[str, list[str]] = {}
    for topic in {t for t, _ in tps}:
        ids[topic] = [d[len(topic) + 1:] for d in dirs
                      if d.startswith(topic + "-") and _is_uuid(d[len(topic) + 1:])]
    ms = ManifestStore(store)

    async def one(tp: TP) -> Manifest | None:
        found = [await ms.load(tp[0], tid, tp[1]) for tid in ids.get(tp[0], [])]
        found = [m for m in found if m.start_offset is not None]
        if not found:
            return None
        if len(found) > 1:
            best = max(found, key=lambda m: max(s.event_ms for s in m.segments))
            log.warning("%s-%d: remote logs of %d topic ids in the bucket (%s); reading %s,"
                        " the most recently written", tp[0], tp[1], len(found),
                        ", ".join(m.topic_id for m in found), best.topic_id)
            return best
        return found[0]

    loaded = await asyncio.gather(*(one(tp) for tp in tps))
    return {tp: m for tp, m in zip(tps, loaded, strict=True) if m is not None}


def _is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False
