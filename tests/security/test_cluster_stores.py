"""The cluster-backed security stores over an in-memory document store with etcd's
compare-and-set rule: a change lost to a concurrent writer is re-applied on top of that
writer's version (nothing either broker stored is dropped), and every new version reaches
the subscribers. The etcd side is tested with real brokers in
tests/cluster/test_cluster_security_stores.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from yak.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from yak.security.authorizer import encode_acls
from yak.security.cluster_stores import ClusterAclStore, ClusterQuotaStore
from yak.security.quota_store import QuotaEntity


class Docs:
    """Documents with mod revisions; `interfere` runs once before the next write, as a
    write from another broker landing between this broker's read and its write."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[bytes, int]] = {}
        self.revision = 0
        self.listeners: dict[str, list[Callable[[bytes | None], None]]] = {}
        self.interfere: Callable[[], None] | None = None
        self.attempts = 0

    def document(self, name: str) -> tuple[bytes | None, int]:
        v = self.values.get(name)
        return (None, 0) if v is None else v

    def watch_document(self, name: str, callback: Callable[[bytes | None], None]) -> None:
        self.listeners.setdefault(name, []).append(callback)

    def _put(self, name: str, value: bytes) -> None:
        self.revision += 1
        self.values[name] = (value, self.revision)
        for cb in self.listeners.get(name, []):
            cb(value)

    async def put_document(self, name: str, value: bytes, mod_revision: int) -> bool:
        self.attempts += 1
        if self.interfere is not None:
            fn, self.interfere = self.interfere, None
            fn()
        if self.document(name)[1] != mod_revision:
            return False
        self._put(name, value)
        return True


def binding(topic: str, principal: str) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                      AccessControlEntry(principal, "*", AclOperation.READ,
                                         AclPermissionType.ALLOW))


def test_acl_change_lost_to_another_broker_is_reapplied_on_top() -> None:
    docs = Docs()
    mine, other = ClusterAclStore(docs), ClusterAclStore(docs)
    seen: list[tuple[set, set]] = []
    mine.subscribe(lambda add, rem: seen.append((set(add), set(rem))))

    async def body() -> None:
        await mine.start()
        await other.start()
        mine.load()
        a, b = binding("a", "User:alice"), binding("b", "User:bob")
        # broker "other" stores b between our read and our write of a
        docs.interfere = lambda: docs._put("acls", encode_acls({b}))
        await asyncio.to_thread(mine.apply, [a], [])
        assert docs.attempts == 2  # lost once, re-read, written
        assert set(mine.load()) == {a, b}
        await asyncio.to_thread(other.apply, [], [b])
        assert set(other.load()) == {a}
        # the subscriber saw every version: b (other), a added, b removed
        assert seen == [({b}, set()), ({a}, set()), (set(), {b})]

    asyncio.run(body())


def test_quota_store_merges_and_notifies() -> None:
    docs = Docs()
    store = ClusterQuotaStore(docs)
    got: list[dict] = []
    store.subscribe(lambda data: got.append(dict(data)))
    alice = QuotaEntity.of({"user": "alice"})

    async def body() -> None:
        await store.start()
        await asyncio.to_thread(store.apply, {alice: {"producer_byte_rate": 1024.0}})
        await asyncio.to_thread(store.apply, {alice: {"consumer_byte_rate": 2048.0}})
        assert store.load() == {alice: {"producer_byte_rate": 1024.0,
                                        "consumer_byte_rate": 2048.0}}
        await asyncio.to_thread(store.apply, {alice: {"producer_byte_rate": None,
                                                      "consumer_byte_rate": None}})
        assert store.load() == {}
        assert len(got) == 3 and got[-1] == {}

    asyncio.run(body())
