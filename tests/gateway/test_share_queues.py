"""Queues over the gateway: share-group consumption through REST, WebSocket and gRPC
against a real `yak serve --http --grpc` process (records produced with confluent-kafka,
group configs set with its AdminClient), and a standalone `yak gateway` for expiry.

Share partitions start at the log end unless the group says otherwise, so every test
sets `share.auto.offset.reset=earliest` on its group first (as a client would, through
IncrementalAlterConfigs on the GROUP resource).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from websockets.asyncio.client import connect

from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 (fixtures)
from yak.gateway.grpc_api import gateway_pb2 as pb

from .conftest import start_standalone
from .test_grpc import GrpcProc, start_serve_grpc

LOCK_MS = 3000  # the broker's default lock for these tests' groups
V2 = "application/vnd.kafka.v2+json"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcProc]:
    g = start_serve_grpc(tmp_path_factory.mktemp("yak-share-gw"),
                         "--set", f"group.share.record.lock.duration.ms={LOCK_MS}",
                         "--set", "group.share.min.record.lock.duration.ms=1000")
    yield g
    g.stop()


@pytest.fixture
def http(gw: GrpcProc) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        yield c


def setup(bootstrap: str, topic: str, partitions: int, group: str, n: int = 0,
          **group_configs: str) -> list[bytes]:
    """The topic, the group's configs (earliest + `group_configs`), `n` records."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)
    configs = {"share.auto.offset.reset": "earliest", **group_configs}
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(10)
    return produce(bootstrap, topic, n, partitions)


def produce(bootstrap: str, topic: str, n: int, partitions: int, start: int = 0) -> list[bytes]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [b"v%d" % i for i in range(start, start + n)]
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
    assert p.flush(15) == 0
    return values


