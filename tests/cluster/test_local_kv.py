"""The local metadata backend (`yak.cluster.local_kv.LocalKV`) against a real etcd.

The same script of calls runs on a real etcd and on `LocalKV`; their answers (revisions
taken relative to the first write) must be the same, so the code written against etcd gets
the same semantics from the local backend. Then what only the local backend has: its file
(durable writes, revisions that keep growing across restarts, leased keys that die with the
process) and lease expiry without a keeper. Last, the cluster parts that use leases and
watches (registration, controller election, the image) run on it unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from tests.cluster.conftest import run
from tests.waiting import await_until
from yak.cluster.controller import ControllerElection
from yak.cluster.etcd import Compare, EtcdClient, KeyValue, Op, RangeResult, TxnResult
from yak.cluster.etcd_store import EtcdMetadataStore
from yak.cluster.kv import KVClient
from yak.cluster.layout import ClusterKeys
from yak.cluster.local_kv import KV_FILE, LocalKV
from yak.cluster.membership import BrokerRegistration, RegistrationState
from yak.cluster.records import RegisterBrokerRecord
from yak.errors import TopicAlreadyExistsError


def _kv(kv: KeyValue, base: int) -> tuple[Any, ...]:
    def rel(r: int) -> int:
        return r - base if r else 0

    return (kv.key.split("/", 3)[-1], kv.value,
            rel(kv.create_revision), rel(kv.mod_revision), kv.version, bool(kv.lease))


def _norm(r: Any, base: int) -> Any:
    if isinstance(r, RangeResult):
        return ("range", [_kv(kv, base) for kv in r.kvs], r.count, r.more)
    if isinstance(r, TxnResult):
        # A put answers with the transaction's revision (a delete with a count).
        return ("txn", r.succeeded, r.revision - base,
                [("at txn revision" if x == r.revision else _norm(x, base))
                 for x in r.responses])
    if isinstance(r, KeyValue):
        return _kv(r, base)
    return r


async def _script(c: KVClient, ns: str) -> list[Any]:
    """Every kind of call the cluster code makes; the transcript, revisions relative."""
    k = f"/t/{ns}/"
    out: list[Any] = []
    base = await c.put(k + "a", b"1") - 1
    out.append(("put", (await c.put(k + "a", b"2")) - base))
    out.append(("put", (await c.put(k + "b/1", b"x")) - base))
    out.append(("put", (await c.put(k + "b/2", b"y")) - base))
    out.append(_norm(await c.get(k + "a"), base))
    out.append(_norm(await c.get(k + "missing"), base))
    out.append(_norm(await c.range(k + "b/", prefix=True), base))
    out.append(_norm(await c.range(k, prefix=True, limit=2), base))
    out.append(_norm(await c.range(k, prefix=True, keys_only=True), base))
    # compares: create == 0 on an existing key fails and runs the failure branch
    out.append(_norm(await c.txn([Compare.create_revision(k + "a", "==", 0)],
                                 [Op.put(k + "a", b"no")], [Op.get(k + "a")]), base))
    out.append(_norm(await c.txn([Compare.create_revision(k + "c", "==", 0)],
                                 [Op.put(k + "c", b"new"), Op.get(k + "c")]), base))
    a = await c.get(k + "a")
    assert a is not None
    for op in ("==", "!=", ">", "<"):
        out.append(_norm(await c.txn([Compare.mod_revision(k + "a", op, a.mod_revision)]),
                         base))
        out.append(_norm(await c.txn([Compare.version(k + "a", op, 2)]), base))
    out.append(_norm(await c.txn([Compare.value(k + "a", "==", b"2")]), base))
    out.append(_norm(await c.txn([Compare.value(k + "zz", "==", b"")]), base))
    out.append(_norm(await c.txn([Compare.value(k + "zz", "!=", b"x")]), base))
    out.append(_norm(await c.txn([Compare.lease(k + "a", "==", 0)]), base))
    # a nested transaction inside a fence, both outcomes
    out.append(_norm(await c.txn(
        [Compare.create_revision(k + "c", "==", a.create_revision + 4)],
        [Op.txn([Compare.value(k + "c", "==", b"new")], [Op.put(k + "c", b"v2")],
                [Op.get(k + "c")])], [Op.get(k + "c")]), base))
    out.append(_norm(await c.txn(
        [Compare.version(k + "c", "==", 2)],
        [Op.txn([Compare.value(k + "c", "==", b"new")], [Op.put(k + "c", b"v3")],
                [Op.get(k + "c")])]), base))
    # deletes: one key, a prefix, nothing
    out.append(("delete", await c.delete(k + "a")))
    out.append(("delete", await c.delete(k + "b/", prefix=True)))
    out.append(("delete", await c.delete(k + "nothing")))
    out.append(_norm(await c.txn([], [Op.delete(k + "c"), Op.put(k + "d", b"1")]), base))
    # leases: grant, put on it, ttl, keepalive, revoke deletes the key
    lease, ttl = await c.lease_grant(5)
    out.append(("grant", ttl))
    out.append(_norm(await c.txn([], [Op.put(k + "l", b"on lease", lease=lease)]), base))
    kv = await c.get(k + "l")
    assert kv is not None and kv.lease == lease
    out.append(("ttl", 3 <= await c.lease_ttl(lease) <= 5))
    out.append(("keepalive", await c.lease_keepalive(lease)))
    await c.lease_revoke(lease)
    out.append(_norm(await c.get(k + "l"), base))
    out.append(("gone", await c.lease_keepalive(lease), await c.lease_ttl(lease)))
    await c.lease_revoke(lease)  # a second revoke is not an error
    out.append(_norm(await c.range(k, prefix=True), base))
    return out


async def _watched(c: KVClient, ns: str) -> list[Any]:
    """A watch from a revision: every event from it on, in revision order (etcd may batch
    several revisions into one response, so the events are compared, not the batches)."""
    k = f"/w/{ns}/"
    start = await c.put(k + "x", b"0")
    events: list[Any] = []
    watch = c.watch(k, prefix=True, start_revision=start)

    async def collect() -> None:
        async for resp in watch:
            assert resp.revision >= max(e.kv.mod_revision for e in resp.events)
            events.extend((e.type, e.kv.key.rsplit("/", 1)[1], e.kv.value,
                           e.kv.mod_revision - start) for e in resp.events)
            if any(e.kv.key.endswith("end") for e in resp.events):
                return

    task = asyncio.get_running_loop().create_task(collect())
    await c.txn([], [Op.put(k + "y", b"1"), Op.put(k + "z", b"2")])
    await c.put(f"/w/{ns}-other", b"not mine")
    await c.delete(k + "y")
    await c.put(k + "end", b"")
    await asyncio.wait_for(task, 10)
    watch.close()
    return events


def test_local_kv_answers_as_etcd(etcd: Any, keys: ClusterKeys, tmp_path: Path) -> None:
    async def body() -> None:
        async with EtcdClient(etcd.endpoints) as real:
            want = await _script(real, keys.namespace)
            want_w = await _watched(real, keys.namespace)
        local = await LocalKV(tmp_path / KV_FILE).open()
        got = await _script(local, keys.namespace)
        got_w = await _watched(local, keys.namespace)
        await local.aclose()
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            assert g == w, f"call {i}: etcd answered {w}, LocalKV {g}"
        assert got_w == want_w

    run(body())


def test_writes_survive_a_restart_and_revisions_keep_growing(tmp_path: Path) -> None:
    path = tmp_path / KV_FILE

    async def first() -> int:
        kv = await LocalKV(path).open()
        await kv.put("/k/durable", b"v")
        lease, _ = await kv.lease_grant(30)
        await kv.put("/k/leased", b"dies with the process", lease=lease)
        return kv.revision  # the process "dies": no close, no revoke

    async def second(before: int) -> None:
        assert path.stat().st_mode & 0o777 == 0o600  # it holds the SCRAM credentials
        kv = await LocalKV(path).open()
        got = await kv.get("/k/durable")
        assert got is not None and got.value == b"v" and got.create_revision == before - 1
        assert await kv.get("/k/leased") is None
        assert kv.revision == before
        assert await kv.put("/k/next", b"") == before + 1
        # A watch from before this process started gets a snapshot, not a gap.
        w = kv.watch("/k/", prefix=True, start_revision=2)
        async with contextlib.aclosing(w.__aiter__()) as stream:  # type: ignore[type-var]
            first_resp = await anext(stream)
        assert first_resp.snapshot is not None
        assert {x.key for x in first_resp.snapshot} == {"/k/durable", "/k/next"}

    run(second(run(first())))


def test_a_lease_nobody_renews_expires_and_its_keys_go(tmp_path: Path) -> None:
    async def body() -> None:
        kv = await LocalKV(tmp_path / KV_FILE).open()
        lease, ttl = await kv.lease_grant(1)
        start = await kv.put("/e/key", b"", lease=lease)
        watch = kv.watch("/e/", prefix=True, start_revision=start + 1)
        t0 = asyncio.get_running_loop().time()
        async for resp in watch:
            assert [e.type for e in resp.events] == ["DELETE"]
            break
        waited = asyncio.get_running_loop().time() - t0
        assert ttl <= waited + 0.1 < ttl + 2.5
        assert await kv.lease_keepalive(lease) == 0
        assert await kv.get("/e/key") is None

    run(body())


def test_registration_election_and_image_run_on_the_local_backend(tmp_path: Path) -> None:
    """The cluster's own parts, unchanged, on LocalKV: a broker registers (its epoch is the
    key's create revision), wins the controller key, the image creates a topic and refuses
    it twice, and a controller write by a deposed epoch is refused by the fence."""
    keys = ClusterKeys("default")

    async def body() -> None:
        kv = await LocalKV(tmp_path / KV_FILE).open()
        store = EtcdMetadataStore(kv, keys, 1, tmp_path / "data")
        await store.start()
        assert store.cluster_id
        reg = BrokerRegistration(kv, keys, RegisterBrokerRecord(broker_id=1, incarnation_id="i"),
                                 session_timeout_ms=3000, heartbeat_interval_ms=500)
        await reg.start()
        assert reg.state is RegistrationState.REGISTERED and reg.epoch > 0
        elected: list[int] = []
        election = ControllerElection(kv, keys, 1, lambda: reg.lease,
                                      on_elected=elected.append)
        election.start()
        await store.wait_for(lambda s: s.controller is not None and 1 in s.brokers(), 5)
        assert store.controller is not None and store.controller[0] == 1
        await await_until(lambda: elected, 2, "on_elected called")
        assert elected and election.is_controller()
        info = await store.create_topic("t", {"cleanup.policy": "compact"}, [[1], [1]])
        assert store.get("t") == info and len(store.partition_states("t")) == 2
        try:
            await store.create_topic("t", {}, [[1]])
            raise AssertionError("created twice")
        except TopicAlreadyExistsError:
            pass
        # Deposed: a stale epoch's fenced write is refused inside the store.
        from yak.cluster.controller import FencedWriter, NotControllerError

        stale = FencedWriter(kv, keys.controller, election.epoch - 1, None)
        try:
            await stale.txn([], [Op.put(keys.root + "x", b"")])
            raise AssertionError("a deposed controller wrote")
        except NotControllerError:
            pass
        await election.stop()
        await reg.stop()
        assert 1 not in store.brokers() or await _gone(store)
        await store.stop()
        await kv.aclose()

    async def _gone(store: EtcdMetadataStore) -> bool:
        await store.wait_for(lambda s: 1 not in s.brokers(), 5)
        return True

    run(body())
