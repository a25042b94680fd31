"""Queues over REST: share-group consumption at `/share-groups/{group}/...`.

Shaped like the REST Proxy's consumer instances (`rest.py`): create an instance (which
joins the share group, subscribed to `topics`), long-poll its `records`, then
acknowledge records by id, and DELETE it (its share sessions close, so every record it
still holds is released for redelivery). Instances idle for the consumer instance
timeout are closed.

Each record carries its `id` (`topic:partition:offset:delivery_count`), `delivery_count`
and `lock_deadline_ms` (wall-clock ms until which it is locked for this instance).
Acknowledging an id not held (unknown, already acknowledged, lock expired) is 409 with
error code 40903 and a message starting with Kafka's INVALID_RECORD_STATE; nothing of
that request is sent. A record the instance's format cannot decode (a non-JSON value
for `json`) is released, so it comes back with a higher delivery count until the group's
delivery limit archives it (or sends it to the group's dead-letter topic).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, Request, Response
from pydantic import BaseModel, Field

from yak.gateway import errors as E
from yak.gateway.cluster.share_member import ShareRecord
from yak.gateway.core import GatewayCore
from yak.gateway.core.formats import b64, decode_records
from yak.gateway.core.share_sessions import ShareSession, check_acks
from yak.gateway.errors import ErrorBody, RestError, V2Response
from yak.gateway.http_auth import caller_core

router = APIRouter(default_response_class=V2Response, tags=["Queues (share groups)"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorBody} for s in (400, 401, 403, 404, 406, 409, 422, 500, 503)
}
MAX_LONG_POLL_MS = 60_000
MAX_ACKS = 10_000


class CreateShareConsumer(BaseModel):
    name: str | None = Field(default=None, min_length=1, max_length=200,
                             pattern=r"^[A-Za-z0-9._-]+$")
    format: Literal["binary", "json"] = "binary"
    topics: list[Annotated[str, Field(min_length=1, max_length=249,
                                      pattern=r"^[A-Za-z0-9._-]+$")]] = Field(
        min_length=1, max_length=1000)


class CreatedShareConsumer(BaseModel):
    instance_id: str
    base_uri: str


class ShareRecordOut(BaseModel):
    id: str
    topic: str
    partition: int
    offset: int
    delivery_count: int
    lock_deadline_ms: int
    key: Any = None
    value: Any = None
    timestamp: int | None = None
    headers: dict[str, str] | None = None


class Acknowledgement(BaseModel):
    id: str = Field(min_length=1, max_length=400)
    type: Literal["accept", "release", "reject"] = "accept"


class Acknowledgements(BaseModel):
    acknowledgements: list[Acknowledgement] = Field(min_length=1, max_length=MAX_ACKS)


def _core(request: Request) -> GatewayCore:
    return caller_core(request)


def _instance(request: Request, group: str, instance: str) -> ShareSession:
    return _core(request).share_sessions.get(group, instance)


@router.post("/share-groups/{group}", response_model=CreatedShareConsumer,
             responses=_ERRORS)
async def create_share_consumer(request: Request, group: str,
                                body: Annotated[CreateShareConsumer, Body()]) -> Any:
    registry = _core(request).share_sessions
    session = await registry.create(group, body.name, body.topics, body.format)
    base = str(request.base_url).rstrip("/")
    return CreatedShareConsumer(
        instance_id=session.id, base_uri=f"{base}/share-groups/{group}/instances/{session.id}")


@router.delete("/share-groups/{group}/instances/{instance}", status_code=204,
               response_class=Response, responses=_ERRORS)
async def delete_share_consumer(request: Request, group: str, instance: str) -> Response:
    await _core(request).share_sessions.delete(group, instance)
    return Response(status_code=204)


@router.get("/share-groups/{group}/instances/{instance}/records",
            response_model=list[ShareRecordOut], responses=_ERRORS)
async def share_records(
    request: Request, group: str, instance: str,
    timeout: Annotated[int | None, Query(ge=0, le=MAX_LONG_POLL_MS)] = None,
    max_records: Annotated[int | None, Query(ge=1, le=10_000)] = None,
) -> Any:
    core = _core(request)
    session = _instance(request, group, instance)
    accept = request.headers.get("accept", "*/*").lower()
    wanted = re.findall(r"application/vnd\.kafka\.(\w+)\.v2\+json", accept)
    if wanted and session.format not in wanted:
        raise RestError(406, E.CONSUMER_FORMAT_MISMATCH,
                        "The requested embedded data format does not match the deserializer "
                        "for this share consumer instance")
    recs = await session.poll(max_records or 500, 1000 if timeout is None else timeout)
    out = await _decoded(core, session, recs)
    return V2Response(out, media_type=f"application/vnd.kafka.{session.format}.v2+json")


async def _decoded(core: GatewayCore, session: ShareSession,
                   recs: list[ShareRecord]) -> list[dict[str, Any]]:
    """The records in the session's format; one that cannot be decoded is released."""
    fmt = core.formats.get(session.format)
    out: list[dict[str, Any]] = []
    bad: list[str] = []
    while recs:
        decoded = await decode_records(fmt, recs)
        good = recs if decoded.error is None else recs[:decoded.error.index]
        out.extend({
            "id": r.id, "topic": r.topic, "partition": r.partition, "offset": r.offset,
            "delivery_count": r.delivery_count, "lock_deadline_ms": r.lock_deadline_ms,
            "timestamp": r.timestamp, "key": key, "value": value,
            "headers": {k: b64(v or b"") for k, v in r.headers} if r.headers else None,
        } for r, key, value in zip(good, decoded.keys, decoded.values, strict=False))
        if decoded.error is None:
            break
        bad.append(recs[decoded.error.index].id)
        recs = recs[decoded.error.index + 1:]
    if bad:
        await session.acknowledge([(rid, "release") for rid in bad])
    return out


@router.post("/share-groups/{group}/instances/{instance}/acknowledgements",
             responses=_ERRORS)
async def acknowledge(request: Request, group: str, instance: str,
                      body: Acknowledgements) -> Any:
    session = _instance(request, group, instance)
    results = check_acks(await session.acknowledge(
        [(a.id, a.type) for a in body.acknowledgements]))
    return {"acknowledgements": [{"id": r.id, "type": r.type} for r in results]}
