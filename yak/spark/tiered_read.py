"""Executor side of `tiered.direct=true`: remote segments' offsets, read straight from the
bucket, as Arrow batches of Spark's Kafka schema.

Why this shape: the brokers stay idle while a backfill reads months of tiered data, and the
bytes cross one hop (bucket -> executor) instead of two. The segment's uploaded `.index`
gives the byte position of the first wanted offset; the `.log` object is then read in
large ranged GETs (`RANGE_BYTES`), the next one already in flight while the current one is
decoded, and handed to the same decoder the fetch path uses (`record_decoder.decode`), so
both ways give identical rows. Every batch has its CRC32C checked and its offsets checked
against the manifest's segment before it is decoded: the bucket is not trusted more than a
broker would trust it (`yak/tiered/reader.py` does the same for Fetch).

read_committed: the aborted transactions come from the uploaded `.txnindex` objects of
this segment and the later remote ones (Kafka's collectAbortedTransactions), plus the ones
whose ABORT marker is past the remote log, which the planner asked the brokers for once
(`RemoteSplit.tail_aborted`). The decoder then drops those producers' batches by their
headers, as Kafka's consumer does.

A segment object that is gone (remote retention or topic deletion after planning) follows
`failOnDataLoss`: a `DataLossError` naming the segment and offsets, or a warning and the
rest of the split skipped.

`tiered.presign`: the objects are read through the URLs the driver planned with. A URL the
store refuses (expired: a long job, or a streaming batch planned long before it ran) is
re-asked once (`GatewayReask`): the same gateway route the driver used, narrowed to the
segment's offsets, with the job's gateway URL and user from the options; the executor
still holds no store key. A segment missing from the fresh answer was deleted after
planning and follows `failOnDataLoss` as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import pyarrow as pa

from yak.errors import CorruptRecordError
from yak.protocol.records import HEADER_SIZE, crc_is_valid, parse_header, read_header
from yak.spark.fetcher import arrow_schema, to_record_batch
from yak.spark.offsets import DataLossError
from yak.spark.options import TieredSettings
from yak.spark.record_decoder import decode
from yak.tiered.metadata import RemoteLogSegmentMetadata, partition_dir
from yak.tiered.presign import manifest_of
from yak.tiered.presign_http import PresignedObjects
from yak.tiered.reader import ChunkCache, RemoteCorruptionError, RemoteSegmentReader
from yak.tiered.store import ObjectNotFoundError, RemoteStorageError

log = logging.getLogger(__name__)

T = TypeVar("T")

# One ranged GET: large enough that the store's per-request latency (~10 ms on a loaded
# SeaweedFS, tens of ms on S3) is small next to the transfer, small enough that two in
# memory (the one decoded, the one in flight) stay modest per task.
RANGE_BYTES = 8 << 20


@dataclass(frozen=True)
class RemoteSplit:
    """Offsets [start, end) of one partition, all inside `segment` (a remote segment of the
    manifest the planner read), whose objects are under `part_dir` in the bucket.
    `txn_segments`: this segment and the later remote ones that have a `.txnindex`;
    `tail_aborted`: (producer id, first offset) of aborted transactions whose marker is
    past the remote log (read_committed only); `urls`: (object key, presigned URL) of the
    objects this split reads, under `tiered.presign` (else empty: the store is read with
    the job's credentials)."""

    topic: str
    partition: int
    start: int
    end: int
    part_dir: str
    segment: RemoteLogSegmentMetadata
    txn_segments: tuple[RemoteLogSegmentMetadata, ...] = ()
    tail_aborted: tuple[tuple[int, int], ...] = field(default=())
    urls: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def size(self) -> int:
        return self.end - self.start


class Bridge:
    """An event loop in a thread, so blocking Spark code can drive `RemoteStore`'s
    coroutines and keep one in flight (the next range) while it decodes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="yak-tiered-read",
                                        daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.submit(coro).result()

    def close(self) -> None:
        """Cancel what is still in flight (a range read ahead of a split that ended), then
        stop the loop."""
        async def cancel_all() -> None:
            me = asyncio.current_task()
            rest = [t for t in asyncio.all_tasks() if t is not me]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.submit(cancel_all()).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():  # else a daemon thread left to the process's end
            self.loop.close()

    def __enter__(self) -> Bridge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_splits(
    settings: TieredSettings,
    splits: tuple[RemoteSplit, ...],
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    read_committed: bool,
    value_decoder: Any = None,
) -> Iterator[pa.RecordBatch]:
    """Records of each split in turn (offsets [start, end)), in order, as Arrow batches:
    one store client and one loop thread for the task."""
    schema = arrow_schema(include_headers, value_decoder.target if value_decoder else None)
    with Bridge() as bridge:
        store: Any = (PresignedObjects({k: u for s in splits for k, u in s.urls},
                                       reask=GatewayReask(settings, splits))
                      if settings.presign else settings.store())
        try:
            yield from _read_splits(bridge, store, splits, schema, fail_on_data_loss,
                                    read_committed, value_decoder)
        finally:
            if settings.presign:  # its connections (reads still in flight fail, then
                with contextlib.suppress(Exception):  # Bridge.close cancels them)
                    bridge.submit(store.aclose()).result(10)


class GatewayReask:
    """Fresh presigned URLs of the segment that holds an object key, asked of the gateway
    the driver planned with (`GET /tiered/v1/topics/{t}/partitions/{p}/segments`, from the
    segment's base offset to its end, `tiered.presign.expires`, the job's gateway user):
    every URL of the answer (the segment's `.log`, `.index`, `.txnindex` and later
    segments' `.txnindex`), so one re-ask renews all the reads in flight on it.

    The segment is found by id in the answer. Absent (remote retention or topic deletion
    since planning), no URL is returned for the key and `PresignedObjects` raises
    `ObjectNotFoundError`; a 404 for the partition raises it here. The reader treats it as
    any object gone from the bucket (failOnDataLoss). Any other failure (the gateway
    unreachable or refusing) is a `RemoteStorageError` of one line."""

    def __init__(self, settings: TieredSettings, splits: tuple[RemoteSplit, ...]) -> None:
        self.settings = settings
        # object key -> (topic, partition, the split's partition directory, its segment)
        self.owner: dict[str, tuple[str, int, str, RemoteLogSegmentMetadata]] = {}
        for s in splits:
            for seg in (s.segment, *s.txn_segments):
                for kind in ("log", "index", "txnindex"):
                    self.owner[seg.object_key(s.part_dir, kind)] = (
                        s.topic, s.partition, s.part_dir, seg)

    async def __call__(self, key: str) -> dict[str, str]:
        t = self.settings
        if key not in self.owner:
            raise RemoteStorageError(f"{key} is not an object of this task's segments")
        topic, p, part_dir, seg = self.owner[key]
        url = f"{t.gateway_url}/tiered/v1/topics/{quote(topic, safe='')}/partitions/{p}/segments"
        auth = (t.gateway_username, t.gateway_password or "") if t.gateway_username else None
        try:
            async with httpx.AsyncClient(timeout=30.0, auth=auth) as http:
                r = await http.get(url, params={"from": seg.base_offset,
                                                "to": seg.end_offset + 1,
                                                "expires": t.presign_expires_s})
        except httpx.HTTPError as e:
            raise RemoteStorageError(f"no answer from the gateway {t.gateway_url} for"
                                     f" {topic}-{p}: {type(e).__name__}: {e}") from None
        try:
            body = r.json()
        except ValueError:
            body = {}  # not the gateway's JSON (a proxy's page): its status says enough
        body = body if isinstance(body, dict) else {}
        if r.status_code == 404:
            raise ObjectNotFoundError(f"{key}: the gateway {t.gateway_url} no longer knows"
                                      f" {topic}-{p} (404: {body.get('message')})")
        if r.status_code != 200:
            raise RemoteStorageError(f"the gateway {t.gateway_url} refused {topic}-{p}"
                                     f" ({r.status_code}: {body.get('message', r.text[:200])})")
        try:
            m, urls = manifest_of(body)
        except ValueError as e:
            raise RemoteStorageError(f"{topic}-{p} from {t.gateway_url}: {e}") from None
        if not any(s.segment_id == seg.segment_id for s in m.copied):
            return {}
        if partition_dir(m.topic, m.topic_id, m.partition) != part_dir:
            return {}  # the topic was re-created under a new id: the old objects are gone
        return urls


def _read_splits(bridge: Bridge, store: Any, splits: tuple[RemoteSplit, ...],
                 schema: pa.Schema, fail_on_data_loss: bool, read_committed: bool,
                 value_decoder: Any) -> Iterator[pa.RecordBatch]:
    """`read_splits` over one store: a `RemoteStore`, or `PresignedObjects` (the same
    read calls over presigned URLs, yak/tiered/presign_http.py)."""
    reader = RemoteSegmentReader(store, ChunkCache(4 << 20))

    async def first_range(split: RemoteSplit) -> tuple[int, bytes]:
        """The split's byte position (from the `.index`) and its first range."""
        seg = split.segment
        pos = await reader.position_for(seg, split.part_dir, split.start)
        key = seg.object_key(split.part_dir, "log")
        return pos, await store.get_range(key, pos, min(pos + RANGE_BYTES, seg.size))

    nxt = bridge.submit(first_range(splits[0])) if splits else None
    for i, split in enumerate(splits):
        assert nxt is not None
        first, nxt = nxt, None
        if i + 1 < len(splits):  # the next segment's index and first range meanwhile
            nxt = bridge.submit(first_range(splits[i + 1]))
        # (a task stopped early leaves reads in flight: Bridge.close cancels them)
        yield from _read_one(bridge, store, reader, split, first, schema,
                             fail_on_data_loss, read_committed, value_decoder)


def _read_one(bridge: Bridge, store: Any, reader: RemoteSegmentReader,
              split: RemoteSplit, first: Future[tuple[int, bytes]], schema: pa.Schema,
              fail_on_data_loss: bool, read_committed: bool,
              value_decoder: Any) -> Iterator[pa.RecordBatch]:
    include_headers = "headers" in schema.names
    offset = split.start
    pending: Future[bytes] | None = None
    try:
        seg = split.segment
        pos, head = first.result()
        aborted: list[tuple[int, int, int]] = []  # (producer id, first, last offset)
        if read_committed:
            txns, _ = bridge.run(reader.aborted(list(split.txn_segments), split.part_dir,
                                                split.start, split.end))
            aborted = [(t.producer_id, t.first_offset, t.last_offset) for t in txns]
            aborted += [(pid, first, 1 << 62) for pid, first in split.tail_aborted]
        key = seg.object_key(split.part_dir, "log")

        def get(lo: int) -> Future[bytes]:
            return bridge.submit(store.get_range(key, lo, min(lo + RANGE_BYTES, seg.size)))

        carry = b""
        data: bytes | None = head
        while True:
            if data is None:
                assert pending is not None
                data = pending.result()
                pending = None
            read_to = pos + len(carry) + len(data)
            want = min(pos + len(carry) + RANGE_BYTES, seg.size)
            if len(data) != want - pos - len(carry):
                raise RemoteCorruptionError(f"{key}: short read at {pos + len(carry)}"
                                            f" ({len(data)} of {want - pos - len(carry)} bytes)")
            at_end = read_to >= seg.size
            buf = carry + data if carry else data
            usable, done = _complete_batches(buf, key, pos, seg, split.end)
            if not (done or at_end):
                pending = get(read_to)  # in flight while this range is decoded
            if usable:
                base = read_header(buf, 0).base_offset
                cols = decode(memoryview(buf)[:usable], offset, split.end,
                              include_headers=include_headers,
                              aborted=[(p, f) for p, f, last in aborted if last >= base]
                              if read_committed else None)
                offset = max(offset, cols.next_offset)
                if len(cols):
                    yield to_record_batch(cols, split.topic, split.partition, schema,
                                          value_decoder)
            if done or offset >= split.end:
                return
            if at_end:
                if usable < len(buf):
                    raise RemoteCorruptionError(
                        f"{key}: ends inside a batch at {pos + usable} ({seg.size} bytes)")
                return  # the segment ends before `end` (offsets taken by markers)
            carry = bytes(memoryview(buf)[usable:])
            pos += usable
            data = None
    except ObjectNotFoundError as e:
        msg = (f"{split.topic}-{split.partition}: remote segment {split.segment.segment_id}"
               f" (offsets {split.segment.base_offset}..{split.segment.end_offset}) is gone"
               f" from the bucket ({e}); offsets {offset}..{split.end - 1} cannot be read"
               " (remote retention or topic deletion after the query was planned)")
        if fail_on_data_loss:
            raise DataLossError(msg + "; set failOnDataLoss=false to skip them") from e
        log.warning("%s: skipped", msg)
    finally:
        if pending is not None:
            pending.cancel()


def _complete_batches(buf: bytes, key: str, pos: int, seg: RemoteLogSegmentMetadata,
                      end: int) -> tuple[int, bool]:
    """(bytes of the whole batches at the front of `buf` that are below `end`, whether a
    batch at or past `end` was reached). Checks each batch's CRC32C and that its offsets
    lie in the segment: a header walk, per batch, never per record."""
    p = 0
    n = len(buf)
    while p + HEADER_SIZE <= n:
        try:
            h = parse_header(buf, p)
        except CorruptRecordError as e:
            raise RemoteCorruptionError(f"{key} at {pos + p}: {e}") from e
        if h.base_offset >= end:
            return p, True
        if p + h.size > n:
            break
        if h.base_offset < seg.base_offset or h.last_offset > seg.end_offset:
            raise RemoteCorruptionError(
                f"{key} at {pos + p}: batch {h.base_offset}..{h.last_offset} outside the"
                f" segment's {seg.base_offset}..{seg.end_offset}")
        if not crc_is_valid(buf, p, h):
            raise RemoteCorruptionError(f"{key} at {pos + p}: batch {h.base_offset} fails its"
                                        " CRC32C")
        p += h.size
    return p, False
