"""PrefixView: a live copy of a key prefix (range, then watch), including the re-read after
its watch fell behind a compaction."""

from __future__ import annotations

import asyncio

from yak.cluster.etcd import EtcdClient
from yak.cluster.layout import ClusterKeys
from yak.cluster.prefix_view import PrefixView
from yak.devcluster.local import LocalEtcd

from .conftest import run


def test_view_follows_changes_and_recovers_from_compaction(etcd: LocalEtcd,
                                                           keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            p = keys.partitions
            await c.put(p + "a", "1")
            changed: list[set[str]] = []
            view = PrefixView(c, p, on_change=lambda v, ks: changed.append(ks))
            await view.start()
            assert {k: kv.value for k, kv in view.items.items()} == {p + "a": b"1"}
            await c.put(p + "b", "2")
            await c.delete(p + "a")
            await view.wait_for(lambda v: set(v.items) == {p + "b"}, 5)
            assert set().union(*changed) == {p + "a", p + "b"}  # events may come batched

            # The view falls behind (its watch is gone, as across a long etcd outage) while
            # keys change and history is compacted: resuming finds its revision compacted,
            # re-reads, and reports exactly the keys that differ.
            await view.stop()
            resume_from = view.revision + 1
            await c.put(p + "b", "2b")
            await c.put(p + "c", "3")
            await c.put(p + "d", "4")
            await c.delete(p + "d")
            await c.compact(await c.put(keys.root + "elsewhere", "x"))
            changed.clear()
            view._task = asyncio.get_running_loop().create_task(view._follow(resume_from))
            await view.wait_for(lambda v: set(v.items) == {p + "b", p + "c"}, 5)
            assert view.items[p + "b"].value == b"2b"
            assert changed == [{p + "b", p + "c"}]  # d came and went: not a change
            await c.put(p + "e", "5")  # and it follows live changes again
            await view.wait_for(lambda v: p + "e" in v.items, 5)
            await view.stop()

    run(body())


def test_exact_key_view(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            view = PrefixView(c, keys.controller, exact=True)
            await view.start()
            assert view.items == {}
            await c.put(keys.controller + "-not-this", "x")
            await c.put(keys.controller, '{"brokerId": 1}')
            await view.wait_for(lambda v: bool(v.items), 5)
            assert list(view.items) == [keys.controller]
            await view.stop()

    run(body())
