"""Reads of the remote log (Kafka's RemoteLogReader / RemoteLogManager.read): whole batches
from a remote segment, found through its uploaded offset index, fetched in ranged reads of
fixed-size chunks kept in a bounded LRU cache (memory), so a consumer reading a tiered
partition from the start costs one store request per chunk, not per Fetch.

Nothing wrong is ever served: every batch returned has its CRC32C checked (the remote log
is read rarely and from a store we do not control, so the per-batch check is worth it
here, unlike local reads), offsets must stay inside the segment the manifest names, and
the index and transaction index objects are checked against the CRC32C recorded in the
manifest. A failure is `RemoteCorruptionError`, never data.
"""

from __future__ import annotations

import asyncio
import struct
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass, field

import crc32c

from yak.errors import CorruptRecordError
from yak.protocol.records import HEADER_SIZE, crc_is_valid, decode_records, parse_header
from yak.storage.txn_index import ENTRY as TXN_ENTRY
from yak.storage.txn_index import AbortedTxn
from yak.tiered.metadata import RemoteLogSegmentMetadata
from yak.tiered.store import RemoteStorageError, RemoteStore

__all__ = ["ChunkCache", "RemoteCorruptionError", "RemoteRead", "RemoteSegmentReader"]

CHUNK_SIZE = 1 << 20
SCAN_SLACK = 64 * 1024  # read past max_bytes: the index entry may sit before the offset
_OFF_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class RemoteCorruptionError(RemoteStorageError):
    """A remote object does not match its manifest entry or fails its CRC."""


@dataclass
class RemoteRead:
    buffers: list[memoryview] = field(default_factory=list)
    size: int = 0
    next_offset: int = -1


