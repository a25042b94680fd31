"""Controller election with two contenders in real etcd, and the fencing of a deposed
controller's writes by etcd itself (not only by the local lease check)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.waiting import await_until
from yak.cluster.controller import ControllerElection, NotControllerError
from yak.cluster.etcd import Compare, EtcdClient, Op
from yak.cluster.layout import ClusterKeys
from yak.cluster.lease import LeaseKeeper
from yak.devcluster.local import LocalEtcd

from .conftest import run


async def contender(c: EtcdClient, keys: ClusterKeys, node_id: int,
                    events: list[tuple[int, str, int]]) -> ControllerElection:
    lease = LeaseKeeper(c, 2000, 300, name=f"node {node_id}")
    await lease.start()
    e = ControllerElection(c, keys, node_id, lease,
                           on_elected=lambda ep: events.append((node_id, "elected", ep)),
                           on_resigned=lambda ep: events.append((node_id, "resigned", ep)))
    e.start()
    return e


def test_one_wins_the_other_takes_over_on_revoke(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            events: list[tuple[int, str, int]] = []
            a = await contender(c, keys, 1, events)
            await a.wait_until(lambda e: e.is_controller(), 5)
            b = await contender(c, keys, 2, events)
            await b.wait_until(lambda e: e.current is not None, 5)
            assert not b.is_controller() and b.current == (1, a.epoch)
            assert events == [(1, "elected", a.epoch)]
            w1 = a.writer()
            await w1.put(keys.topic("t"), b"by-1")

            # the controller's session ends (revoked: a clean exit or an operator's action)
            old_epoch = a.epoch
            t0 = time.monotonic()
            await c.lease_revoke(a.lease.lease_id)
            await b.wait_until(lambda e: e.is_controller(), 5)
            assert time.monotonic() - t0 < 2
            assert b.epoch > old_epoch
            await a.wait_until(lambda e: not e.is_controller(), 5)
            assert (1, "resigned", old_epoch) in events and (2, "elected", b.epoch) in events

            # the old controller's writer is refused by etcd, even skipping the local check
            with pytest.raises(NotControllerError, match="superseded .*node 2"):
                await w1.txn((), [Op.put(keys.topic("t"), b"stale")], check_local=False)
            kv = await c.get(keys.topic("t"))
            assert kv is not None and kv.value == b"by-1"
            w2 = b.writer()
            await w2.put(keys.topic("t"), b"by-2")
            assert (await c.get(keys.topic("t"))).value == b"by-2"  # type: ignore[union-attr]
            await b.stop()
            await a.stop()
            await b.lease.stop()

    run(body())


def test_takeover_when_paused_controller_lease_expires(etcd: LocalEtcd,
                                                      keys: ClusterKeys) -> None:
    """The controller stops renewing (frozen): after its TTL the other takes over; the
    frozen one's writes fail inside etcd, and its own lease check refuses them first."""
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            events: list[tuple[int, str, int]] = []
            a = await contender(c, keys, 1, events)
            await a.wait_until(lambda e: e.is_controller(), 5)
            b = await contender(c, keys, 2, events)
            await b.wait_until(lambda e: e.current == (1, a.epoch), 5)
            stale = a.writer()
            a.lease.suspend()
            t0 = time.monotonic()
            await b.wait_until(lambda e: e.is_controller(), 10)
            took = time.monotonic() - t0
            assert 1.0 < took < 6.0, took  # TTL 2 s (etcd's minimum), plus etcd's tick

            assert not a.is_controller()  # local deadline passed
            with pytest.raises(NotControllerError, match="lease lapsed"):
                await stale.put(keys.root + "x", b"stale")
            with pytest.raises(NotControllerError, match="superseded"):
                await stale.txn((), [Op.put(keys.root + "x", b"stale")], check_local=False)
            assert await c.get(keys.root + "x") is None
            await b.stop()
            await a.stop(resign=False)
            await b.lease.stop()

    run(body())


def test_fenced_writer_inner_compare_vs_deposed(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    """A failed compare of the caller's own (a partition changed meanwhile) is an ordinary
    `succeeded == False`; only losing the controller key raises."""
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            a = await contender(c, keys, 1, [])
            await a.wait_until(lambda e: e.is_controller(), 5)
            w = a.writer()
            k = keys.partition("tid", 0)
            assert await w.compare_and_put(k, 0, b"v1")  # create
            assert not await w.compare_and_put(k, 0, b"again")  # already exists
            kv = await c.get(k)
            assert kv is not None
            assert await w.compare_and_put(k, kv.mod_revision, b"v2")
            assert not await w.compare_and_put(k, kv.mod_revision, b"v3")  # stale read
            r = await w.txn([Compare.value(k, "==", "v2")], [Op.delete(k)], [Op.get(k)])
            assert r.succeeded and r.responses == [1]
            # resigning hands the key back; a writer of that term is refused afterwards
            await a.stop()
            with pytest.raises(NotControllerError, match="no controller"):
                await w.txn((), [Op.put(k, b"late")], check_local=False)
            await a.lease.stop()

    run(body())


def test_simultaneous_contenders_elect_exactly_one(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            events: list[tuple[int, str, int]] = []
            cs = await asyncio.gather(*(contender(c, keys, n, events) for n in range(1, 6)))
            await cs[0].wait_until(lambda e: e.current is not None, 5)
            await await_until(lambda: all(e.current == cs[0].current for e in cs), 5,
                              "every contender seeing the same controller")
            await asyncio.sleep(0.5)  # a window for a second election: it must not come
            leaders = [e for e in cs if e.is_controller()]
            assert len(leaders) == 1, (events, [(e.node_id, e.epoch, e.current) for e in cs])
            assert [ev[1] for ev in events] == ["elected"]
            assert all(e.current == (leaders[0].node_id, leaders[0].epoch) for e in cs)
            for e in cs:
                await e.stop()
                await e.lease.stop()

    run(body())


def test_election_on_the_broker_session_survives_re_registration(etcd: LocalEtcd,
                                                                 keys: ClusterKeys) -> None:
    """As a broker composes them: one session lease for registration and election. When the
    session is lost the broker stops being controller at once, registers again on a new
    lease, and campaigns again on that one."""
    from yak.cluster.membership import BrokerRegistration
    from yak.cluster.records import RegisterBrokerRecord

    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as c:
            reg = BrokerRegistration(c, keys, RegisterBrokerRecord(1, "inc"),
                                     session_timeout_ms=3000, heartbeat_interval_ms=300)
            await reg.start()
            events: list[tuple[str, int]] = []
            e = ControllerElection(c, keys, 1, lambda: reg.lease,
                                   on_elected=lambda ep: events.append(("elected", ep)),
                                   on_resigned=lambda ep: events.append(("resigned", ep)))
            e.start()
            await e.wait_until(lambda x: x.is_controller(), 5)
            first_epoch, first_lease = e.epoch, reg.lease
            stale = e.writer()
            await c.lease_revoke(first_lease.lease_id)  # type: ignore[union-attr]
            await e.wait_until(lambda x: x.is_controller() and x.epoch != first_epoch, 10)
            assert reg.lease is not first_lease and reg.is_registered()
            assert events == [("elected", first_epoch), ("resigned", first_epoch),
                              ("elected", e.epoch)]
            kv = await c.get(keys.controller)
            assert kv is not None and kv.lease == reg.lease.lease_id  # type: ignore[union-attr]
            with pytest.raises(NotControllerError):
                await stale.put(keys.root + "x", b"old term")
            await e.writer().put(keys.root + "x", b"new term")
            await e.stop()
            await reg.stop()

    run(body())
