"""yak.cluster.etcd against a real etcd: KV, txn, leases, watch (resume, compaction),
failover across endpoints, typed errors and bounded calls."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from tests.waiting import await_until
from yak.cluster.etcd import (
    CompactedError,
    Compare,
    EtcdClient,
    EtcdRequestError,
    EtcdUnavailable,
    LeaseNotFoundError,
    Op,
    parse_endpoints,
    prefix_range_end,
)
from yak.cluster.layout import ClusterKeys, parse_metadata_url
from yak.devcluster.local import LocalEtcd, free_ports

from .conftest import run


def test_parse_endpoints() -> None:
    assert parse_endpoints("etcd://a:1,b:2/ns") == ["http://a:1", "http://b:2"]
    assert parse_endpoints(["127.0.0.1:2379", "http://h:3"]) == [
        "http://127.0.0.1:2379", "http://h:3"]
    for bad in ("etcd://", "etcd://a", "etcd://a:x", "etcd://a:1,,b:2", "https://a:1",
                "etcd://a:70000"):
        with pytest.raises(ValueError) as e:
            parse_endpoints(bad)
        assert "\n" not in str(e.value)
    assert parse_metadata_url("etcd://a:1,b:2") == ("a:1,b:2", "default")
    assert parse_metadata_url("etcd://a:1/prod-1") == ("a:1", "prod-1")
    with pytest.raises(ValueError):
        parse_metadata_url("etcd://a:1/x/y")
    with pytest.raises(ValueError):
        parse_metadata_url("zk://a:1")


def test_prefix_range_end() -> None:
    assert prefix_range_end("/a/") == b"/a0"
    assert prefix_range_end(b"a\xff") == b"b"
    assert prefix_range_end(b"\xff\xff") == b"\x00"


def test_kv_range_put_delete(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            p = keys.root
            assert await c.get(p + "missing") is None
            r1 = await c.put(p + "a", b"1")
            r2 = await c.put(p + "b", "two")
            assert r2 > r1 > 0
            await c.put(p + "b", b"\x00\xffbinary")
            await c.put(p[:-1] + "0", b"outside the prefix")  # range_end boundary
            kv = await c.get(p + "b")
            assert kv is not None and kv.value == b"\x00\xffbinary"
            assert kv.version == 2 and kv.create_revision == r2 and kv.mod_revision > r2
            rr = await c.range(p, prefix=True)
            assert [k.key for k in rr.kvs] == [p + "a", p + "b"]
            assert rr.count == 2 and rr.revision >= kv.mod_revision
            empty = await c.range(p + "zzz", prefix=True)  # count 0 is omitted on the wire
            assert empty.kvs == [] and empty.count == 0
            assert await c.delete(p + "nothing") == 0  # deleted: 0 is omitted too
            assert await c.delete(p, prefix=True) == 2
            assert (await c.range(p, prefix=True)).kvs == []
            assert await c.delete(p[:-1] + "0") == 1

    run(body())


def test_txn_compares_and_branches(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            k = keys.root + "k"
            # create-if-absent: succeeds once; the failure branch reads the winner
            r = await c.txn([Compare.create_revision(k, "==", 0)], [Op.put(k, "first")],
                            [Op.get(k)])
            assert r.succeeded and r.responses == [r.revision]
            r = await c.txn([Compare.create_revision(k, "==", 0)], [Op.put(k, "second")],
                            [Op.get(k)])
            assert r.succeeded is False  # the gateway omits succeeded:false
            assert r.responses[0].kvs[0].value == b"first"
            kv = await c.get(k)
            assert kv is not None
            # value, version, mod_revision, create_revision compares, each both ways
            assert (await c.txn([Compare.value(k, "==", "first")])).succeeded
            assert not (await c.txn([Compare.value(k, "!=", "first")])).succeeded
            assert (await c.txn([Compare.version(k, "==", 1)])).succeeded
            assert not (await c.txn([Compare.version(k, ">", 1)])).succeeded
            assert (await c.txn([Compare.mod_revision(k, "==", kv.mod_revision)])).succeeded
            assert (await c.txn([Compare.create_revision(k, "<", kv.create_revision + 1)]
                                )).succeeded
            # compare-and-set on mod_revision: only one of two writers from the same read wins
            a = await c.txn([Compare.mod_revision(k, "==", kv.mod_revision)], [Op.put(k, "A")])
            b = await c.txn([Compare.mod_revision(k, "==", kv.mod_revision)], [Op.put(k, "B")])
            assert a.succeeded and not b.succeeded
            # several ops and a nested txn in one atomic step; every compare, nested ones
            # included, sees the state from before the transaction
            r = await c.txn([], [Op.put(keys.root + "x", "1"), Op.delete(k),
                                 Op.txn([Compare.create_revision(k, ">", 0)],
                                        [Op.get(keys.root, prefix=True)])])
            assert r.succeeded and r.responses[1] == 1
            inner = r.responses[2]
            assert inner.succeeded and [kv.key for kv in inner.responses[0].kvs] == [
                keys.root + "x"]

    run(body())


def test_leases(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            lease, ttl = await c.lease_grant(3)
            assert lease > 0 and ttl == 3
            await c.put(keys.root + "on-lease", "v", lease=lease)
            assert (await c.get(keys.root + "on-lease")).lease == lease  # type: ignore[union-attr]
            assert 0 < await c.lease_ttl(lease) <= 3
            assert await c.lease_keepalive(lease) == 3
            await c.lease_revoke(lease)
            assert await c.get(keys.root + "on-lease") is None  # revoking deletes its keys
            assert await c.lease_keepalive(lease) == 0  # gone: TTL omitted on the wire
            assert await c.lease_ttl(lease) == -1
            await c.lease_revoke(lease)  # idempotent
            with pytest.raises(LeaseNotFoundError):
                await c.put(keys.root + "x", "v", lease=lease)
            # a lease left alone expires and takes its keys with it (etcd's minimum TTL is 2 s)
            short, ttl = await c.lease_grant(1)
            assert ttl >= 1
            await c.put(keys.root + "short", "v", lease=short)
            async def expired() -> bool:
                return await c.get(keys.root + "short") is None

            await await_until(expired, 10, "the 1 s lease to expire with its key")
            assert await c.lease_keepalive(short) == 0

    run(body())


def test_request_errors_are_typed(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            with pytest.raises(EtcdRequestError) as e:
                await c.put("", "empty key")  # etcd: "key is not provided"
            assert e.value.code == 3
            rev = await c.put(keys.root + "r", "1")
            with pytest.raises(EtcdRequestError):
                await c.range(keys.root + "r", revision=rev + 1000)  # future revision

    run(body())


def test_unreachable_is_bounded() -> None:
    dead = free_ports(2)

    async def body() -> None:
        async with EtcdClient([f"127.0.0.1:{p}" for p in dead], timeout=1.0) as c:
            t0 = time.monotonic()
            with pytest.raises(EtcdUnavailable) as e:
                await c.get("/x")
            assert time.monotonic() - t0 < 3
            assert str(dead[0]) in str(e.value) and str(dead[1]) in str(e.value)

    run(body())


def test_paused_etcd_bounds_every_call(etcd_factory) -> None:
    """A frozen member accepts connections (the kernel does) but never answers."""
    e = etcd_factory()

    async def body() -> None:
        async with EtcdClient(e.endpoints, timeout=1.0) as c:
            await c.put("/k", "v")
            e.members[0].pause()
            try:
                t0 = time.monotonic()
                with pytest.raises(EtcdUnavailable):
                    await c.get("/k")  # a read: retried within the budget, then given up
                with pytest.raises(EtcdUnavailable, match="outcome unknown"):
                    await c.put("/k", "w")  # a write whose outcome is unknown: not resent
                assert time.monotonic() - t0 < 4
            finally:
                e.members[0].resume()
            assert (await c.get("/k")) is not None

    run(body())


async def _collect(watch, n: int, timeout: float = 10.0) -> list:
    got: list = []
    async with asyncio.timeout(timeout), contextlib.aclosing(watch.__aiter__()) as it:
        async for resp in it:
            got.append(resp)
            if sum(len(r.events) + (r.snapshot is not None) for r in got) >= n:
                return got
    return got


async def _created(watch) -> None:  # type: ignore[no-untyped-def]
    """A watch "from now" sees only writes after etcd created it; it learns its start
    revision from etcd's `created` answer, so a non-zero one means it is in place."""
    await await_until(lambda: watch.next_revision, 10, "etcd to create the watch")