class RestShare:
    """One REST share consumer instance."""

    def __init__(self, http: httpx.Client, group: str, topics: list[str],
                 name: str | None = None) -> None:
        self.http = http
        body: dict[str, Any] = {"topics": topics, "format": "binary"}
        if name:
            body["name"] = name
        r = http.post(f"/share-groups/{group}", json=body)
        assert r.status_code == 200, r.text
        self.base = f"/share-groups/{group}/instances/{r.json()['instance_id']}"
        assert r.json()["base_uri"].endswith(self.base)

    def poll(self, timeout_ms: int = 1000, max_records: int = 500) -> list[dict[str, Any]]:
        r = self.http.get(self.base + "/records",
                          params={"timeout": timeout_ms, "max_records": max_records},
                          headers={"Accept": "application/vnd.kafka.binary.v2+json"})
        assert r.status_code == 200, r.text
        return list(r.json())

    def drain(self, want: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < want and time.monotonic() < deadline:
            got += self.poll()
        assert len(got) == want, f"got {len(got)} of {want}: {got}"
        return got

    def ack(self, ids: list[str], kind: str = "accept") -> httpx.Response:
        return self.http.post(self.base + "/acknowledgements", json={
            "acknowledgements": [{"id": i, "type": kind} for i in ids]})

    def close(self) -> None:
        assert self.http.delete(self.base).status_code == 204


def value(rec: dict[str, Any]) -> bytes:
    import base64
    return base64.b64decode(rec["value"])


def quiet(consumer: RestShare, seconds: float) -> list[dict[str, Any]]:
    """Everything delivered within `seconds` (polls back to back)."""
    got: list[dict[str, Any]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got += consumer.poll(timeout_ms=max(int((end - time.monotonic()) * 1000), 0))
    return got


# ------------------------------------------------------------------ REST


def test_rest_accept_all_nothing_is_redelivered(gw: GrpcProc, http: httpx.Client) -> None:
    values = setup(gw.bootstrap, "sq-accept", 3, "rest-accept", 30)
    c = RestShare(http, "rest-accept", ["sq-accept"])
    got = c.drain(30)
    now_ms = time.time() * 1000
    assert sorted(value(r) for r in got) == sorted(values)
    for r in got:
        assert r["id"] == f"sq-accept:{r['partition']}:{r['offset']}:1"
        assert r["delivery_count"] == 1
        assert now_ms < r["lock_deadline_ms"] <= now_ms + LOCK_MS + 1000
    r = c.ack([x["id"] for x in got])
    assert r.status_code == 200, r.text
    assert [a["id"] for a in r.json()["acknowledgements"]] == [x["id"] for x in got]
    # Past every lock: nothing comes back.
    assert quiet(c, LOCK_MS / 1000 + 1.5) == []
    # Acknowledged once is final: the same ids again are INVALID_RECORD_STATE.
    again = c.ack([got[0]["id"]])
    assert again.status_code == 409 and again.json()["error_code"] == 40903
    assert again.json()["message"].startswith("INVALID_RECORD_STATE")
    c.close()
    assert http.get(c.base + "/records").status_code == 404


def test_rest_release_redelivers_and_reject_archives(gw: GrpcProc, http: httpx.Client) -> None:
    setup(gw.bootstrap, "sq-rel", 2, "rest-rel", 12)
    c = RestShare(http, "rest-rel", ["sq-rel"])
    got = sorted(c.drain(12), key=lambda r: (r["partition"], r["offset"]))
    release, reject, accept = got[:4], got[4:8], got[8:]
    assert c.ack([r["id"] for r in release], "release").status_code == 200
    assert c.ack([r["id"] for r in reject], "reject").status_code == 200
    assert c.ack([r["id"] for r in accept], "accept").status_code == 200
    back = c.drain(4)
    assert sorted((r["partition"], r["offset"]) for r in back) == sorted(
        (r["partition"], r["offset"]) for r in release)
    assert {r["delivery_count"] for r in back} == {2}
    assert all(r["id"].endswith(":2") for r in back)
    # The first delivery's id is not this delivery's.
    stale = c.ack([release[0]["id"]])
    assert stale.status_code == 409 and "INVALID_RECORD_STATE" in stale.json()["message"]
    assert c.ack([r["id"] for r in back]).status_code == 200
    # Rejected records never come again, released-then-accepted ones neither.
    assert quiet(c, LOCK_MS / 1000 + 1.5) == []
    c.close()


def test_rest_bad_acknowledgements(gw: GrpcProc, http: httpx.Client) -> None:
    """Unknown ids and expired locks are 409 INVALID_RECORD_STATE and nothing of the
    request is applied; the expired record comes back to the group."""
    setup(gw.bootstrap, "sq-bad", 1, "rest-bad", 2,
          share_record_lock_duration_ms="1500")
    c = RestShare(http, "rest-bad", ["sq-bad"])
    a, b = sorted(c.drain(2), key=lambda r: r["offset"])
    for bad in (["sq-bad:0:99:1"], ["nonsense"], [a["id"], "sq-bad:0:99:1"]):
        r = c.ack(bad)
        assert r.status_code == 409, r.text
        assert r.json() == {"error_code": 40903, "message": r.json()["message"]}
        assert r.json()["message"].startswith("INVALID_RECORD_STATE"), r.text
    # a was not acknowledged by the refused request above: it can still be.
    assert c.ack([a["id"]]).status_code == 200
    r = http.post(c.base + "/acknowledgements",
                  json={"acknowledgements": [{"id": b["id"], "type": "maybe"}]})
    assert r.status_code == 422
    time.sleep(1.5 + 0.3)  # b's lock passes
    r = c.ack([b["id"]])
    assert r.status_code == 409 and "lock expired" in r.json()["message"], r.text
    (again,) = c.drain(1)
    assert (again["offset"], again["delivery_count"]) == (b["offset"], 2)
    assert c.ack([again["id"]]).status_code == 200
    missing = http.post("/share-groups/rest-bad/instances/nobody/acknowledgements",
                        json={"acknowledgements": [{"id": a["id"]}]})
    assert missing.status_code == 404 and missing.json()["error_code"] == 40403
    unknown = http.post("/share-groups/rest-bad", json={"topics": ["no-such-topic"]})
    assert unknown.status_code == 404, unknown.text
    c.close()


def test_two_rest_callers_split_the_records(gw: GrpcProc, http: httpx.Client) -> None:
    setup(gw.bootstrap, "sq-split", 3, "rest-split")
    one, two = (RestShare(http, "rest-split", ["sq-split"]) for _ in range(2))
    # Both are members (and have polled) before anything is produced.
    for c in (one, two):
        assert c.poll(timeout_ms=1500) == []
    values = produce(gw.bootstrap, "sq-split", 60, 3)
    seen: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
    deadline = time.monotonic() + 30
    while sum(map(len, seen.values())) < 60 and time.monotonic() < deadline:
        for i, c in enumerate((one, two)):
            batch = c.poll(timeout_ms=300, max_records=5)
            if batch:
                assert c.ack([r["id"] for r in batch]).status_code == 200
                seen[i] += batch
    every = seen[0] + seen[1]
    assert sorted(value(r) for r in every) == sorted(values)  # each once, none twice
    assert seen[0] and seen[1], {i: len(s) for i, s in seen.items()}
    assert {r["delivery_count"] for r in every} == {1}
    one.close()
    two.close()


def test_closing_an_instance_releases_what_it_holds(gw: GrpcProc, http: httpx.Client) -> None:
    """DELETE closes the share sessions: the records it held go to the next member at
    once (with delivery count 2), not after their 30 s lock."""
    setup(gw.bootstrap, "sq-close", 1, "rest-close", 5,
          share_record_lock_duration_ms="30000")
    first = RestShare(http, "rest-close", ["sq-close"])
    assert len(first.drain(5)) == 5
    first.close()
    second = RestShare(http, "rest-close", ["sq-close"])
    t0 = time.monotonic()
    back = second.drain(5, timeout_s=15)
    assert time.monotonic() - t0 < 15
    assert {r["delivery_count"] for r in back} == {2}
    assert second.ack([r["id"] for r in back]).status_code == 200
    second.close()


def test_idle_instances_expire_and_release(gw: GrpcProc, tmp_path: Any) -> None:
    setup(gw.bootstrap, "sq-idle", 1, "rest-idle", 3, share_record_lock_duration_ms="30000")
    standalone = start_standalone(tmp_path / "gw", gw.bootstrap, "--consumer-timeout", "2")
    try:
        with httpx.Client(base_url=standalone.url, timeout=30) as h:
            idle = RestShare(h, "rest-idle", ["sq-idle"])
            assert len(idle.drain(3)) == 3
            deadline = time.monotonic() + 15
            while h.get(idle.base + "/records", params={"timeout": 0}).status_code != 404:
                assert time.monotonic() < deadline, "the idle share instance never expired"
                time.sleep(3)  # longer than the timeout: the GET above touches it
            other = RestShare(h, "rest-idle", ["sq-idle"])
            back = other.drain(3, timeout_s=15)  # released by the expiry, not the 30 s lock
            assert {r["delivery_count"] for r in back} == {2}
    finally:
        standalone.stop()  # SIGTERM: closes `other`'s share sessions on the way out
    with httpx.Client(base_url=gw.url, timeout=30) as h:
        last = RestShare(h, "rest-idle", ["sq-idle"])
        again = last.drain(3, timeout_s=15)  # released by the gateway's stop, not the lock
        assert {r["delivery_count"] for r in again} == {3}
        assert last.ack([r["id"] for r in again]).status_code == 200
        last.close()


# ------------------------------------------------------------------ WebSocket


def test_websocket_share_subscribe_and_acks(gw: GrpcProc) -> None:
    setup(gw.bootstrap, "sq-ws", 2, "ws-q", 10)
    url = gw.url.replace("http://", "ws://") + "/ws"

    async def scenario() -> None:
        async with connect(url) as ws:
            early: list[dict[str, Any]] = []  # messages pushed while waiting for an answer

            async def recv(kind: str) -> dict[str, Any]:
                if kind == "share_message" and early:
                    return early.pop(0)
                while True:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    if msg["type"] == kind:
                        return msg
                    assert msg["type"] == "share_message", msg
                    early.append(msg)

            await ws.send(json.dumps({"type": "share_ack", "ids": ["x"]}))
            assert "share_subscribe first" in (await recv("error"))["message"]
            await ws.send(json.dumps({"type": "share_subscribe", "group_id": "ws-q",
                                      "topics": ["sq-ws"]}))
            assert (await recv("share_subscribed"))["topics"] == ["sq-ws"]
            got = [await recv("share_message") for _ in range(10)]
            assert sorted(m["value"] for m in got) == sorted(f"v{i}" for i in range(10))
            assert {m["delivery_count"] for m in got} == {1}
            release, reject, accept = got[:3], got[3:5], got[5:]
            for part, kind in ((release, "release"), (reject, "reject"), (accept, "accept")):
                await ws.send(json.dumps({"type": "share_ack", "ids": [m["id"] for m in part],
                                          "ack": kind}))
                acked = await recv("share_acked")
                assert acked == {"type": "share_acked", "ids": [m["id"] for m in part],
                                 "ack": kind}
            back = [await recv("share_message") for _ in range(3)]
            assert sorted(m["offset"] for m in back) == sorted(m["offset"] for m in release)
            assert {m["delivery_count"] for m in back} == {2}
            await ws.send(json.dumps({"type": "share_ack", "ids": [m["id"] for m in back]}))
            await recv("share_acked")
            await ws.send(json.dumps({"type": "share_ack", "ids": [accept[0]["id"]]}))
            err = await recv("error")
            assert err["error"] == "INVALID_RECORD_STATE" and err["ids"] == [accept[0]["id"]]
            # Nothing else comes: rejected records are archived.
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(recv("share_message"), LOCK_MS / 1000 + 1.5)

    asyncio.run(scenario())


# ------------------------------------------------------------------ gRPC


def test_grpc_share_consume_and_acknowledge(gw: GrpcProc) -> None:
    setup(gw.bootstrap, "sq-grpc", 2, "grpc-q", 10)
    stub = gw.stub()
    stream = stub.ShareConsume(pb.ShareConsumeRequest(group_id="grpc-q", topics=["sq-grpc"],
                                                      max_in_flight=100))
    records: list[pb.SharedRecord] = []
    lock = threading.Condition()

    def read() -> None:
        try:
            for resp in stream:
                with lock:
                    records.extend(resp.records)
                    lock.notify_all()
        except grpc.RpcError:
            pass

    first = next(stream)
    assert first.session_id and not first.records
    sid = first.session_id
    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def take(n: int, timeout: float = 30) -> list[pb.SharedRecord]:
        with lock:
            assert lock.wait_for(lambda: len(records) >= n, timeout), records
            out = records[:n]
            del records[:n]
            return out

    try:
        got = take(10)
        assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(10))
        assert all(r.delivery_count == 1 and r.lock_deadline_ms > 0 for r in got)
        release, reject, accept = got[:3], got[3:5], got[5:]
        for part, kind in ((release, pb.ACKNOWLEDGE_TYPE_RELEASE),
                           (reject, pb.ACKNOWLEDGE_TYPE_REJECT),
                           (accept, pb.ACKNOWLEDGE_TYPE_ACCEPT)):
            resp = stub.Acknowledge(pb.AcknowledgeRequest(session_id=sid, acknowledgements=[
                pb.Acknowledgement(id=r.id, type=kind) for r in part]))
            assert [a.id for a in resp.acknowledgements] == [r.id for r in part]
        back = take(3)
        assert sorted(r.offset for r in back) == sorted(r.offset for r in release)
        assert {r.delivery_count for r in back} == {2}
        stub.Acknowledge(pb.AcknowledgeRequest(session_id=sid, acknowledgements=[
            pb.Acknowledgement(id=r.id) for r in back]))
        with pytest.raises(grpc.RpcError) as e:
            stub.Acknowledge(pb.AcknowledgeRequest(session_id=sid, acknowledgements=[
                pb.Acknowledgement(id=accept[0].id)]))
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert e.value.details().startswith("INVALID_RECORD_STATE")
        with pytest.raises(grpc.RpcError) as e:
            stub.Acknowledge(pb.AcknowledgeRequest(session_id="nope", acknowledgements=[
                pb.Acknowledgement(id=accept[0].id)]))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        time.sleep(LOCK_MS / 1000 + 1.5)
        with lock:
            assert records == []  # nothing redelivered: rejected ones are archived
    finally:
        stream.cancel()
        reader.join(10)
    with pytest.raises(grpc.RpcError) as e:
        next(iter(stub.ShareConsume(pb.ShareConsumeRequest(group_id="", topics=["sq-grpc"]))))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_websocket_acquires_only_what_the_client_can_hold(gw: GrpcProc) -> None:
    """max_in_flight=3: three records are pushed, then nothing until some are
    acknowledged (well within their lock), then the next ones."""
    setup(gw.bootstrap, "sq-ws-flow", 1, "ws-flow", 10)
    url = gw.url.replace("http://", "ws://") + "/ws"

    async def scenario() -> None:
        async with connect(url) as ws:
            async def recv(timeout: float = 30) -> dict[str, Any]:
                msg = json.loads(await asyncio.wait_for(ws.recv(), timeout))
                assert msg["type"] in ("share_subscribed", "share_message", "share_acked"), msg
                return msg

            await ws.send(json.dumps({"type": "share_subscribe", "group_id": "ws-flow",
                                      "topics": ["sq-ws-flow"], "max_in_flight": 3}))
            assert (await recv())["type"] == "share_subscribed"
            first = [await recv() for _ in range(3)]
            assert [m["offset"] for m in first] == [0, 1, 2]
            with pytest.raises(TimeoutError):
                await recv(timeout=1.0)  # the lock is 3 s: nothing expired yet
            await ws.send(json.dumps({"type": "share_ack", "ids": [first[0]["id"]]}))
            assert (await recv())["type"] == "share_acked"
            nxt = await recv()
            assert (nxt["type"], nxt["offset"]) == ("share_message", 3)
            with pytest.raises(TimeoutError):
                await recv(timeout=0.5)

    asyncio.run(scenario())


def test_grpc_cancelled_stream_releases_what_it_held(gw: GrpcProc) -> None:
    """Cancelling a ShareConsume stream closes its share sessions: the records it held
    unacknowledged go to the next stream at once (delivery count 2), not after the
    group's 30 s lock."""
    setup(gw.bootstrap, "sq-grpc-cancel", 1, "grpc-cancel", 3,
          share_record_lock_duration_ms="30000")
    stub = gw.stub()

    def take(n: int) -> tuple[Any, list[pb.SharedRecord]]:
        stream = stub.ShareConsume(pb.ShareConsumeRequest(group_id="grpc-cancel",
                                                          topics=["sq-grpc-cancel"]),
                                   timeout=20)
        got: list[pb.SharedRecord] = []
        for resp in stream:
            got += resp.records
            if len(got) >= n:
                break
        return stream, got

    first, held = take(3)
    assert {r.delivery_count for r in held} == {1}
    first.cancel()
    t0 = time.monotonic()
    second, again = take(3)
    assert time.monotonic() - t0 < 15
    assert sorted(r.offset for r in again) == [0, 1, 2]
    assert {r.delivery_count for r in again} == {2}
    second.cancel()


# ------------------------------------------------------------------ a cluster


def test_rest_share_consumer_across_three_leaders(
        cluster_factory: Any, tmp_path: Any) -> None:  # noqa: F811 (the fixture above)
    """Three partitions led by three brokers: one REST instance holds a share session on
    each leader, acknowledgements go to the leader that acquired the record, and
    released records come back from each of them."""
    c = cluster_factory(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("sq-3", 3, replica_assignment=[[1], [2], [3]])])[
        "sq-3"].result(20)
    res = ConfigResource(ResourceType.GROUP, "three", incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)
    values = produce(c.bootstrap, "sq-3", 30, 3)
    standalone = start_standalone(tmp_path / "gw", c.bootstrap)
    try:
        with httpx.Client(base_url=standalone.url, timeout=30) as h:
            q = RestShare(h, "three", ["sq-3"])
            got = q.drain(30)
            assert sorted(value(r) for r in got) == sorted(values)
            release = [min((r for r in got if r["partition"] == p), key=lambda r: r["offset"])
                       for p in range(3)]
            rest = [r for r in got if r not in release]
            assert q.ack([r["id"] for r in release], "release").status_code == 200
            assert q.ack([r["id"] for r in rest]).status_code == 200
            back = q.drain(3)
            assert sorted((r["partition"], r["offset"], r["delivery_count"]) for r in back) == [
                (r["partition"], r["offset"], 2) for r in release]
            assert q.ack([r["id"] for r in back]).status_code == 200
            assert quiet(q, 2.0) == []
            q.close()
    finally:
        standalone.stop()


