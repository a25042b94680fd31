"""The remote log's metadata in its two copies: committed in Yak's metadata store, then
published as the bucket's manifest (docs/tiered.md, "Where the metadata lives").

- The metadata store (etcd in a cluster, the local store of a single broker) is the
  commit point. A version of a partition's `Manifest` is committed with a compare-and-set
  on the version before it (`MetadataBackend.commit`), so of two brokers that both believe
  they lead exactly one commits N+1. The backend is the cluster layer's
  (`yak/cluster/remote_log_metadata.py`, one key per segment); this layer sees it only
  through the `MetadataBackend` protocol, which the composition hands in.
- The bucket's manifest (`ManifestStore`) is published right after, with the same version
  number (a create-only write: the store's compare-and-set already allows one version N,
  so a version that is there already is that one). It is the copy for readers without a
  broker: Spark's direct read, `yak tiered status`, and a cluster whose metadata store
  holds nothing for the partition (a fresh one, or one upgraded from bucket-only manifests).

Why the metadata store commits and the bucket follows: the store's compare-and-set is
linearizable and cheap (one etcd transaction), a broker reads it without listing the
bucket, and the broker's readers (fetch, followers, the follower rebuild) must agree with
the leader at once. The bucket copy can lag one version behind after a crash between the
two writes; that is safe for its readers because every write's order keeps it so: a
segment is committed FINISHED only after its objects landed (a lagging manifest names it
STARTED, which no reader serves), and objects are deleted only after the version without
them (DELETE_SEGMENT_STARTED) is published to the bucket too. A leader repairs the lag
when its leadership starts (`reconcile`) and before each round (`unpublished`).

Without a backend (tests, tools) the bucket is the commit point, as before issue 25's
metadata store copy: create-only versions fence concurrent writers.
"""

from __future__ import annotations

import logging
from typing import Protocol

from yak.tiered.metadata import Manifest, ManifestStore

__all__ = ["MAX_CHANGES_PER_COMMIT", "MetadataBackend", "RemoteLogMetadata"]

log = logging.getLogger(__name__)

# Segments one commit may add, change or drop: an etcd transaction holds at most
# --max-txn-ops operations (128 by default) and a commit is one transaction with the
# partition's head. The manager copies, sweeps and deletes at most this many per round.
MAX_CHANGES_PER_COMMIT = 100


class MetadataBackend(Protocol):
    """The metadata store's copy of the remote log metadata (the cluster layer's)."""

    async def load(self, topic: str, topic_id: str, partition: int) -> Manifest | None:
        """The committed version; None if the store holds nothing for the partition."""
        ...

    async def commit(self, old: Manifest, new: Manifest) -> bool:
        """Commit `new` if the stored version is still `old.version` (0: nothing stored);
        False if another writer committed first."""
        ...

    async def delete_topic(self, topic_id: str) -> None:
        """Forget every partition of a deleted topic."""
        ...


class RemoteLogMetadata:
    """Loads and commits a partition's remote log metadata: the metadata store first, the
    bucket's manifest after it (see the module docstring)."""

    def __init__(self, bucket: ManifestStore, backend: MetadataBackend | None) -> None:
        self.bucket = bucket
        self.backend = backend
        self._published: dict[tuple[str, int], int] = {}  # (topic id, partition) -> version
        self.repairs = 0  # bucket manifests republished after a crash between the writes
        self.adopted = 0  # bucket manifests taken into an empty (or older) metadata store

    async def load(self, topic: str, topic_id: str, partition: int) -> Manifest:
        """The committed version (a follower's round, a broker's reads, a follower's
        rebuild): the metadata store's; the bucket's while the store holds nothing."""
        if self.backend is not None:
            m = await self.backend.load(topic, topic_id, partition)
            if m is not None:
                return m
        return await self.bucket.load(topic, topic_id, partition)

    async def reconcile(self, topic: str, topic_id: str, partition: int) -> Manifest:
        """A leadership starts: bring the two copies together and return the committed
        version. The store ahead of the bucket (a crash after a commit, before its
        publication): publish the store's. The bucket ahead of the store, or the store
        empty (a fresh cluster, manifests written before the store kept them): commit the
        bucket's version into the store, then carry on from it."""
        if self.backend is None:
            return await self.bucket.load(topic, topic_id, partition)
        stored = await self.backend.load(topic, topic_id, partition)
        published = await self.bucket.load(topic, topic_id, partition)
        key = (topic_id, partition)
        if stored is None or published.version > stored.version:
            base = stored if stored is not None else Manifest(topic, partition, topic_id)
            if published.version == 0:
                return base
            if not await self.backend.commit(base, published):
                return await self.load(topic, topic_id, partition)  # another broker's
            self.adopted += 1
            self._published[key] = published.version
            log.info("%s-%d: remote log metadata version %d taken from the bucket's"
                     " manifest into the metadata store (it held %s)", topic, partition,
                     published.version, "nothing" if stored is None else
                     f"version {stored.version}")
            return published
        if published.version < stored.version:
            await self.publish(stored)
            self.repairs += 1
            log.info("%s-%d: bucket manifest republished at version %d (it was at %d:"
                     " a commit whose publication did not happen)", topic, partition,
                     stored.version, published.version)
        else:
            self._published[key] = stored.version
        return stored

    async def commit(self, old: Manifest, new: Manifest) -> bool:
        """The commit point: False if another writer committed `new.version` first. The
        caller then publishes (`publish`); with no backend the bucket write is the
        commit."""
        if self.backend is None:
            ok = await self.bucket.commit(new)
            if ok:
                self._published[(new.topic_id, new.partition)] = new.version
            return ok
        return await self.backend.commit(old, new)

    async def publish(self, m: Manifest) -> None:
        """Write the committed version `m` to the bucket (RemoteStorageError if the store
        fails: `unpublished` stays true and the leader's next round tries again)."""
        if not self.unpublished(m):
            return
        # False: the version is there already; the store's compare-and-set allowed only
        # one version m.version, so it is this one (a repair that raced a late publish).
        await self.bucket.commit(m)
        key = (m.topic_id, m.partition)
        self._published[key] = max(self._published.get(key, -1), m.version)

    def unpublished(self, m: Manifest) -> bool:
        """Whether the bucket may still lack committed version `m`."""
        return m.version > 0 and self._published.get((m.topic_id, m.partition), -1) < m.version

    async def delete_topic(self, topic_id: str) -> None:
        for key in [k for k in self._published if k[0] == topic_id]:
            del self._published[key]
        if self.backend is not None:
            await self.backend.delete_topic(topic_id)
