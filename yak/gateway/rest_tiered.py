"""Presigned URLs of tiered segments (issue 25): `GET /tiered/v1/topics/{topic}/partitions/
{partition}/segments?from=&to=&expires=`, so a Spark job reads old segments straight from
the bucket without holding the store's keys (`tiered.presign`, docs/spark.md).

The answer (`yak.tiered.presign.presigned_segments`): the partition's remote log bounds and
its readable segments from the one holding `from` on (base and last offsets, size, leader
epochs, files), each with presigned GET URLs of the objects a reader of [from, to) needs
(`.log`, `.index`, `.txnindex`), valid `expires` seconds (default 900, at most 7 days, S3's
limit for SigV4 presigned URLs). `to` at or below `from` is an empty range: the segments
are listed, no `.log` is signed (not an error: each parameter is valid alone, as the
OpenAPI document says).

Who may ask: the caller must be allowed to READ the topic, as the cluster itself decides
for the caller's own Kafka login (DescribeTopics' authorized operations, as
`http_auth.HttpAuth` asks for the schema registry): a URL reads the records, so it is never
handed to a principal that Fetch would refuse. Once READ is granted, the gateway's own
clients read the topic's `remote.storage.enable` (a reader need not hold DESCRIBE_CONFIGS),
and the broker's store signs (its keys never leave the process).

Where the store comes from: the broker's own `remote.storage.*` settings, which `yak serve`
hands its embedded gateway (`GatewaySettings.tiered`), or a standalone `yak gateway`'s
`--set remote.storage.uri=...` (and keys) with the same names. A gateway with neither
answers 409 saying so.

Refusals: unknown topic or partition 404, not allowed 403 (TOPIC_AUTHORIZATION_FAILED),
topic not tiered / no store / a `file://` store (nothing to presign) 409, bad `from`/`to`/
`expires` 422, the store unreachable 503; each one line in the REST Proxy's error body.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from yak.gateway.core.callers import denied
from yak.gateway.errors import ErrorBody, RestError, V2Response
from yak.gateway.http_auth import caller_core
from yak.tiered.presign import (
    DEFAULT_EXPIRES_S,
    MAX_EXPIRES_S,
    NO_STORE,
    NOT_TIERED,
    latest_manifests,
    presigned_segments,
)
from yak.tiered.store import PresignUnsupportedError, RemoteStorageError, RemoteStore, parse_uri

router = APIRouter(default_response_class=V2Response, tags=["Tiered storage"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorBody} for s in (401, 403, 404, 409, 422, 503)
}


class SegmentOut(BaseModel):
    segment_id: str
    base_offset: int
    end_offset: int
    max_timestamp: int
    size: int
    leader_epochs: list[list[int]]
    state: str
    files: dict[str, list[int]]
    broker_id: int
    event_ms: int
    urls: dict[str, str]


class SegmentsOut(BaseModel):
    topic: str
    partition: int
    topic_id: str
    version: int
    log_start_offset: int
    start_offset: int | None
    copied_upto: int
    expires_s: int
    expires_at_ms: int
    segments: list[SegmentOut]


def _store(request: Request) -> RemoteStore:
    """The broker's store, made once per app (a `RemoteStore` is a client, not a
    connection: requests share it)."""
    state = request.app.state
    store = getattr(state, "tiered_store", None)
    if store is not None:
        return store  # type: ignore[no-any-return]
    cfg = state.gateway.settings.tiered
    if cfg is None or not cfg.uri:
        raise RestError(409, NO_STORE, "This gateway has no remote storage to presign with:"
                        " presigned URLs are handed out by the gateway of `yak serve` on a"
                        " broker with remote.storage.uri set, or by `yak gateway --set"
                        " remote.storage.uri=...`")
    uri = parse_uri(cfg.uri)
    if uri.scheme != "s3":
        raise RestError(409, NO_STORE, f"remote.storage.uri {cfg.uri} cannot be presigned:"
                        " presigned URLs need an S3 store (read a file:// remote log with"
                        " tiered.direct and its path)")
    store = RemoteStore(uri, {"access_key_id": cfg.access_key_id,
                              "secret_access_key": cfg.secret_access_key})
    state.tiered_store = store
    return store


@router.get("/tiered/v1/topics/{topic}/partitions/{partition}/segments",
            response_model=SegmentsOut, responses=_ERRORS)
async def presigned_segment_urls(
    request: Request, topic: str, partition: int,
    start: Annotated[int, Query(alias="from", ge=0)] = 0,
    end: Annotated[int | None, Query(alias="to", ge=0)] = None,
    expires: Annotated[int, Query(ge=1, le=MAX_EXPIRES_S)] = DEFAULT_EXPIRES_S,
) -> Any:
    cluster = caller_core(request).cluster
    exists, ops = await cluster.topic_access(topic)
    if not exists:
        raise RestError(404, 40401, "Topic not found.")
    if "READ" not in ops:
        raise denied("TOPIC", topic, "READ")
    meta = await cluster.topic(topic)
    if meta is None or partition not in meta.partitions:
        raise RestError(404, 40402, "Partition not found.")
    store = _store(request)
    configs = await request.app.state.gateway.core.cluster.topic_configs(topic)
    tiered = {c["name"]: c["value"] for c in configs}.get("remote.storage.enable")
    if str(tiered).lower() != "true":
        raise RestError(409, NOT_TIERED, f"Topic {topic!r} is not tiered"
                        " (remote.storage.enable=false): its records are read through the"
                        " brokers")
    try:
        found = await latest_manifests(store, [(topic, partition)])
        m = found.get((topic, partition))
        if m is None:  # tiered, nothing uploaded yet: no segments, everything is local
            return SegmentsOut(topic=topic, partition=partition, topic_id="", version=0,
                               log_start_offset=0, start_offset=None, copied_upto=0,
                               expires_s=expires, expires_at_ms=0, segments=[])
        return await presigned_segments(store, m, start, end, expires)
    except PresignUnsupportedError as e:
        raise RestError(409, NO_STORE, str(e)) from None
    except RemoteStorageError as e:
        raise RestError(503, 503, f"Remote storage unavailable: {e}") from None