class ChunkCache:
    """LRU of remote bytes by (object key, chunk number), bounded in bytes; concurrent
    misses of one chunk share one request."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self._data: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0
        self._inflight: dict[tuple[str, int], asyncio.Future[bytes]] = {}
        self._prefetches: set[asyncio.Task[bytes]] = set()
        self.hits = 0
        self.misses = 0

    async def get(self, key: tuple[str, int], load) -> bytes:  # type: ignore[no-untyped-def]
        data = self._data.get(key)
        if data is not None:
            self._data.move_to_end(key)
            self.hits += 1
            return data
        fut = self._inflight.get(key)
        if fut is not None:
            return await asyncio.shield(fut)
        self.misses += 1
        fut = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            data = await load()
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: waiters re-raise it, nobody else needs to
            raise
        finally:
            self._inflight.pop(key, None)
        fut.set_result(data)
        self._put(key, data)
        return data

    def prefetch(self, key: tuple[str, int], load) -> None:  # type: ignore[no-untyped-def]
        """Start loading `key` in the background unless it is cached or on its way (a
        sequential reader's next chunk: the store's latency overlaps the consumer's)."""
        if key in self._data or key in self._inflight or len(self._prefetches) >= 4:
            return
        task = asyncio.get_running_loop().create_task(self.get(key, load))
        self._prefetches.add(task)
        task.add_done_callback(self._prefetch_done)

    def cancel_prefetches(self) -> None:
        for task in list(self._prefetches):
            task.cancel()

    def _prefetch_done(self, task: asyncio.Task[bytes]) -> None:
        self._prefetches.discard(task)
        if not task.cancelled():
            task.exception()  # a failed prefetch is retried by the read that needs it

    def _put(self, key: tuple[str, int], data: bytes) -> None:
        if len(data) > self.capacity:
            return
        self._data[key] = data
        self._bytes += len(data)
        while self._bytes > self.capacity:
            _, old = self._data.popitem(last=False)
            self._bytes -= len(old)

    def drop_prefix(self, key_prefix: str) -> None:
        for k in [k for k in self._data if k[0].startswith(key_prefix)]:
            self._bytes -= len(self._data.pop(k))

    @property
    def size(self) -> int:
        return self._bytes


class RemoteSegmentReader:
    def __init__(self, store: RemoteStore, cache: ChunkCache) -> None:
        self.store = store
        self.cache = cache
        self.bytes_fetched = 0

    async def _whole(self, seg: RemoteLogSegmentMetadata, part_dir: str, kind: str) -> bytes:
        """A small object (index, txnindex), checked against the manifest's size and CRC."""
        size, crc = seg.files[kind]
        key = seg.object_key(part_dir, kind)

        async def load() -> bytes:
            data = await self.store.get(key) if size else b""
            self.bytes_fetched += len(data)
            if len(data) != size or crc32c.crc32c(data) != crc:
                raise RemoteCorruptionError(
                    f"{key}: {len(data)} bytes with CRC32C {crc32c.crc32c(data)}, the manifest"
                    f" says {size} bytes with CRC32C {crc}")
            return data
        return await self.cache.get((key, -1), load)

    async def small_object(self, seg: RemoteLogSegmentMetadata, part_dir: str,
                           kind: str) -> bytes:
        """A segment's small uploaded file (producer snapshot, leader-epoch checkpoint),
        checked against the manifest's size and CRC32C (a follower rebuilding its state,
        `yak.tiered.aux_state`)."""
        return await self._whole(seg, part_dir, kind)

    async def _range(self, key: str, obj_size: int, start: int, end: int) -> bytes:
        """Bytes [start, end) of a `.log` object, through the chunk cache."""
        end = min(end, obj_size)
        if start >= end:
            return b""
        parts = []
        last = (end - 1) // CHUNK_SIZE
        for c in range(start // CHUNK_SIZE, last + 1):
            lo = c * CHUNK_SIZE
            chunk = await self.cache.get((key, c), self._loader(key, obj_size, c))
            parts.append(chunk[max(start - lo, 0): end - lo])
        if (last + 1) * CHUNK_SIZE < obj_size:
            self.cache.prefetch((key, last + 1), self._loader(key, obj_size, last + 1))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _loader(self, key: str, obj_size: int, c: int):  # type: ignore[no-untyped-def]
        lo = c * CHUNK_SIZE
        hi = min(lo + CHUNK_SIZE, obj_size)

        async def load() -> bytes:
            data = await self.store.get_range(key, lo, hi)
            self.bytes_fetched += len(data)
            if len(data) != hi - lo:
                raise RemoteCorruptionError(
                    f"{key}: short read at {lo} ({len(data)} of {hi - lo} bytes)")
            return data
        return load

    async def position_for(self, seg: RemoteLogSegmentMetadata, part_dir: str,
                           offset: int) -> int:
        """The byte position of the last indexed batch at or before `offset`."""
        idx = await self._whole(seg, part_dir, "index")
        n = len(idx) // 8
        rels = [_OFF_ENTRY.unpack_from(idx, i * 8)[0] for i in range(n)]
        i = bisect_right(rels, offset - seg.base_offset) - 1
        return 0 if i < 0 else _OFF_ENTRY.unpack_from(idx, i * 8)[1]

    async def read(self, seg: RemoteLogSegmentMetadata, part_dir: str, offset: int,
                   max_bytes: int, upper: int, min_one: bool) -> RemoteRead:
        """Whole batches of `seg` from the one holding `offset`, below `upper`, at most
        `max_bytes` unless `min_one` and the first batch alone is larger."""
        key = seg.object_key(part_dir, "log")
        pos = await self.position_for(seg, part_dir, offset)
        end = pos + max(max_bytes, 0) + SCAN_SLACK
        buf = await self._range(key, seg.size, pos, end)
        out = RemoteRead()
        p = 0
        while True:
            avail = len(buf) - p
            h = None
            if avail >= HEADER_SIZE:
                try:
                    h = parse_header(buf, p)
                except CorruptRecordError as e:
                    raise RemoteCorruptionError(f"{key} at {pos + p}: {e}") from e
            if h is None or avail < h.size:
                # The next batch is not wholly here: read on if it may still be returned.
                if pos + len(buf) >= seg.size:
                    if avail:
                        raise RemoteCorruptionError(
                            f"{key}: ends inside a batch at {pos + p} ({seg.size} bytes)")
                    break
                if out.buffers and (h is None or out.size + h.size > max_bytes):
                    break
                need = HEADER_SIZE if h is None else h.size - avail
                more = max(CHUNK_SIZE, need)
                buf = buf + await self._range(key, seg.size, pos + len(buf),
                                              pos + len(buf) + more)
                continue
            if h.base_offset < seg.base_offset or h.last_offset > seg.end_offset:
                raise RemoteCorruptionError(
                    f"{key} at {pos + p}: batch {h.base_offset}..{h.last_offset} outside the"
                    f" segment's {seg.base_offset}..{seg.end_offset}")
            if h.last_offset < offset:
                p += h.size
                continue
            if h.base_offset >= upper:
                break
            if out.size + h.size > max_bytes and (out.buffers or not min_one):
                break
            if not crc_is_valid(buf, p, h):
                raise RemoteCorruptionError(f"{key} at {pos + p}: batch {h.base_offset} fails"
                                            " its CRC32C")
            out.buffers.append(memoryview(buf)[p:p + h.size])
            out.size += h.size
            out.next_offset = h.last_offset + 1
            p += h.size
            if h.last_offset >= seg.end_offset:
                break
        return out

    async def aborted(self, segs: list[RemoteLogSegmentMetadata], part_dir: str,
                      fetch_offset: int, upper: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper) from the uploaded
        `.txnindex` of `segs` (the segment read and the later ones, in order); True once
        no later segment can hold one (Kafka's collectAbortedTransactions)."""
        out: list[AbortedTxn] = []
        for seg in segs:
            if "txnindex" not in seg.files:
                continue
            data = await self._whole(seg, part_dir, "txnindex")
            usable = len(data) - len(data) % TXN_ENTRY.size
            for _v, pid, first, last, lso in TXN_ENTRY.iter_unpack(data[:usable]):
                if last >= fetch_offset and first < upper:
                    out.append(AbortedTxn(pid, first, last, lso))
                if lso >= upper:
                    return out, True
        return out, False



    async def offset_for_timestamp(self, seg: RemoteLogSegmentMetadata, part_dir: str,
                                   timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record of `seg` with a timestamp >= `timestamp`
        (ListOffsets by time; Kafka's RemoteLogManager.findOffsetByTimestamp): the time
        index gives where to start, batches are scanned by their max timestamp, and the one
        batch found is decoded."""
        tix = await self._whole(seg, part_dir, "timeindex")
        start = seg.base_offset
        for i in range(len(tix) // 12):
            ts, rel = _TIME_ENTRY.unpack_from(tix, i * 12)
            if ts >= timestamp:
                break
            start = seg.base_offset + rel
        offset = start
        while offset <= seg.end_offset:
            rr = await self.read(seg, part_dir, offset, CHUNK_SIZE, seg.end_offset + 1, True)
            if not rr.buffers:
                return None
            for b in rr.buffers:
                h = parse_header(b, 0)
                if h.max_timestamp >= timestamp:
                    for rec in decode_records(b):
                        assert rec.offset is not None and rec.timestamp is not None
                        if rec.timestamp >= timestamp and rec.offset >= start:
                            return rec.offset, rec.timestamp
            offset = rr.next_offset
        return None
