"""WebSocket streaming at `/ws`: subscribe, receive pushed messages, ack, produce.

Client -> server (JSON text frames):
  {"type": "subscribe", "topics": [...], "group_id": "g" | null, "offset_reset": "earliest"}
  {"type": "ack", "topic": t, "partition": p, "offset": o}   commits o + 1 for the group
  {"type": "produce", "id": any, "topic": t, "key": s, "value": s, "partition": p,
   "headers": {k: s}}                                          answered with "produced"
Server -> client:
  {"type": "message", "topic", "partition", "offset", "key", "value", "headers",
   "timestamp"}  (key/value as UTF-8 text, or base64 with "encoding": "base64")
  {"type": "subscribed" | "acked" | "produced" | "error", ...}
Queues (share groups): "share_subscribe", "share_ack" (see `ws_share.py`).

A thin adapter over the gateway core: a subscription is a core stream session, records
are shown with the core's text/base64 helpers, produces go through the core's produce.

Back-pressure: one pump task per socket fetches a bounded batch, then awaits each send.
uvicorn's send blocks while the socket's write buffer is above its high-water mark, so
a client that stops reading stops the pump, which stops fetching: memory per socket is
bounded by one batch plus aiokafka's per-partition prefetch (capped below), whatever
the topic holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from prometheus_client import Counter, Gauge

from yak.gateway.cluster import ClusterError
from yak.gateway.core import GatewayCore, GatewayError, OutRecord, Reason
from yak.gateway.core.formats import from_text, text_or_b64
from yak.gateway.core.sessions import ConsumerSession
from yak.gateway.http_auth import caller_core
from yak.gateway.metrics import GATEWAY_REGISTRY
from yak.gateway.ws_share import ShareStream

log = logging.getLogger(__name__)

router = APIRouter()

BATCH_RECORDS = 100
MAX_FRAME_BYTES = 1024 * 1024
MAX_IN_FLIGHT = 1000  # produces per socket awaiting their ack

WS_SOCKETS = Gauge("yak_gateway_websockets", "Open WebSocket connections.",
                   registry=GATEWAY_REGISTRY)
WS_SENT = Counter("yak_gateway_websocket_messages_sent",
                  "Kafka records pushed to WebSocket clients.", registry=GATEWAY_REGISTRY)


def message_frame(r: ConsumerRecord, force_b64: bool = False) -> dict[str, Any]:
    key, kb64 = text_or_b64(r.key, force_b64)
    value, vb64 = text_or_b64(r.value, force_b64)
    frame: dict[str, Any] = {
        "type": "message", "topic": r.topic, "partition": r.partition, "offset": r.offset,
        "key": key, "value": value,
        "headers": {k: text_or_b64(v, force_b64)[0] for k, v in (r.headers or ())},
        "timestamp": r.timestamp,
    }
    if kb64 or vb64:
        frame["encoding"] = "base64"
    return frame


class Session:
    """One WebSocket: at most one subscription (a core stream session) and its pump."""

    def __init__(self, ws: WebSocket, core: GatewayCore) -> None:
        self.ws = ws
        self.core = core
        self.consumer: ConsumerSession | None = None
        self.group_id: str | None = None
        self.pump: asyncio.Task[None] | None = None
        self.send_lock = asyncio.Lock()
        self.force_b64 = False
        self.in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.order = asyncio.Lock()
        self.tasks: set[asyncio.Task[None]] = set()
        self.share: ShareStream | None = None  # a share-group subscription (queues)

    def produce_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.in_flight.release()
        if not task.cancelled() and task.exception() is not None:
            log.info("websocket produce failed: %r", task.exception())

    async def send(self, obj: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.ws.send_text(json.dumps(obj, separators=(",", ":")))

    async def error(self, message: str, **extra: Any) -> None:
        await self.send({"type": "error", "message": message, **extra})

    async def subscribe(self, msg: dict[str, Any]) -> None:
        topics = msg.get("topics")
        if not isinstance(topics, list) or not topics or not all(
            isinstance(t, str) and t for t in topics
        ):
            await self.error("subscribe needs a non-empty list of topic names in 'topics'")
            return
        reset = msg.get("offset_reset", "latest")
        if reset not in ("earliest", "latest"):
            await self.error("offset_reset must be 'earliest' or 'latest'")
            return
        group = msg.get("group_id")
        if group is not None and (not isinstance(group, str) or not group):
            await self.error("group_id must be a non-empty string or null")
            return
        known = await self.core.list_topics(internal=True)
        missing = [t for t in topics if t not in known]
        if missing:
            await self.error(f"unknown topic(s): {', '.join(missing)}", topics=missing)
            return
        await self.stop_consumer()
        self.force_b64 = msg.get("encoding") == "base64"
        self.consumer = await self.core.sessions.open_stream(
            group, topics, reset, auto_commit=False, client_id="yak-ws")
        self.group_id = group
        self.pump = asyncio.get_running_loop().create_task(self._pump(self.consumer))
        await self.send({"type": "subscribed", "topics": topics, "group_id": group})

    async def _pump(self, consumer: ConsumerSession) -> None:
        try:
            async for batch in consumer.stream(BATCH_RECORDS):
                for r in batch:
                    await self.send(message_frame(r, self.force_b64))
                    WS_SENT.inc()
        except (WebSocketDisconnect, asyncio.CancelledError):
            pass
        except Exception as e:
            log.info("websocket pump stopped: %r", e)
            with contextlib.suppress(Exception):
                await self.error(f"consumer stopped: {e}")

    async def ack(self, msg: dict[str, Any]) -> None:
        if self.consumer is None or self.group_id is None:
            await self.error("ack needs a subscription with a group_id")
            return
        try:
            tp = TopicPartition(str(msg["topic"]), int(msg["partition"]))
            offset = int(msg["offset"])
        except (KeyError, TypeError, ValueError):
            await self.error("ack needs topic, partition and offset")
            return
        if offset < 0:
            await self.error("offset must be >= 0")
            return
        try:
            await self.consumer.commit({tp: offset + 1})
        except GatewayError as e:
            await self.error(e.message, topic=tp.topic, partition=tp.partition, offset=offset)
            return
        await self.send({"type": "acked", "topic": tp.topic, "partition": tp.partition,
                         "offset": offset})

    async def produce(self, msg: dict[str, Any]) -> None:
        req_id = msg.get("id")
        topic = msg.get("topic")
        if not isinstance(topic, str) or not topic:
            await self.error("produce needs a topic", id=req_id)
            return
        try:
            value = from_text(msg.get("value"))
            key = from_text(msg.get("key"))
            headers = [(str(k), from_text(v) or b"")
                       for k, v in (msg.get("headers") or {}).items()]
            partition = msg.get("partition")
            if partition is not None and (not isinstance(partition, int) or partition < 0):
                raise ValueError("partition must be a non-negative integer")
        except (ValueError, AttributeError, TypeError) as e:
            await self.error(f"bad produce: {e}", id=req_id)
            return
        try:
            # Checked and handed to the producer under a FIFO lock, so one socket's
            # produces are appended in the order they arrived even though they overlap.
            async with self.order:
                meta = await self.core.topic(topic)
                pending = self.core.send(meta, [OutRecord(key, value, partition, headers)])
            (res,) = await pending.results()
        except GatewayError as e:
            if e.reason is Reason.TOPIC_NOT_FOUND:
                await self.error(f"unknown topic: {topic}", id=req_id)
            elif e.reason is Reason.PARTITION_NOT_FOUND:
                await self.error(f"unknown partition: {topic}-{partition}", id=req_id)
            else:
                await self.error(f"produce failed: {e.message}", id=req_id)
            return
        if res.error is not None:
            await self.error(f"produce failed: {res.error.message}", id=req_id)
            return
        await self.send({"type": "produced", "id": req_id, "topic": topic,
                         "partition": res.partition, "offset": res.offset,
                         "timestamp": res.timestamp_ms})

    async def share_subscribe(self, msg: dict[str, Any]) -> None:
        if self.share is not None:
            await self.share.close()
            self.share = None
        self.share = await ShareStream.open(self.core, msg, self.send,
                                            lambda extra: self.error(**extra))

    async def share_ack(self, msg: dict[str, Any]) -> None:
        if self.share is None:
            await self.error("share_ack needs a share_subscribe first")
            return
        await self.share.ack(msg, lambda extra: self.error(**extra))

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await self.stop_consumer()
        if self.share is not None:
            await self.share.close()
            self.share = None

    async def stop_consumer(self) -> None:
        if self.pump is not None:
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.pump
            self.pump = None
        if self.consumer is not None:
            await self.core.sessions.close_stream(self.consumer)
            self.consumer = None


@router.websocket("/ws")
async def websocket(ws: WebSocket) -> None:
    core: GatewayCore = caller_core(ws)  # the caller's own Kafka clients (http_auth)
    await ws.accept()
    WS_SOCKETS.inc()
    session = Session(ws, core)
    try:
        while True:
            text = await ws.receive_text()
            if len(text) > MAX_FRAME_BYTES:
                await session.error(f"frame larger than {MAX_FRAME_BYTES} bytes")
                continue
            try:
                msg = json.loads(text)
            except ValueError:
                await session.error("invalid JSON")
                continue
            if not isinstance(msg, dict):
                await session.error("a message must be a JSON object with a 'type'")
                continue
            kind = msg.get("type")
            try:
                if kind == "subscribe":
                    await session.subscribe(msg)
                elif kind == "ack":
                    await session.ack(msg)
                elif kind == "share_subscribe":
                    await session.share_subscribe(msg)
                elif kind == "share_ack":
                    await session.share_ack(msg)
                elif kind == "produce":
                    # Produces overlap (librdkafka batches them) and are handed to the
                    # producer in arrival order; at most MAX_IN_FLIGHT wait for their
                    # acks, then this loop stops reading and TCP pushes back the client.
                    await session.in_flight.acquire()
                    task = asyncio.get_running_loop().create_task(session.produce(msg))
                    session.tasks.add(task)
                    task.add_done_callback(session.produce_done)
                else:
                    await session.error(f"unknown message type {kind!r}")
            except GatewayError as e:
                await session.error(f"cluster error: {e.message}")
            except ClusterError as e:
                await session.error(f"cluster error: {e.message}")
            except TimeoutError:
                await session.error("timed out talking to the cluster")
    except WebSocketDisconnect:
        pass
    finally:
        WS_SOCKETS.dec()
        await session.close()
