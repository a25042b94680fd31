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
bucket's top level (one request, `yak.tiered.presign.latest_manifests`), so it needs no
Metadata v10+ topic ids from the client. A re-created topic whose old objects were never
deleted leaves two such directories: the one with the most recent segment event wins, with
a warning.

`tiered.presign=true`: the job holds no store keys. The planner asks the brokers' gateway
(`GET /tiered/v1/topics/{topic}/partitions/{partition}/segments`, one request per
partition, as the user of `tiered.gateway.username`) for the partition's segments from the
range's start on and presigned URLs of their objects; the answer is read back as a
manifest of those segments (`manifest_of`), so the splits are the same as with keys, and
each split carries the URLs of the objects it reads. A refusal (the user may not READ the
topic) fails the query with the gateway's line; URLs expire `tiered.presign.expires` after
planning.

Under read_committed, a transaction whose data lies in a remote segment may have its ABORT
marker in a local segment not uploaded yet (uploads stop at the LSO, not at markers). The
brokers know those from their local `.txnindex`: one read_committed Fetch per partition at
the first offset after the remote log, of one batch, returns them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import httpx

from yak.client import KafkaClient
from yak.errors import error_for_code
from yak.spark.offsets import TP, OffsetRange
from yak.spark.options import SourceOptions, TieredSettings
from yak.spark.tiered_read import Bridge, RemoteSplit
from yak.tiered.metadata import Manifest, partition_dir
from yak.tiered.presign import NOT_TIERED, latest_manifests, manifest_of

log = logging.getLogger(__name__)

NETWORK_EXCEPTION, KAFKA_STORAGE_ERROR = 13, 56
# The gateway's refusals as Kafka's errors: not logged in, not allowed, no such partition.
_GATEWAY_REFUSALS = {401: 58, 403: 29, 404: 3}
GATEWAY_CONCURRENCY = 8


def plan(client: KafkaClient, opts: SourceOptions,
         ranges: Iterable[OffsetRange]) -> list[OffsetRange | RemoteSplit]:
    """The ranges as remote splits (from the bucket) and broker ranges (the rest)."""
    assert opts.tiered is not None
    ranges = [r for r in ranges if r.size > 0]
    urls: dict[str, str] = {}
    if opts.tiered.presign:
        manifests, urls = from_gateway(opts.tiered, ranges)
    else:
        with Bridge() as bridge:
            manifests = bridge.run(latest_manifests(
                opts.tiered.store(), sorted({(r.topic, r.partition) for r in ranges})))
    if ranges and not manifests:
        log.warning("tiered.direct: no remote log of %s under %s; reading through the brokers",
                    ", ".join(sorted({r.topic for r in ranges})),
                    opts.tiered.gateway_url if opts.tiered.presign else opts.tiered.uri)
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
        if urls:
            remote = [replace(s, urls=_urls_of(s, urls)) for s in remote]
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


def from_gateway(t: TieredSettings, ranges: list[OffsetRange]
                 ) -> tuple[dict[TP, Manifest], dict[str, str]]:
    """`tiered.presign`: each partition's remote segments and their presigned URLs, asked
    of the brokers' gateway (yak/gateway/rest_tiered.py) for the partition's offsets; the
    answers as manifests (of the segments they list) and object key -> URL. A topic not
    tiered is left to the brokers (a warning); a refusal fails the query with the
    gateway's line (403: the user may not READ the topic)."""
    spans: dict[TP, tuple[int, int]] = {}
    for r in ranges:
        lo, hi = spans.get((r.topic, r.partition), (r.start, r.end))
        spans[(r.topic, r.partition)] = (min(lo, r.start), max(hi, r.end))
    auth = (t.gateway_username, t.gateway_password or "") if t.gateway_username else None
    manifests: dict[TP, Manifest] = {}
    urls: dict[str, str] = {}
    with httpx.Client(timeout=30.0, auth=auth) as http:
        def ask(tp: TP) -> tuple[httpx.Response, Any]:
            (topic, p), (lo, hi) = tp, spans[tp]
            url = (f"{t.gateway_url}/tiered/v1/topics/{quote(topic, safe='')}/partitions/{p}"
                   "/segments")
            try:
                resp = http.get(url, params={"from": lo, "to": hi,
                                             "expires": t.presign_expires_s})
                body = resp.json()
                return resp, body if isinstance(body, dict) else {}
            except (httpx.HTTPError, ValueError) as e:
                raise error_for_code(NETWORK_EXCEPTION, f"tiered.presign: no answer from the"
                                     f" gateway {t.gateway_url} for {topic}-{p}:"
                                     f" {type(e).__name__}: {e}") from None

        # A few partitions asked at once: each answer costs the gateway a few Kafka and
        # store requests (~0.1-0.3 s here), and a topic may have hundreds of partitions.
        tps = sorted(spans)
        with ThreadPoolExecutor(min(GATEWAY_CONCURRENCY, len(tps) or 1)) as pool:
            answers = list(pool.map(ask, tps))
        for (topic, p), (resp, body) in zip(tps, answers, strict=True):
            if resp.status_code == 409 and body.get("error_code") == NOT_TIERED:
                log.warning("tiered.presign: %s; reading %s-%d through the brokers",
                            body.get("message"), topic, p)
                continue
            if resp.status_code != 200:
                code = _GATEWAY_REFUSALS.get(resp.status_code, KAFKA_STORAGE_ERROR)
                raise error_for_code(code, f"tiered.presign: the gateway {t.gateway_url}"
                                     f" refused {topic}-{p} ({resp.status_code}):"
                                     f" {body.get('message', resp.text[:200])}")
            try:
                m, found = manifest_of(body)
            except ValueError as e:
                raise error_for_code(KAFKA_STORAGE_ERROR, f"tiered.presign: {topic}-{p}"
                                     f" from {t.gateway_url}: {e}") from None
            if m.start_offset is not None:
                manifests[(topic, p)] = m
                urls.update(found)
    return manifests, urls


def _urls_of(s: RemoteSplit, urls: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """(key, URL) of the objects a split reads: its segment's `.log` and `.index`, and the
    `.txnindex` of its transaction segments (read_committed)."""
    keys = [s.segment.object_key(s.part_dir, "log"), s.segment.object_key(s.part_dir, "index")]
    keys += [x.object_key(s.part_dir, "txnindex") for x in s.txn_segments]
    return tuple((k, urls[k]) for k in keys if k in urls)
