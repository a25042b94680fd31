"""Tiered storage's remote log metadata in the metadata store (issue 25; docs/tiered.md,
"Where the metadata lives"): the commit point of each tiered partition's remote log, on the
one metadata path (etcd in a cluster, the local store in a single broker: `KVClient`).

Keys (`ClusterKeys.remote_log_partition`), one per segment so that no value nears etcd's
request size limit (1.5 MiB) however long the remote log grows:

    remote_log/<topic id>/<partition>/head                      version, leader epoch,
                                                                broker, remote log start
    remote_log/<topic id>/<partition>/segments/<base>-<id>      one RemoteLogSegmentMetadata

A version is committed in one transaction: the head compared on its mod revision (the
version before; absent for the first), the head put, and the segments that changed put or
deleted. So the head and its segments change together, and of two brokers that both
believe they lead exactly one commits a version. One range read of the partition's prefix
reads a consistent version. Segment keys without a head (an adoption cut short) are
ignored. This implements `yak.tiered.remote_metadata.MetadataBackend`; the tiered layer
never imports this one, the composition hands it in.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import replace

from yak.cluster.etcd_values import Compare, EtcdError, KeyValue, Op
from yak.cluster.kv import KVClient
from yak.cluster.layout import ClusterKeys
from yak.tiered.metadata import Manifest, RemoteLogSegmentMetadata
from yak.tiered.store import RemoteStorageError

__all__ = ["KVRemoteLogMetadata", "RemoteLogMetadataError"]

HEAD_FORMAT = 1
# etcd refuses a transaction of more than --max-txn-ops operations (128 by default); the
# remote log manager changes at most 100 segments per commit (MAX_CHANGES_PER_COMMIT).
MAX_TXN_OPS = 120


class RemoteLogMetadataError(RemoteStorageError):
    """The metadata store failed or is unreachable. A RemoteStorageError, so the tiered
    layer treats it as it treats the bucket's failures: a leader's round backs off (one
    WARNING line), a remote read or a follower's rebuild answers a retriable error. A
    commit whose outcome is unknown may have landed: the next commit's compare-and-set
    then fails, the leader re-reads and sweeps the STARTED entries it never uploaded."""


class KVRemoteLogMetadata:
    """The remote log metadata of every tiered partition, in one cluster's namespace."""

    def __init__(self, client: KVClient, keys: ClusterKeys) -> None:
        self.client = client
        self.keys = keys
        # (topic id, partition) -> (the head's mod revision, that version): the compare of
        # the next commit without a read first, and a re-read that costs one small get
        # while nothing changed (a follower's round; decoding a long remote log is not).
        self._known: dict[tuple[str, int], tuple[int, Manifest]] = {}

    def _head(self, topic_id: str, partition: int) -> str:
        return self.keys.remote_log_partition(topic_id, partition) + "head"

    def _segment(self, topic_id: str, partition: int, s: RemoteLogSegmentMetadata) -> str:
        return (f"{self.keys.remote_log_partition(topic_id, partition)}segments/"
                f"{s.base_offset:020d}-{s.segment_id}")

    async def load(self, topic: str, topic_id: str, partition: int) -> Manifest | None:
        try:
            return await self._load(topic, topic_id, partition)
        except EtcdError as e:
            raise RemoteLogMetadataError(f"metadata store: {e}") from e

    async def commit(self, old: Manifest, new: Manifest) -> bool:
        try:
            return await self._commit(old, new)
        except EtcdError as e:
            raise RemoteLogMetadataError(f"metadata store: {e}") from e

    async def delete_topic(self, topic_id: str) -> None:
        for key in [k for k in self._known if k[0] == topic_id]:
            del self._known[key]
        try:
            await self.client.delete(self.keys.remote_log_topic(topic_id), prefix=True)
        except EtcdError as e:
            raise RemoteLogMetadataError(f"metadata store: {e}") from e

    async def _load(self, topic: str, topic_id: str, partition: int) -> Manifest | None:
        key = (topic_id, partition)
        prefix = self.keys.remote_log_partition(topic_id, partition)
        known = self._known.get(key)
        if known is not None:
            head = await self.client.get(prefix + "head")
            if head is not None and head.mod_revision == known[0]:
                return known[1]
        r = await self.client.range(prefix, prefix=True)
        # Decoding one segment per key is ~0.1 ms; a long remote log's off the event loop.
        found = await asyncio.to_thread(_decode, topic, topic_id, partition, prefix, r.kvs)
        if found is None:
            self._known.pop(key, None)
            return None
        self._known[key] = found
        return found[1]

    async def _commit(self, old: Manifest, new: Manifest) -> bool:
        key = (new.topic_id, new.partition)
        head = self._head(new.topic_id, new.partition)
        if old.version == 0:
            guard = Compare.create_revision(head, "==", 0)
        else:
            known = self._known.get(key)
            if known is not None and known[1].version == old.version:
                rev = known[0]
            else:
                kv = await self.client.get(head)
                if kv is None or int(json.loads(kv.value)["version"]) != old.version:
                    return False
                rev = kv.mod_revision
            guard = Compare.mod_revision(head, "==", rev)
        before = {s.segment_id: s for s in old.segments}
        after = {s.segment_id: s for s in new.segments}
        # An unchanged entry is the same object in both versions: `is` first, so a commit
        # compares and encodes only what changed (`encoded` is the entry's cached JSON).
        ops = [Op.put(self._segment(new.topic_id, new.partition, s), s.encoded.decode())
               for sid, s in after.items()
               if before.get(sid) is not s and before.get(sid) != s]
        ops += [Op.delete(self._segment(new.topic_id, new.partition, s))
                for sid, s in before.items() if sid not in after]
        if len(ops) + 1 > MAX_TXN_OPS:
            if old.version != 0:
                raise ValueError(f"{len(ops)} segment changes in one remote log metadata"
                                 f" commit (at most {MAX_TXN_OPS - 1})")
            # Taking a long manifest from the bucket into an empty store: stray keys of an
            # earlier try dropped and the segments written in batches while no head
            # exists (a reader sees nothing until the head), then the head.
            absent = Compare.create_revision(head, "==", 0)
            seg_prefix = self.keys.remote_log_partition(new.topic_id, new.partition)
            r = await self.client.txn([absent], [Op.delete(seg_prefix + "segments/",
                                                           prefix=True)])
            if not r.succeeded:
                return False
            for i in range(0, len(ops), MAX_TXN_OPS):
                r = await self.client.txn([absent], ops[i:i + MAX_TXN_OPS])
                if not r.succeeded:
                    return False
            ops = []
        value = json.dumps({
            "format": HEAD_FORMAT, "topic": new.topic, "version": new.version,
            "leader_epoch": new.leader_epoch, "broker_id": new.broker_id,
            "log_start_offset": new.log_start_offset}, separators=(",", ":"))
        r = await self.client.txn([guard], [Op.put(head, value), *ops])
        if not r.succeeded:
            self._known.pop(key, None)
            return False
        # Every key of one transaction gets its revision: the head's mod revision now.
        self._known[key] = (r.revision, replace(
            new, segments=tuple(sorted(new.segments, key=lambda s: s.base_offset))))
        return True


def _decode(topic: str, topic_id: str, partition: int, prefix: str,
            kvs: Sequence[KeyValue]) -> tuple[int, Manifest] | None:
    """(the head's mod revision, the version) from a range of the partition's keys; None
    without a head (segment keys alone are an adoption cut short, not a version)."""
    head: KeyValue | None = None
    segments = []
    for kv in kvs:
        if kv.key == prefix + "head":
            head = kv
        elif kv.key.startswith(prefix + "segments/"):
            segments.append(RemoteLogSegmentMetadata.from_json(json.loads(kv.value)))
    if head is None:
        return None
    h = json.loads(head.value)
    if h.get("format") != HEAD_FORMAT:
        raise ValueError(f"{head.key}: unknown format {h.get('format')!r}")
    return head.mod_revision, Manifest(
        topic=str(h.get("topic", topic)), partition=partition, topic_id=topic_id,
        version=int(h["version"]), leader_epoch=int(h["leader_epoch"]),
        broker_id=int(h["broker_id"]), log_start_offset=int(h["log_start_offset"]),
        segments=tuple(sorted(segments, key=lambda s: s.base_offset)))