# ------------------------------------------------------------------ callers


def test_a_callers_core_holding_queue_sessions_is_not_closed_as_idle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A per-user core (`--http-auth basic`, `--grpc-auth`) whose only sessions are
    queue sessions (a long ShareConsume stream, a REST share instance) is kept by the
    callers' idle reaper, as one with consumer sessions is. The SASL login is replaced
    by a function that accepts (the pool alone is tested here, as in test_callers)."""
    from yak.gateway.core import GatewayCore
    from yak.gateway.core import callers as callers_mod
    from yak.gateway.core.callers import Callers, UserLogin
    from yak.gateway.settings import GatewaySettings
    from yak.security.client import ClientSecurity

    async def accept(bootstrap: str, security: ClientSecurity, timeout_s: float) -> None:
        return None

    monkeypatch.setattr(callers_mod, "sasl_login", accept)

    async def run() -> None:
        c = Callers(GatewayCore(GatewaySettings(bootstrap="127.0.0.1:1")),
                    UserLogin("127.0.0.1:1", ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-512"),
                              verify_interval_s=60.0), idle_s=10)
        alice = await c.login("alice", "a")
        bob = await c.login("bob", "b")
        alice.core.share_sessions.streams["s"] = object()  # type: ignore[assignment]
        bob.core.share_sessions.instances[("g", "i")] = object()  # type: ignore[assignment]
        assert await c.reap(now=callers_mod.time.monotonic() + 11) == 0
        alice.core.share_sessions.streams.clear()
        bob.core.share_sessions.instances.clear()
        assert await c.reap(now=callers_mod.time.monotonic() + 11) == 2
        await c.close()

    asyncio.run(run())
