"""Queues over WebSocket: a share subscription on one socket (see `ws.py`).

  -> {"type": "share_subscribe", "group_id": "g", "topics": ["t"], "max_in_flight": 100}
  <- {"type": "share_subscribed", "group_id": "g", "topics": ["t"], "session_id": ...}
  <- {"type": "share_message", "id", "topic", "partition", "offset", "delivery_count",
      "lock_deadline_ms", "key", "value", "headers", "timestamp"}
  -> {"type": "share_ack", "ids": [...], "ack": "accept" | "release" | "reject"}
  <- {"type": "share_acked", "ids": [...], "ack": ...}
  <- {"type": "error", "error": "INVALID_RECORD_STATE", "message": ..., "ids": [...]}

The pump acquires records only while fewer than `max_in_flight` (default 100, at most
10,000) pushed records are unacknowledged and still locked, and awaits each send, so a
client that stops acknowledging or reading stops the acquiring: records are never
locked for a client that cannot take them. Records whose lock passes unacknowledged go
back to the group (the broker redelivers them); closing the socket closes the share
session, which releases what it still holds at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import WebSocketDisconnect

from yak.gateway.cluster.share_member import ShareRecord
from yak.gateway.core import GatewayCore, GatewayError
from yak.gateway.core.formats import text_or_b64
from yak.gateway.core.share_sessions import ShareSession, check_acks

log = logging.getLogger(__name__)

DEFAULT_IN_FLIGHT = 100
MAX_IN_FLIGHT = 10_000
ROOM_WAIT_S = 0.05

Send = Callable[[dict[str, Any]], Awaitable[None]]


def share_frame(r: ShareRecord, force_b64: bool = False) -> dict[str, Any]:
    key, kb64 = text_or_b64(r.key, force_b64)
    value, vb64 = text_or_b64(r.value, force_b64)
    frame: dict[str, Any] = {
        "type": "share_message", "id": r.id, "topic": r.topic, "partition": r.partition,
        "offset": r.offset, "delivery_count": r.delivery_count,
        "lock_deadline_ms": r.lock_deadline_ms, "key": key, "value": value,
        "headers": {k: text_or_b64(v, force_b64)[0] for k, v in r.headers},
        "timestamp": r.timestamp,
    }
    if kb64 or vb64:
        frame["encoding"] = "base64"
    return frame


class ShareStream:
    """One socket's share subscription: its session and the pump pushing records."""

    def __init__(self, core: GatewayCore, session: ShareSession, send: Send,
                 in_flight: int, force_b64: bool) -> None:
        self.core = core
        self.session = session
        self.send = send
        self.in_flight = in_flight
        self.force_b64 = force_b64
        self.pump = asyncio.get_running_loop().create_task(self._pump())

    @classmethod
    async def open(cls, core: GatewayCore, msg: dict[str, Any], send: Send,
                   error: Send) -> ShareStream | None:
        group, topics = msg.get("group_id"), msg.get("topics")
        in_flight = msg.get("max_in_flight", DEFAULT_IN_FLIGHT)
        if not isinstance(group, str) or not group:
            await error({"message": "share_subscribe needs a non-empty 'group_id'"})
            return None
        if not isinstance(topics, list) or not topics or not all(
                isinstance(t, str) and t for t in topics):
            await error({"message": "share_subscribe needs a non-empty list of topic names "
                                    "in 'topics'"})
            return None
        if not isinstance(in_flight, int) or not 0 < in_flight <= MAX_IN_FLIGHT:
            await error({"message": f"max_in_flight must be between 1 and {MAX_IN_FLIGHT}"})
            return None
        session = await core.share_sessions.open_stream(group, topics, "yak-ws-share")
        stream = cls(core, session, send, in_flight, msg.get("encoding") == "base64")
        await send({"type": "share_subscribed", "group_id": group, "topics": session.topics,
                    "session_id": session.id})
        return stream

    async def _pump(self) -> None:
        try:
            while True:
                room = self.in_flight - self.session.outstanding()
                if room <= 0:
                    await asyncio.sleep(ROOM_WAIT_S)
                    continue
                for r in await self.session.poll(room, 1000):
                    await self.send(share_frame(r, self.force_b64))
        except (WebSocketDisconnect, asyncio.CancelledError):
            pass
        except Exception as e:
            log.info("websocket share pump stopped: %r", e)
            with contextlib.suppress(Exception):
                await self.send({"type": "error", "message": f"share consumer stopped: {e}"})

    async def ack(self, msg: dict[str, Any], error: Send) -> None:
        ids, kind = msg.get("ids"), msg.get("ack", "accept")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            await error({"message": "share_ack needs a non-empty list of record ids in 'ids'"})
            return
        try:
            check_acks(await self.session.acknowledge([(i, kind) for i in ids]))
        except GatewayError as e:
            await error({"message": e.message, "error": e.kafka_name or None, "ids": ids})
            return
        await self.send({"type": "share_acked", "ids": ids, "ack": kind})

    async def close(self) -> None:
        self.pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.pump
        await self.core.share_sessions.close_stream(self.session)
