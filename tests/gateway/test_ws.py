"""WebSocket streaming at /ws: subscribe, pushed messages, ack (commit), produce, back-pressure."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from websockets.asyncio.client import ClientConnection, connect

from tests.waiting import await_steady


class Inbox:
    """Frames by type: a 'message' pushed before the 'produced' answer must not be lost."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.pending: list[dict[str, Any]] = []

    async def next(self, kind: str, timeout: float = 30.0) -> dict[str, Any]:
        for i, msg in enumerate(self.pending):
            if msg["type"] == kind:
                return self.pending.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no {kind!r} frame in {timeout} s (have {self.pending})"
            msg = json.loads(await asyncio.wait_for(self.ws.recv(), left))
            assert msg["type"] != "error", msg
            if msg["type"] == kind:
                return msg
            self.pending.append(msg)


def ws_url(gateway: Any) -> str:
    return gateway.url.replace("http://", "ws://") + "/ws"


def test_subscribe_receive_produce_and_ack(gateway: Any, http: httpx.Client) -> None:
    assert http.post("/api/topics", json={"name": "ws-rt", "partitions": 1}).status_code == 201
    http.post("/topics/ws-rt", json={"records": [{"key": "a", "value": {"n": 1}}]})

    async def scenario() -> None:
        async with connect(ws_url(gateway)) as ws:
            inbox = Inbox(ws)
            await ws.send(json.dumps({"type": "subscribe", "topics": ["ws-rt"],
                                      "group_id": "ws-rt-g", "offset_reset": "earliest"}))
            await inbox.next("subscribed")
            m = await inbox.next("message")
            assert (m["topic"], m["partition"], m["offset"]) == ("ws-rt", 0, 0)
            assert json.loads(m["key"]) == "a" and json.loads(m["value"]) == {"n": 1}
            assert isinstance(m["timestamp"], int) and m["headers"] == {}

            await ws.send(json.dumps({"type": "produce", "id": 7, "topic": "ws-rt",
                                      "key": "b", "value": "over ws", "headers": {"h": "v"}}))
            p = await inbox.next("produced")
            assert p["id"] == 7 and p["offset"] == 1 and p["partition"] == 0
            m2 = await inbox.next("message")
            assert (m2["offset"], m2["value"], m2["headers"]) == (1, "over ws", {"h": "v"})

            await ws.send(json.dumps({"type": "ack", "topic": "ws-rt", "partition": 0,
                                      "offset": 1}))
            a = await inbox.next("acked")
            assert a["offset"] == 1

    try:
        asyncio.run(scenario())
    except (AssertionError, TimeoutError) as e:
        state = (http.get("/api/groups/ws-rt-g").text, http.get("/api/topics/ws-rt").text[:600])
        raise AssertionError(
            f"{e!r}; group/topic: {state}; gateway log tail:\n{gateway.output()[-6000:]}"
        ) from e
    lag = http.get("/api/groups/ws-rt-g").json()["lag"]
    assert lag == [{"topic": "ws-rt", "partition": 0, "committed": 2, "high_watermark": 2,
                    "lag": 0}]


def test_bad_frames_get_error_frames_and_the_socket_survives(gateway: Any) -> None:
    async def scenario() -> None:
        async with connect(ws_url(gateway)) as ws:
            for bad, expect in [
                ("{not json", "invalid JSON"),
                ("[1, 2]", "JSON object"),
                (json.dumps({"type": "dance"}), "unknown message type"),
                (json.dumps({"type": "subscribe", "topics": []}), "non-empty list"),
                (json.dumps({"type": "subscribe", "topics": ["ws-none"]}), "unknown topic"),
                (json.dumps({"type": "produce", "topic": "ws-none", "value": "x"}),
                 "unknown topic"),
                (json.dumps({"type": "ack", "topic": "t", "partition": 0, "offset": 0}),
                 "group_id"),
            ]:
                await ws.send(bad)
                err = json.loads(await asyncio.wait_for(ws.recv(), 10))
                assert err["type"] == "error" and expect in err["message"], (bad, err)

    asyncio.run(scenario())


@pytest.mark.slow
def test_a_client_that_stops_reading_does_not_make_the_server_buffer(
    gateway: Any, http: httpx.Client
) -> None:
    """20 MiB waiting in the topic; a client that reads nothing gets only what fits in
    the socket buffers, then the pump stops; once it reads, everything arrives in order."""
    http.post("/api/topics", json={"name": "ws-slow", "partitions": 1})
    n, size = 5000, 4096
    p = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 20})
    for i in range(n):
        p.produce("ws-slow", value=f"{i:08d}".encode() + b"x" * (size - 8))
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(30) == 0

    def sent() -> float:
        text = http.get("/metrics").text
        m = re.search(r"^yak_gateway_websocket_messages_sent_total (\S+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    async def scenario() -> None:
        before = sent()
        # A small fixed receive buffer: loopback autotuning would otherwise let the
        # client's kernel swallow 32 MiB, hiding whether the server holds back.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.connect(("127.0.0.1", int(gateway.url.rsplit(":", 1)[1])))
        sock.setblocking(False)
        async with connect(ws_url(gateway), sock=sock, max_queue=4, max_size=2**20,
                           compression=None) as ws:
            await ws.send(json.dumps({"type": "subscribe", "topics": ["ws-slow"],
                                      "offset_reset": "earliest"}))
            # Read nothing; wait until the pump has sent something, then stops.
            stalled = await await_steady(lambda: sent() - before, 2.0, 30,
                                         "messages sent to a non-reader")
            print(f"pump stalled after {stalled:.0f} messages of {size} B")
            await asyncio.sleep(1.0)  # a window in which nothing more may be sent: the check
            assert sent() - before == stalled, "the pump kept sending into a full socket"
            # Bounded by socket buffers (server send buffer autotunes up to 4 MiB here),
            # far below the 20 MiB in the topic.
            assert 0 < stalled * size < 8 * 1024 * 1024, stalled
            seen = []
            while len(seen) < n:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 20))
                if msg["type"] == "message":
                    seen.append(msg["offset"])
            assert seen == list(range(n))

    asyncio.run(scenario())


def test_pipelined_produces_keep_their_order(gateway: Any, http: httpx.Client) -> None:
    http.post("/api/topics", json={"name": "ws-order", "partitions": 1})
    n = 500

    async def scenario() -> float:
        async with connect(ws_url(gateway)) as ws:
            t0 = time.monotonic()
            for i in range(n):  # no waiting between sends: up to 1000 overlap server-side
                await ws.send(json.dumps({"type": "produce", "id": i, "topic": "ws-order",
                                          "value": f"m{i}"}))
            answers = {}
            while len(answers) < n:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 30))
                assert msg["type"] == "produced", msg
                answers[msg["id"]] = msg["offset"]
            elapsed = time.monotonic() - t0
        # Offsets follow send order exactly: the i-th produce is at offset i.
        assert [answers[i] for i in range(n)] == list(range(n))
        return elapsed

    elapsed = asyncio.run(scenario())
    print(f"{n} websocket produces acked in {elapsed:.2f} s")
    msgs = http.get("/api/topics/ws-order/messages",
                    params={"offset": n - 3, "limit": 3}).json()["messages"]
    assert [m["offset"] for m in msgs] == [n - 3, n - 2, n - 1]
