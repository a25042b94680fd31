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

Back-pressure: one pump task per socket fetches a bounded batch, then awaits each send.
uvicorn's send blocks while the socket's write buffer is above its high-water mark, so
a client that stops reading stops the pump, which stops fetching: memory per socket is
bounded by one batch plus aiokafka's per-partition prefetch (capped below), whatever
the topic holds.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata
from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from prometheus_client import Counter, Gauge

from yak.gateway.cluster import ClusterError
from yak.gateway.metrics import GATEWAY_REGISTRY

log = logging.getLogger(__name__)

router = APIRouter()

BATCH_RECORDS = 100
PREFETCH_BYTES_PER_PARTITION = 256 * 1024
MAX_FRAME_BYTES = 1024 * 1024
MAX_IN_FLIGHT = 1000  # produces per socket awaiting their ack

WS_SOCKETS = Gauge("yak_gateway_websockets", "Open WebSocket connections.",
                   registry=GATEWAY_REGISTRY)
WS_SENT = Counter("yak_gateway_websocket_messages_sent",
                  "Kafka records pushed to WebSocket clients.", registry=GATEWAY_REGISTRY)


def _text_or_b64(data: bytes | None, force_b64: bool) -> tuple[str | None, str]:
    if data is None:
        return None, "text"
    if not force_b64:
        try:
            return data.decode("utf-8"), "text"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(data).decode(), "base64"


def message_frame(r: ConsumerRecord, force_b64: bool = False) -> dict[str, Any]:
    key, kenc = _text_or_b64(r.key, force_b64)
    value, venc = _text_or_b64(r.value, force_b64)
    frame: dict[str, Any] = {
        "type": "message", "topic": r.topic, "partition": r.partition, "offset": r.offset,
        "key": key, "value": value,
        "headers": {k: _text_or_b64(v, force_b64)[0] for k, v in (r.headers or ())},
        "timestamp": r.timestamp,
    }
    if "base64" in (kenc, venc):
        frame["encoding"] = "base64"
    return frame


class Session:
    """One WebSocket: at most one subscription (a consumer) and its pump task."""

    def __init__(self, ws: WebSocket, bootstrap: str, cluster: Any) -> None:
        self.ws = ws
        self.bootstrap = bootstrap
        self.cluster = cluster
        self.consumer: AIOKafkaConsumer | None = None
        self.group_id: str | None = None
        self.pump: asyncio.Task[None] | None = None
        self.send_lock = asyncio.Lock()
        self.force_b64 = False
        self.in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.order = asyncio.Lock()
        self.tasks: set[asyncio.Task[None]] = set()

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
        md = await self.cluster.metadata()
        missing = [t for t in topics if t not in md.topics]
        if missing:
            await self.error(f"unknown topic(s): {', '.join(missing)}", topics=missing)
            return
        await self.stop_consumer()
        self.force_b64 = msg.get("encoding") == "base64"
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=group,
            client_id="yak-ws",
            enable_auto_commit=False,
            auto_offset_reset=reset,
            max_partition_fetch_bytes=PREFETCH_BYTES_PER_PARTITION,
            fetch_max_bytes=4 * PREFETCH_BYTES_PER_PARTITION,
            fetch_max_wait_ms=500,
            metadata_max_age_ms=5_000,
        )
        await asyncio.wait_for(consumer.start(), 15)
        consumer.subscribe(topics=topics)
        self.consumer = consumer
        self.group_id = group
        self.pump = asyncio.get_running_loop().create_task(self._pump(consumer))
        await self.send({"type": "subscribed", "topics": topics, "group_id": group})

    async def _pump(self, consumer: AIOKafkaConsumer) -> None:
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=1000, max_records=BATCH_RECORDS)
                for tp in sorted(batch, key=lambda tp: (tp.topic, tp.partition)):
                    for r in batch[tp]:
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
            await self.consumer.commit({tp: OffsetAndMetadata(offset + 1, "")})
        except Exception as e:
            await self.error(f"commit failed: {e!r}", topic=tp.topic, partition=tp.partition,
                             offset=offset)
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
            value = _bytes_of(msg.get("value"))
            key = _bytes_of(msg.get("key"))
            headers = [(str(k), _bytes_of(v) or b"") for k, v in (msg.get("headers") or {}).items()]
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
                tm = await self.cluster.topic(topic)
                if tm is None:
                    await self.error(f"unknown topic: {topic}", id=req_id)
                    return
                if partition is not None and partition not in tm.partitions:
                    await self.error(f"unknown partition: {topic}-{partition}", id=req_id)
                    return
                fut = self.cluster.produce_nowait(topic, value, key, partition, headers)
            res = await self.cluster.delivery(fut)
        except ClusterError as e:
            await self.error(f"produce failed: {e.message}", id=req_id)
            return
        await self.send({"type": "produced", "id": req_id, "topic": res.topic,
                         "partition": res.partition, "offset": res.offset,
                         "timestamp": res.timestamp})

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await self.stop_consumer()

    async def stop_consumer(self) -> None:
        if self.pump is not None:
            self.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.pump
            self.pump = None
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.consumer.stop(), 10)
            self.consumer = None


def _bytes_of(v: Any) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode()
    return json.dumps(v, separators=(",", ":")).encode()


@router.websocket("/ws")
async def websocket(ws: WebSocket) -> None:
    gw = ws.app.state.gateway
    await ws.accept()
    WS_SOCKETS.inc()
    session = Session(ws, gw.bootstrap, gw.cluster)
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
            except ClusterError as e:
                await session.error(f"cluster error: {e.message}")
            except TimeoutError:
                await session.error("timed out talking to the cluster")
    except WebSocketDisconnect:
        pass
    finally:
        WS_SOCKETS.dec()
        await session.close()