def test_watch_prefix_events(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            start = await c.put(keys.root + "a", "1")
            await c.put(keys.root + "b", "2")
            await c.delete(keys.root + "a")
            await c.put(keys.root[:-1] + "0", "outside")
            got = await _collect(c.watch(keys.root, prefix=True, start_revision=start), 3)
            events = [e for r in got for e in r.events]
            assert [(e.type, e.kv.key) for e in events] == [
                ("PUT", keys.root + "a"), ("PUT", keys.root + "b"), ("DELETE", keys.root + "a")]
            assert events[1].kv.value == b"2"

            # from now: only later changes, delivered as they happen
            w = c.watch(keys.root, prefix=True)
            task = asyncio.ensure_future(_collect(w, 1))
            await _created(w)
            rev = await c.put(keys.root + "later", "x")
            (resp,) = await task
            assert resp.events[0].kv.key == keys.root + "later"
            assert resp.events[0].kv.mod_revision == rev

    run(body())


def test_watch_resumes_after_member_restart_without_loss(etcd_factory) -> None:
    """kill -9 of etcd under a watch: the watch re-opens from the next revision; the events
    written while it was down and after are all delivered, none twice."""
    e = etcd_factory()

    async def body() -> None:
        async with EtcdClient(e.endpoints, timeout=2.0) as c:
            w = c.watch("/w/", prefix=True, idle_timeout=2.0)
            got: list[str] = []

            async def consume() -> None:
                async with contextlib.aclosing(w.__aiter__()) as it:
                    async for resp in it:
                        got.extend(ev.kv.value.decode() for ev in resp.events)

            task = asyncio.ensure_future(consume())
            await _created(w)
            for i in range(5):
                await c.put(f"/w/{i}", str(i))
            e.members[0].kill()
            await asyncio.to_thread(e.restart_member, "etcd1")
            for i in range(5, 10):
                await c.put(f"/w/{i}", str(i))
            await await_until(lambda: len(got) >= 10, 15, "10 events through the restart")
            await asyncio.sleep(0.3)  # a window for a duplicate to arrive in: not a wait
            task.cancel()
            assert got == [str(i) for i in range(10)]
            assert w.reconnects >= 1

    run(body(), 45)


def test_watch_after_compaction_rereads(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            first = await c.put(keys.root + "a", "1")
            await c.put(keys.root + "a", "2")
            await c.put(keys.root + "b", "3")
            last = await c.delete(keys.root + "b") and (await c.put(keys.root + "c", "4"))
            await c.compact(last)
            with pytest.raises(CompactedError):
                await c.range(keys.root, prefix=True, revision=first)
            got = await _collect(c.watch(keys.root, prefix=True, start_revision=first), 1)
            snap = got[0].snapshot
            assert snap is not None
            assert {kv.key: kv.value for kv in snap} == {keys.root + "a": b"2",
                                                         keys.root + "c": b"4"}
            # and it goes on with live events after the snapshot
            w = c.watch(keys.root, prefix=True, start_revision=first)
            task = asyncio.ensure_future(_collect(w, 2))
            # The put must come after the snapshot's read, or the snapshot holds it too.
            await await_until(lambda: w.next_revision != first, 10, "the snapshot read")
            await c.put(keys.root + "d", "5")
            resps = await task
            assert resps[0].snapshot is not None
            assert resps[1].events[0].kv.key == keys.root + "d"

    run(body())


@pytest.mark.slow
def test_three_members_failover_and_quorum_loss(etcd_factory) -> None:
    """Three members: kill -9 of the raft leader; the client moves to the survivors and
    writes go on; with two members down every call fails within its bound."""
    e = etcd_factory(members=3)

    async def body() -> None:
        # A paused follower listed first: reads move on within the bound; a write sent to it
        # has an unknown outcome and is not resent, but the next call starts elsewhere.
        leader = await asyncio.to_thread(e.leader)
        paused = next(m for m in e.members if m is not leader)
        eps = [f"127.0.0.1:{paused.ports[0]}"] + [f"127.0.0.1:{m.ports[0]}" for m in e.members
                                                   if m is not paused]
        async with EtcdClient(eps, timeout=1.5) as c:
            await c.put("/f", "paused")
            paused.pause()
            try:
                t0 = time.monotonic()
                assert (await c.get("/f")).value == b"paused"  # type: ignore[union-attr]
                assert time.monotonic() - t0 < 2.5
                await c.put("/f", "next")  # goes to a live member at once
                assert time.monotonic() - t0 < 3.5
            finally:
                paused.resume()
        async with EtcdClient(e.endpoints, timeout=3.0) as c:
            await c.put("/f", "0")
            leader = await asyncio.to_thread(e.leader)
            leader.kill()
            t0 = time.monotonic()
            while True:  # the next write succeeds once a new leader is elected
                try:
                    await c.put("/f", "1")
                    break
                except EtcdUnavailable:
                    assert time.monotonic() - t0 < 15
            assert (await c.get("/f")).value == b"1"  # type: ignore[union-attr]
            survivors = [m for m in e.members if m.is_alive()]
            survivors[0].kill()
            t0 = time.monotonic()
            with pytest.raises(EtcdUnavailable):
                await c.put("/f", "2")
            assert time.monotonic() - t0 < 5

    run(body(), 60)


@pytest.mark.slow
def test_watch_on_member_without_leader_is_ended_not_silent(etcd_factory) -> None:
    """A member that lost its leader would keep a watch open and deliver nothing; the client
    asks etcd to end such streams ("hasleader"), re-opens, and delivers once quorum is back."""
    e = etcd_factory(members=3)

    async def body() -> None:
        first = e.members[0]
        async with EtcdClient([f"127.0.0.1:{first.ports[0]}"], timeout=2.0) as c:
            start = await c.put("/q/0", "0")
            w = c.watch("/q/", prefix=True, start_revision=start + 1, idle_timeout=60.0)
            got: list[str] = []

            async def consume() -> None:
                async with contextlib.aclosing(w.__aiter__()) as it:
                    async for resp in it:
                        got.extend(ev.kv.value.decode() for ev in resp.events)

            task = asyncio.ensure_future(consume())
            # A first event through the watch: it is open and delivering before quorum goes.
            await c.put("/q/ready", "ready")
            await await_until(lambda: got == ["ready"], 10, "the watch delivering")
            for m in e.members[1:]:
                m.kill()
            # ended by etcd, far inside the 60 s idle bound
            await await_until(lambda: w.reconnects, 15, "the leaderless watch ended")
            for m in e.members[1:]:
                await asyncio.to_thread(e.restart_member, m.name)
            t0 = time.monotonic()
            while True:
                try:
                    await c.put("/q/1", "1")
                    break
                except EtcdUnavailable:
                    assert time.monotonic() - t0 < 15
            await await_until(lambda: "1" in got, 15, "the write after quorum came back")
            task.cancel()
            assert got == ["ready", "1"]

    run(body(), 60)
