"""Presigned URLs of a partition's remote segments: the answer the gateway hands out
(`GET /tiered/v1/topics/{topic}/partitions/{partition}/segments`, yak/gateway/rest_tiered.py)
and its reading back by Spark's driver (`tiered.presign`, yak/spark/tiered_plan.py).

Why presigned URLs: a Spark job that reads tiered segments straight from the bucket
otherwise needs the store's keys on every executor. With presigned URLs the broker, which
holds the keys, signs one GET URL per object the reader needs, for a bounded time; the job
holds no credential but the URLs, each good for one object only and only for reading.

What is signed: for each readable segment overlapping [from, to), its `.log` (the records)
and `.index` (the byte position of the first wanted offset); for that segment and every
later one that has a `.txnindex`, the `.txnindex` (read_committed: an aborted transaction's
marker may lie in a later segment, Kafka's collectAbortedTransactions). The later segments
are listed too (their entries, without `.log` URLs), so the reader sees where the remote
log ends, as from the manifest itself.

The answer is the manifest's own vocabulary (`RemoteLogSegmentMetadata.to_json`) plus a
`urls` map per segment, so the reader rebuilds a `Manifest` and plans exactly as the
credentialed direct read does (`tiered_plan.clip`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from yak.tiered.metadata import Manifest, ManifestStore, RemoteLogSegmentMetadata, partition_dir
from yak.tiered.store import RemoteStore

__all__ = ["DEFAULT_EXPIRES_S", "MAX_EXPIRES_S", "NOT_TIERED", "NO_STORE", "latest_manifests",
           "manifest_of", "presigned_segments"]

log = logging.getLogger(__name__)

DEFAULT_EXPIRES_S = 900
# The gateway's error codes (REST Proxy style: HTTP status + two digits) a reader branches on.
NOT_TIERED = 40910  # 409: the topic has remote.storage.enable=false (read it via brokers)
NO_STORE = 40911  # 409: the gateway has no store to sign with, or one that cannot presign
MAX_EXPIRES_S = 7 * 24 * 3600  # S3's limit for a SigV4 presigned URL
# The objects a reader of [from, to) needs from each segment in the range; `.txnindex`
# also from later segments.
RANGE_KINDS = ("log", "index", "txnindex")


async def latest_manifests(store: RemoteStore,
                           tps: list[tuple[str, int]]) -> dict[tuple[str, int], Manifest]:
    """The newest manifest of each partition that has a remote log in the bucket.

    A topic's objects are under `<topic>-<topic id>/`; the id is found by listing the
    bucket's top level (one request), so no Metadata v10+ topic ids are needed. A re-created
    topic whose old objects were never deleted leaves two such directories: the one with
    the most recent segment event wins, with a warning."""
    dirs = await store.list_dirs("")
    ids: dict[str, list[str]] = {}
    for topic in {t for t, _ in tps}:
        ids[topic] = [d[len(topic) + 1:] for d in dirs
                      if d.startswith(topic + "-") and _is_uuid(d[len(topic) + 1:])]
    ms = ManifestStore(store)

    async def one(tp: tuple[str, int]) -> Manifest | None:
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


async def presigned_segments(store: RemoteStore, m: Manifest, start: int, end: int | None,
                             expires_s: int) -> dict[str, Any]:
    """The gateway's answer for offsets [start, end) of `m`'s partition (`end` None: to
    the end of the remote log): the remote log's bounds, and each readable segment from
    the one holding `start` on, with presigned URLs of the objects a reader needs
    (module docstring). One signing call for all of them."""
    part_dir = partition_dir(m.topic, m.topic_id, m.partition)
    segs = [s for s in sorted(m.copied, key=lambda s: s.base_offset) if s.end_offset >= start]
    wanted: list[tuple[int, str, str]] = []  # (index in segs, kind, key)
    for i, s in enumerate(segs):
        in_range = end is None or s.base_offset < end
        for kind in RANGE_KINDS if in_range else ("txnindex",):
            if kind in s.files or kind == "log":
                wanted.append((i, kind, s.object_key(part_dir, kind)))
    now_ms = int(time.time() * 1000)
    urls = await store.presign([k for _, _, k in wanted], expires_s)
    per_seg: list[dict[str, str]] = [{} for _ in segs]
    for (i, kind, _), url in zip(wanted, urls, strict=True):
        per_seg[i][kind] = url
    return {
        "topic": m.topic, "partition": m.partition, "topic_id": m.topic_id,
        "version": m.version, "log_start_offset": m.log_start_offset,
        "start_offset": m.start_offset, "copied_upto": m.copied_upto,
        "expires_s": expires_s, "expires_at_ms": now_ms + expires_s * 1000,
        "segments": [{**s.to_json(), "urls": u} for s, u in zip(segs, per_seg, strict=True)],
    }


def manifest_of(answer: dict[str, Any]) -> tuple[Manifest, dict[str, str]]:
    """The gateway's answer read back: a `Manifest` holding the segments it lists (what a
    planner of [start, end) needs of the real one), and object key -> presigned URL.
    ValueError (one line) for an answer that is not one."""
    try:
        segs = tuple(RemoteLogSegmentMetadata.from_json(
            {k: v for k, v in d.items() if k != "urls"}) for d in answer["segments"])
        m = Manifest(topic=str(answer["topic"]), partition=int(answer["partition"]),
                     topic_id=str(answer["topic_id"]), version=int(answer["version"]),
                     log_start_offset=int(answer["log_start_offset"]), segments=segs)
        part_dir = partition_dir(m.topic, m.topic_id, m.partition)
        urls = {s.object_key(part_dir, kind): str(url)
                for s, d in zip(segs, answer["segments"], strict=True)
                for kind, url in dict(d.get("urls", {})).items()}
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"not a presigned segments answer: {type(e).__name__}: {e}") from None
    return m, urls


def _is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False
