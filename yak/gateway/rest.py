"""Confluent REST Proxy API v2: topics, partitions, produce and consumer instances.

A thin adapter over the gateway core (`yak.gateway.core`): it parses and validates the
REST Proxy's JSON, calls the core, and answers with the REST Proxy's status codes.

Content negotiation follows that API: produce bodies are
`application/vnd.kafka.{json,binary}.v2+json` (plain `application/json` means json),
responses are `application/vnd.kafka.v2+json`, and a consumer's records are served
only to an `Accept` matching the format it was created with (406 otherwise).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from aiokafka import TopicPartition
from fastapi import APIRouter, Body, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from yak.gateway import errors as E
from yak.gateway.cluster import ClusterClient
from yak.gateway.core import GatewayCore, GatewayError, OutRecord, Reason, SchemaSpec
from yak.gateway.core.formats import b64, decode_records
from yak.gateway.core.sessions import ConsumerSession
from yak.gateway.errors import MAX_SAFE_INT, ErrorBody, RestError, V2Response
from yak.gateway.http_auth import caller_core

router = APIRouter(default_response_class=V2Response, tags=["REST Proxy v2"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorBody} for s in (400, 401, 403, 404, 406, 409, 413, 415, 422, 500, 503)
}
MAX_RECORDS_PER_PRODUCE = 10_000
MAX_LONG_POLL_MS = 60_000
_CONTENT = re.compile(r"application/vnd\.kafka\.(json|binary|jsonschema|avro|protobuf)\.v2\+json")


# ------------------------------------------------------------------ models


class ProduceRecord(BaseModel):
    key: Any = None
    value: Any = None
    partition: int | None = Field(default=None, ge=0, le=2**31 - 1)


class ProduceRequest(BaseModel):
    records: list[ProduceRecord] = Field(max_length=MAX_RECORDS_PER_PRODUCE)
    key_schema: str | None = None
    value_schema: str | None = None
    key_schema_id: int | None = None
    value_schema_id: int | None = None


class PartitionOffset(BaseModel):
    partition: int | None
    offset: int | None
    error_code: int | None = None
    error: str | None = None


class ProduceResponse(BaseModel):
    key_schema_id: int | None = None
    value_schema_id: int | None = None
    offsets: list[PartitionOffset]


class Replica(BaseModel):
    broker: int
    leader: bool
    in_sync: bool


class PartitionInfo(BaseModel):
    partition: int
    leader: int
    replicas: list[Replica]


class TopicInfo(BaseModel):
    name: str
    configs: dict[str, str | None]
    partitions: list[PartitionInfo]


class PartitionOffsets(BaseModel):
    beginning_offset: int
    end_offset: int


class Brokers(BaseModel):
    brokers: list[int]


class CreateConsumer(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    name: str | None = Field(default=None, min_length=1, max_length=200,
                             pattern=r"^[A-Za-z0-9._-]+$")
    format: Literal["binary", "json", "jsonschema", "avro", "protobuf"] = "binary"
    auto_offset_reset: Literal["earliest", "latest", "smallest", "largest", "none"] = Field(
        default="latest", alias="auto.offset.reset")
    auto_commit_enable: Literal["true", "false"] | StrictBool = Field(
        default="true", alias="auto.commit.enable")
    fetch_min_bytes: int | None = Field(default=None, alias="fetch.min.bytes", ge=1,
                                        le=64 * 1024 * 1024)
    consumer_request_timeout_ms: int | None = Field(
        default=None, alias="consumer.request.timeout.ms", ge=100, le=300_000)


class CreatedConsumer(BaseModel):
    instance_id: str
    base_uri: str


class TopicPartitionRef(BaseModel):
    topic: str = Field(min_length=1, max_length=249)
    partition: int = Field(ge=0, le=2**31 - 1)


class OffsetRef(TopicPartitionRef):
    offset: int = Field(ge=0, le=MAX_SAFE_INT)
    metadata: str | None = None


class Partitions(BaseModel):
    partitions: list[TopicPartitionRef]


class Offsets(BaseModel):
    offsets: list[OffsetRef]


class Subscription(BaseModel):
    topics: list[Annotated[str, Field(min_length=1, max_length=249)]] | None = None
    topic_pattern: str | None = Field(default=None, min_length=1, max_length=1000)


class Topics(BaseModel):
    topics: list[str]


class ConsumerRecordOut(BaseModel):
    topic: str
    key: Any = None
    value: Any = None
    partition: int
    offset: int
    timestamp: int | None = None
    headers: dict[str, str] | None = None


# ------------------------------------------------------------------ helpers


def _core(request: Request) -> GatewayCore:
    """The core acting for this request's caller (yak.gateway.http_auth)."""
    return caller_core(request)


