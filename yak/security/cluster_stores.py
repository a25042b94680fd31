"""SCRAM credentials, ACLs and client quotas of a cluster: one document each in the
metadata store (etcd), the same on every broker.

Why: on one broker these live in files of its data directory. In a cluster a user created,
an ACL added or a quota set through any broker must hold on all of them (Kafka keeps them
in the KRaft metadata log for the same reason), and a broker that restarts or joins later
must find them. Each store keeps the same calls as its file twin (`load`, `apply`, and the
credential store's in-memory `get`), so the authenticator, the authorizer and the quota
manager do not know which one they have.

How: a store's whole state is one JSON document (`ClusterKeys.document`: `scram`, `acls`,
`quotas`, in the format of the file), read from the broker's metadata image (no I/O) and
written with compare-and-set on its mod revision: `apply` re-reads and re-applies its change
if another broker wrote first, so concurrent changes through different brokers are all kept.
Every broker follows the document through the image's watch and hands each new version to
its consumer (`subscribe`): the authorizer's `on_store_change`, the quota manager's, or the
credential cache. `apply` runs in a worker thread (the callers put it there, as for a file);
it waits for the loop to finish the etcd write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

from yak.security.acl import AclBinding
from yak.security.authorizer import decode_acls, encode_acls
from yak.security.quota_store import QuotaEntity, decode_quotas, encode_quotas, merge_quotas
from yak.security.scram import (
    Key,
    ScramCredential,
    decode_credentials,
    encode_credentials,
    merge_credentials,
)

__all__ = [
    "ClusterAclStore",
    "ClusterCredentialStore",
    "ClusterQuotaStore",
    "DocumentStore",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Compare-and-set attempts before `apply` gives up (each failure means another broker
# changed the same document in between; the caller answers the request with an error).
MAX_ATTEMPTS = 20
WRITE_TIMEOUT_S = 30.0


class DocumentStore(Protocol):
    """What the metadata store offers (`yak.cluster.etcd_store.EtcdMetadataStore`)."""

    def document(self, name: str) -> tuple[bytes | None, int]: ...

    def watch_document(self, name: str, callback: Callable[[bytes | None], None]) -> None: ...

    async def put_document(self, name: str, value: bytes, mod_revision: int) -> bool: ...


class _Document:
    """One document: decoded reads from the image, compare-and-set writes."""

    def __init__(self, docs: DocumentStore, name: str, decode: Callable[[bytes], T],
                 empty: Callable[[], T]) -> None:
        self.docs = docs
        self.name = name
        self._decode = decode
        self._empty = empty
        self.loop: asyncio.AbstractEventLoop | None = None

    def read(self) -> tuple[T, int]:
        value, revision = self.docs.document(self.name)
        if value is None:
            return self._empty(), revision
        return self._decode(value), revision

    def follow(self, on_change: Callable[[T], None]) -> None:
        """`on_change(state)` for every new version of the document (on the loop). A
        version that cannot be decoded is logged and skipped: the last good one stays."""
        def changed(value: bytes | None) -> None:
            try:
                state = self._empty() if value is None else self._decode(value)
            except ValueError as e:
                log.error("cluster document %s: %s; keeping the previous one", self.name, e)
                return
            on_change(state)
        self.docs.watch_document(self.name, changed)

    def update(self, change: Callable[[T], bytes]) -> None:
        """Blocking, from a worker thread: `change(current)` -> new value, written if the
        document is still the one read; else read again and retry."""
        loop = self.loop
        if loop is None:
            raise RuntimeError(f"cluster document {self.name}: store not started")
        for _ in range(MAX_ATTEMPTS):
            current, revision = self.read()
            value = change(current)
            future = asyncio.run_coroutine_threadsafe(
                self.docs.put_document(self.name, value, revision), loop)
            if future.result(WRITE_TIMEOUT_S):
                return
        raise RuntimeError(f"cluster document {self.name}: changed by others"
                           f" {MAX_ATTEMPTS} times in a row; try again")



class ClusterAclStore:
    """The ACLs (`AclStore`). `subscribe(authorizer.on_store_change)` once, at composition."""

    def __init__(self, docs: DocumentStore) -> None:
        self._doc = _Document(docs, "acls", decode_acls, set)
        self._known: set[AclBinding] = set()
        self._subscribers: list[Callable[[Iterable[AclBinding], Iterable[AclBinding]], None]] = []
        self._doc.follow(self._changed)

    def subscribe(self, on_change: Callable[[Iterable[AclBinding], Iterable[AclBinding]],
                                            None]) -> None:
        self._subscribers.append(on_change)

    def _changed(self, acls: set[AclBinding]) -> None:
        added, removed = acls - self._known, self._known - acls
        self._known = acls
        for on_change in self._subscribers:
            on_change(added, removed)

    async def start(self) -> None:
        """Bind to the running loop (`apply`'s etcd writes run there); a part's start."""
        self._doc.loop = asyncio.get_running_loop()

    def load(self) -> list[AclBinding]:
        acls, _ = self._doc.read()
        self._known = set(acls)
        return list(acls)

    def apply(self, add: Sequence[AclBinding], remove: Sequence[AclBinding]) -> None:
        self._doc.update(lambda cur: encode_acls((cur - set(remove)) | set(add)))


class ClusterCredentialStore:
    """SCRAM credentials (`CredentialStore`); `get` reads a cache the watch keeps current,
    so a login on any broker sees a user created through another."""

    def __init__(self, docs: DocumentStore) -> None:
        self._doc = _Document(docs, "scram", decode_credentials, dict)
        self._creds: dict[Key, ScramCredential] = {}
        self._doc.follow(self._changed)

    def _changed(self, creds: dict[Key, ScramCredential]) -> None:
        self._creds = creds

    async def start(self) -> None:
        """Bind to the running loop (`apply`'s etcd writes run there); a part's start."""
        self._doc.loop = asyncio.get_running_loop()

    def load(self) -> None:
        self._creds, _ = self._doc.read()

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._creds.get((user, mechanism))

    def all(self) -> dict[Key, ScramCredential]:
        return dict(self._creds)

    def apply(self, upserts: Mapping[Key, ScramCredential], deletes: Iterable[Key]) -> None:
        deletes = list(deletes)
        self._doc.update(
            lambda cur: encode_credentials(merge_credentials(cur, upserts, deletes)))
        self._creds, _ = self._doc.read()  # the image has the write (put_document waited)


class ClusterQuotaStore:
    """Client quota configs (`QuotaStore`). `subscribe(quotas.on_store_change)` once."""

    def __init__(self, docs: DocumentStore) -> None:
        self._doc = _Document(docs, "quotas", decode_quotas, dict)
        self._subscribers: list[Callable[[Mapping[QuotaEntity, Mapping[str, float]]],
                                         None]] = []
        self._doc.follow(self._changed)

    def subscribe(self, on_change: Callable[[Mapping[QuotaEntity, Mapping[str, float]]],
                                            None]) -> None:
        self._subscribers.append(on_change)

    def _changed(self, data: dict[QuotaEntity, dict[str, float]]) -> None:
        for on_change in self._subscribers:
            on_change(data)

    async def start(self) -> None:
        """Bind to the running loop (`apply`'s etcd writes run there); a part's start."""
        self._doc.loop = asyncio.get_running_loop()

    def load(self) -> dict[QuotaEntity, dict[str, float]]:
        data, _ = self._doc.read()
        return data

    def apply(self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]) -> None:
        self._doc.update(lambda cur: encode_quotas(merge_quotas(cur, changes)))