def _cluster(request: Request) -> ClusterClient:
    return caller_core(request).cluster


def _embedded_format(request: Request) -> str:
    """The embedded format named by the Content-Type (415 for one this gateway lacks)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype in ("application/json", ""):
        return "json"
    m = _CONTENT.fullmatch(ctype)
    if m is None or m.group(1) not in _core(request).formats:
        raise RestError(415, E.UNSUPPORTED_MEDIA_TYPE,
                        f"Unsupported Content-Type {ctype!r}: use "
                        "application/vnd.kafka.json.v2+json or .binary.v2+json")
    return m.group(1)


def _partition_info(pm: Any) -> PartitionInfo:
    return PartitionInfo(
        partition=pm.partition, leader=pm.leader,
        replicas=[Replica(broker=b, leader=b == pm.leader, in_sync=b in pm.isr)
                  for b in pm.replicas],
    )


def _instance(request: Request, group: str, instance: str) -> ConsumerSession:
    return _core(request).sessions.get(group, instance)


def _tp(ref: TopicPartitionRef) -> TopicPartition:
    return TopicPartition(ref.topic, ref.partition)


# ------------------------------------------------------------------ topics


@router.get("/topics", response_model=list[str])
async def list_topics(request: Request) -> Any:
    md = await _cluster(request).metadata()
    return sorted(md.topics)


@router.get("/topics/{topic}", response_model=TopicInfo, responses=_ERRORS)
async def get_topic(request: Request, topic: str) -> Any:
    meta = await _core(request).topic(topic)
    configs = await _cluster(request).topic_configs(topic)
    return TopicInfo(
        name=topic,
        configs={c["name"]: c["value"] for c in configs},
        partitions=[_partition_info(p) for _, p in sorted(meta.partitions.items())],
    )


@router.get("/topics/{topic}/partitions", response_model=list[PartitionInfo], responses=_ERRORS)
async def get_partitions(request: Request, topic: str) -> Any:
    meta = await _core(request).topic(topic)
    return [_partition_info(p) for _, p in sorted(meta.partitions.items())]


@router.get("/topics/{topic}/partitions/{partition}", response_model=PartitionInfo,
            responses=_ERRORS)
async def get_partition(request: Request, topic: str, partition: int) -> Any:
    meta = await _core(request).topic(topic)
    if partition not in meta.partitions:
        raise RestError(404, E.PARTITION_NOT_FOUND, "Partition not found.")
    return _partition_info(meta.partitions[partition])


@router.get("/topics/{topic}/partitions/{partition}/offsets", response_model=PartitionOffsets,
            responses=_ERRORS)
async def get_partition_offsets(request: Request, topic: str, partition: int) -> Any:
    meta = await _core(request).topic(topic)
    if partition not in meta.partitions:
        raise RestError(404, E.PARTITION_NOT_FOUND, "Partition not found.")
    marks = await _cluster(request).watermarks([(topic, partition)])
    m = marks[(topic, partition)]
    return PartitionOffsets(beginning_offset=m.log_start_offset, end_offset=m.high_watermark)


@router.get("/brokers", response_model=Brokers)
async def list_brokers(request: Request) -> Any:
    md = await _cluster(request).metadata()
    return Brokers(brokers=sorted(md.brokers))


async def _produce(request: Request, topic: str, body: ProduceRequest,
                   partition: int | None) -> ProduceResponse:
    core = _core(request)
    fmt = core.formats.get(_embedded_format(request))
    meta = await core.topic(topic)
    parts = [partition if partition is not None else r.partition for r in body.records]
    for i, p in enumerate(parts):
        if p is not None and p not in meta.partitions:
            raise RestError(404, E.PARTITION_NOT_FOUND, f"Partition not found (record {i}).")
    keys = await fmt.encode(topic, True, [r.key for r in body.records],
                            SchemaSpec(body.key_schema, body.key_schema_id))
    values = await fmt.encode(topic, False, [r.value for r in body.records],
                              SchemaSpec(body.value_schema, body.value_schema_id))
    results = await core.produce(
        topic, [OutRecord(k, v, p) for k, v, p in zip(keys.data, values.data, parts,
                                                        strict=True)]
    )
    offsets: list[PartitionOffset] = []
    for res in results:
        if res.error is not None and res.error.reason is Reason.PERMISSION_DENIED:
            # The cluster refused the caller the topic (every record alike): the request
            # fails as a whole, 403 / 40301 naming Kafka's error, as Confluent's proxy does.
            raise res.error
        if res.error is not None:
            err = E.from_gateway_error(res.error)
            offsets.append(PartitionOffset(partition=None, offset=None,
                                           error_code=err.error_code, error=err.message))
        else:
            offsets.append(PartitionOffset(partition=res.partition, offset=res.offset))
    return ProduceResponse(offsets=offsets, key_schema_id=keys.schema_id,
                           value_schema_id=values.schema_id)


@router.post("/topics/{topic}", response_model=ProduceResponse, responses=_ERRORS)
async def produce_to_topic(request: Request, topic: str, body: ProduceRequest) -> Any:
    return await _produce(request, topic, body, None)


@router.post("/topics/{topic}/partitions/{partition}", response_model=ProduceResponse,
             responses=_ERRORS)
async def produce_to_partition(request: Request, topic: str, partition: int,
                               body: ProduceRequest) -> Any:
    return await _produce(request, topic, body, partition)


# ------------------------------------------------------------------ consumers


@router.post("/consumers/{group}", response_model=CreatedConsumer, responses=_ERRORS)
async def create_consumer(request: Request, group: str,
                          body: Annotated[CreateConsumer, Body()] = None) -> Any:  # type: ignore[assignment]
    body = body or CreateConsumer()
    reset = {"smallest": "earliest", "largest": "latest"}.get(body.auto_offset_reset,
                                                              body.auto_offset_reset)
    auto_commit = str(body.auto_commit_enable).lower() == "true"
    session = await _core(request).sessions.create(
        group, body.name, body.format, reset, auto_commit,
        body.fetch_min_bytes, body.consumer_request_timeout_ms,
    )
    base = str(request.base_url).rstrip("/")
    return CreatedConsumer(instance_id=session.id,
                           base_uri=f"{base}/consumers/{group}/instances/{session.id}")


@router.delete("/consumers/{group}/instances/{instance}", status_code=204,
               response_class=Response, responses=_ERRORS)
async def delete_consumer(request: Request, group: str, instance: str) -> Response:
    await _core(request).sessions.delete(group, instance)
    return Response(status_code=204)


@router.post("/consumers/{group}/instances/{instance}/subscription", status_code=204,
             response_class=Response, responses=_ERRORS)
async def subscribe(request: Request, group: str, instance: str, body: Subscription) -> Response:
    session = _instance(request, group, instance)
    if bool(body.topics) == bool(body.topic_pattern):
        raise RestError(422, 42202 if not body.topics else 42203,
                        "give exactly one of topics (non-empty) or topic_pattern")
    try:
        session.subscribe(body.topics or None, body.topic_pattern)
    except GatewayError as e:
        if e.reason is Reason.INVALID_ARGUMENT:  # the pattern is not a regular expression
            raise RestError(422, 42204, e.message) from None
        raise
    return Response(status_code=204)


@router.get("/consumers/{group}/instances/{instance}/subscription", response_model=Topics,
            responses=_ERRORS)
async def get_subscription(request: Request, group: str, instance: str) -> Any:
    return Topics(topics=_instance(request, group, instance).subscription())


@router.delete("/consumers/{group}/instances/{instance}/subscription", status_code=204,
               response_class=Response, responses=_ERRORS)
async def unsubscribe(request: Request, group: str, instance: str) -> Response:
    _instance(request, group, instance).unsubscribe()
    return Response(status_code=204)


@router.post("/consumers/{group}/instances/{instance}/assignments", status_code=204,
             response_class=Response, responses=_ERRORS)
async def assign(request: Request, group: str, instance: str, body: Partitions) -> Response:
    _instance(request, group, instance).assign([_tp(p) for p in body.partitions])
    return Response(status_code=204)


@router.get("/consumers/{group}/instances/{instance}/assignments", response_model=Partitions,
            responses=_ERRORS)
async def get_assignments(request: Request, group: str, instance: str) -> Any:
    return {"partitions": [{"topic": tp.topic, "partition": tp.partition}
                           for tp in _instance(request, group, instance).assignment()]}


@router.post("/consumers/{group}/instances/{instance}/positions", status_code=204,
             response_class=Response, responses=_ERRORS)
async def seek(request: Request, group: str, instance: str, body: Offsets) -> Response:
    _instance(request, group, instance).seek({_tp(o): o.offset for o in body.offsets})
    return Response(status_code=204)


@router.post("/consumers/{group}/instances/{instance}/positions/beginning", status_code=204,
             response_class=Response, responses=_ERRORS)
async def seek_beginning(request: Request, group: str, instance: str,
                         body: Partitions) -> Response:
    session = _instance(request, group, instance)
    await session.seek_to([_tp(p) for p in body.partitions], beginning=True)
    return Response(status_code=204)


@router.post("/consumers/{group}/instances/{instance}/positions/end", status_code=204,
             response_class=Response, responses=_ERRORS)
async def seek_end(request: Request, group: str, instance: str, body: Partitions) -> Response:
    session = _instance(request, group, instance)
    await session.seek_to([_tp(p) for p in body.partitions], beginning=False)
    return Response(status_code=204)


@router.post("/consumers/{group}/instances/{instance}/offsets", status_code=200,
             response_class=Response, responses=_ERRORS)
async def commit_offsets(request: Request, group: str, instance: str,
                         body: Annotated[Offsets | None, Body()] = None) -> Response:
    session = _instance(request, group, instance)
    offsets = None
    if body is not None and body.offsets:
        offsets = {_tp(o): o.offset for o in body.offsets}
    await session.commit(offsets)
    return Response(status_code=200)


@router.get("/consumers/{group}/instances/{instance}/offsets", response_model=Offsets,
            responses=_ERRORS)
async def committed_offsets(request: Request, group: str, instance: str,
                            body: Partitions) -> Any:
    session = _instance(request, group, instance)
    out = []
    for p in body.partitions:
        off = await session.committed(_tp(p))
        out.append({"topic": p.topic, "partition": p.partition,
                    "offset": off if off is not None else -1, "metadata": ""})
    return {"offsets": out}


@router.get("/consumers/{group}/instances/{instance}/records",
            response_model=list[ConsumerRecordOut], responses=_ERRORS)
async def records(
    request: Request, group: str, instance: str,
    timeout: Annotated[int | None, Query(ge=0, le=MAX_LONG_POLL_MS)] = None,
    max_bytes: Annotated[int | None, Query(ge=1, le=64 * 1024 * 1024)] = None,
) -> Any:
    core = _core(request)
    session = _instance(request, group, instance)
    accept = request.headers.get("accept", "*/*").lower()
    wanted = re.findall(r"application/vnd\.kafka\.(\w+)\.v2\+json", accept)
    if wanted and session.format not in wanted:
        raise RestError(406, E.CONSUMER_FORMAT_MISMATCH,
                        "The requested embedded data format does not match the deserializer "
                        "for this consumer instance")
    timeout_ms = session.poll_timeout_ms if timeout is None else timeout
    recs = await session.poll(timeout_ms, max_bytes or 64 * 1024 * 1024)
    # A jsonschema consumer without a registered jsonschema format reads plain JSON.
    fmt_name = session.format if session.format in core.formats else "json"
    decoded = await decode_records(core.formats.get(fmt_name), recs)
    if decoded.error is not None:
        # Nothing is lost: the record that failed and the rest go back to the session. The
        # ones before it are returned; a GET that starts at it gets the error (seek past).
        session.push_back(recs[decoded.error.index:])
        if not decoded.keys:
            raise decoded.error
    out = [
        {
            "topic": r.topic, "partition": r.partition, "offset": r.offset,
            "timestamp": r.timestamp, "key": key, "value": value,
            "headers": {k: b64(v or b"") for k, v in r.headers} if r.headers else None,
        }
        for r, key, value in zip(recs, decoded.keys, decoded.values, strict=False)
    ]
    return V2Response(out, media_type=f"application/vnd.kafka.{fmt_name}.v2+json")
