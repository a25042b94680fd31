"""Confluent REST Proxy API v2: topics, partitions, produce and consumer instances.

Content negotiation follows that API: produce bodies are
`application/vnd.kafka.{json,binary}.v2+json` (plain `application/json` means json),
responses are `application/vnd.kafka.v2+json`, and a consumer's records are served
only to an `Accept` matching the format it was created with (406 otherwise).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
from typing import Annotated, Any, Literal

from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError
from fastapi import APIRouter, Body, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from yak.gateway import errors as E
from yak.gateway.cluster import ClusterClient, ClusterError, TopicMeta
from yak.gateway.consumers import (
    ConsumerInstance,
    ConsumerRegistry,
    ConsumerStateError,
    assignment_of,
    subscription_of,
)
from yak.gateway.errors import MAX_SAFE_INT, ErrorBody, RestError, V2Response

router = APIRouter(default_response_class=V2Response, tags=["REST Proxy v2"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorBody} for s in (400, 404, 406, 409, 413, 415, 422, 500, 503)
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
    format: Literal["binary", "json", "jsonschema"] = "binary"
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


def _cluster(request: Request) -> ClusterClient:
    return request.app.state.gateway.cluster


def _consumers(request: Request) -> ConsumerRegistry:
    return request.app.state.gateway.consumers


def _embedded_format(request: Request) -> str:
    """json or binary, from the Content-Type (415 for formats Yak has no registry for)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype in ("application/json", ""):
        return "json"
    m = _CONTENT.fullmatch(ctype)
    if m is None or m.group(1) not in ("json", "binary"):
        raise RestError(415, E.UNSUPPORTED_MEDIA_TYPE,
                        f"Unsupported Content-Type {ctype!r}: use "
                        "application/vnd.kafka.json.v2+json or .binary.v2+json")
    return m.group(1)


async def _topic_or_404(request: Request, topic: str) -> TopicMeta:
    meta = await _cluster(request).topic(topic)
    if meta is None:
        raise RestError(404, E.TOPIC_NOT_FOUND, "Topic not found.")
    return meta


def _encode(fmt: str, data: Any, what: str) -> bytes | None:
    if data is None:
        return None
    if fmt == "binary":
        if not isinstance(data, str):
            raise RestError(422, E.INVALID_PAYLOAD, f"binary {what} must be a base64 string")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise RestError(422, E.INVALID_PAYLOAD, f"{what} is not valid base64") from None
    return json.dumps(data, separators=(",", ":")).encode()


def _partition_info(pm: Any) -> PartitionInfo:
    return PartitionInfo(
        partition=pm.partition, leader=pm.leader,
        replicas=[Replica(broker=b, leader=b == pm.leader, in_sync=b in pm.isr)
                  for b in pm.replicas],
    )


def _instance(request: Request, group: str, instance: str) -> ConsumerInstance:
    inst = _consumers(request).get(group, instance)
    if inst is None:
        raise RestError(404, E.CONSUMER_INSTANCE_NOT_FOUND, "Consumer instance not found.")
    return inst


def _tp(ref: TopicPartitionRef) -> TopicPartition:
    return TopicPartition(ref.topic, ref.partition)


def _decode(fmt: str, data: bytes | None, where: str) -> Any:
    if data is None:
        return None
    if fmt == "binary":
        return base64.b64encode(data).decode()
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise RestError(422, E.INVALID_PAYLOAD,
                        f"record at {where} is not JSON; use a binary consumer") from None


# ------------------------------------------------------------------ topics


@router.get("/topics", response_model=list[str])
async def list_topics(request: Request) -> Any:
    md = await _cluster(request).metadata()
    return sorted(md.topics)


@router.get("/topics/{topic}", response_model=TopicInfo, responses=_ERRORS)
async def get_topic(request: Request, topic: str) -> Any:
    meta = await _topic_or_404(request, topic)
    configs = await _cluster(request).topic_configs(topic)
    return TopicInfo(
        name=topic,
        configs={c["name"]: c["value"] for c in configs},
        partitions=[_partition_info(p) for _, p in sorted(meta.partitions.items())],
    )


@router.get("/topics/{topic}/partitions", response_model=list[PartitionInfo], responses=_ERRORS)
async def get_partitions(request: Request, topic: str) -> Any:
    meta = await _topic_or_404(request, topic)
    return [_partition_info(p) for _, p in sorted(meta.partitions.items())]


@router.get("/topics/{topic}/partitions/{partition}", response_model=PartitionInfo,
            responses=_ERRORS)
async def get_partition(request: Request, topic: str, partition: int) -> Any:
    meta = await _topic_or_404(request, topic)
    if partition not in meta.partitions:
        raise RestError(404, E.PARTITION_NOT_FOUND, "Partition not found.")
    return _partition_info(meta.partitions[partition])


@router.get("/topics/{topic}/partitions/{partition}/offsets", response_model=PartitionOffsets,
            responses=_ERRORS)
async def get_partition_offsets(request: Request, topic: str, partition: int) -> Any:
    meta = await _topic_or_404(request, topic)
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
    fmt = _embedded_format(request)
    meta = await _topic_or_404(request, topic)
    encoded = []
    for i, r in enumerate(body.records):
        p = partition if partition is not None else r.partition
        if p is not None and p not in meta.partitions:
            raise RestError(404, E.PARTITION_NOT_FOUND, f"Partition not found (record {i}).")
        encoded.append((p, _encode(fmt, r.key, "key"), _encode(fmt, r.value, "value")))
    cluster = _cluster(request)
    offsets: list[PartitionOffset] = []
    # Handed to the producer in order, then awaited together (one timeout for the
    # request, not one timer per record): librdkafka batches them.
    futs = []
    for p, key, value in encoded:
        try:
            futs.append(cluster.produce_nowait(topic, value, key, p))
        except ClusterError as e:
            failed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            failed.set_exception(e)
            futs.append(failed)
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*futs, return_exceptions=True), cluster.timeout_s + 2
        )
    except TimeoutError:
        raise ClusterError("timed out waiting for produce acks", -185, "_TIMED_OUT") from None
    for res in results:
        if isinstance(res, ClusterError):
            if res.unreachable:
                raise res
            err = E.from_cluster_error(res)
            offsets.append(PartitionOffset(partition=None, offset=None,
                                           error_code=err.error_code, error=err.message))
        elif isinstance(res, BaseException):
            raise res
        else:
            offsets.append(PartitionOffset(partition=res.partition, offset=res.offset))
    return ProduceResponse(offsets=offsets)


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
    try:
        inst = await _consumers(request).create(
            group, body.name, body.format, reset, auto_commit,
            body.fetch_min_bytes, body.consumer_request_timeout_ms,
        )
    except ConsumerStateError as e:
        raise RestError(409, e.error_code, str(e)) from None
    except (KafkaError, TimeoutError, OSError) as e:
        raise RestError(503, E.CLUSTER_UNREACHABLE,
                        f"cannot start a consumer: {e!r}") from None
    base = str(request.base_url).rstrip("/")
    return CreatedConsumer(instance_id=inst.name,
                           base_uri=f"{base}/consumers/{group}/instances/{inst.name}")


@router.delete("/consumers/{group}/instances/{instance}", status_code=204,
               response_class=Response, responses=_ERRORS)
async def delete_consumer(request: Request, group: str, instance: str) -> Response:
    if not await _consumers(request).delete(group, instance):
        raise RestError(404, E.CONSUMER_INSTANCE_NOT_FOUND, "Consumer instance not found.")
    return Response(status_code=204)


@router.post("/consumers/{group}/instances/{instance}/subscription", status_code=204,
             response_class=Response, responses=_ERRORS)
async def subscribe(request: Request, group: str, instance: str, body: Subscription) -> Response:
    inst = _instance(request, group, instance)
    if bool(body.topics) == bool(body.topic_pattern):
        raise RestError(422, 42202 if not body.topics else 42203,
                        "give exactly one of topics (non-empty) or topic_pattern")
    if inst.consumer.assignment() and not inst.consumer.subscription():
        raise RestError(409, E.ILLEGAL_STATE,
                        "Subscription to topics, partitions and pattern are mutually exclusive.")
    try:
        if body.topics:
            inst.consumer.subscribe(topics=body.topics)
        else:
            try:
                re.compile(body.topic_pattern or "")
            except re.error as e:
                raise RestError(422, 42204, f"bad topic_pattern: {e}") from None
            inst.consumer.subscribe(pattern=body.topic_pattern)
    except (IllegalStateError, ValueError, TypeError) as e:
        raise RestError(409, E.ILLEGAL_STATE, str(e)) from None
    inst.drop_unassigned()
    return Response(status_code=204)


@router.get("/consumers/{group}/instances/{instance}/subscription", response_model=Topics,
            responses=_ERRORS)
async def get_subscription(request: Request, group: str, instance: str) -> Any:
    return Topics(topics=subscription_of(_instance(request, group, instance)))


@router.delete("/consumers/{group}/instances/{instance}/subscription", status_code=204,
               response_class=Response, responses=_ERRORS)
async def unsubscribe(request: Request, group: str, instance: str) -> Response:
    inst = _instance(request, group, instance)
    inst.consumer.unsubscribe()
    inst.backlog.clear()
    return Response(status_code=204)


@router.post("/consumers/{group}/instances/{instance}/assignments", status_code=204,
             response_class=Response, responses=_ERRORS)
async def assign(request: Request, group: str, instance: str, body: Partitions) -> Response:
    inst = _instance(request, group, instance)
    if inst.consumer.subscription():
        raise RestError(409, E.ILLEGAL_STATE,
                        "Subscription to topics, partitions and pattern are mutually exclusive.")
    try:
        inst.consumer.assign([_tp(p) for p in body.partitions])
    except (IllegalStateError, ValueError, TypeError) as e:
        raise RestError(409, E.ILLEGAL_STATE, str(e)) from None
    inst.drop_unassigned()
    return Response(status_code=204)


@router.get("/consumers/{group}/instances/{instance}/assignments", response_model=Partitions,
            responses=_ERRORS)
async def get_assignments(request: Request, group: str, instance: str) -> Any:
    return {"partitions": assignment_of(_instance(request, group, instance))}


def _check_assigned(inst: ConsumerInstance, tps: list[TopicPartition]) -> None:
    assigned = inst.consumer.assignment()
    for tp in tps:
        if tp not in assigned:
            raise RestError(409, E.ILLEGAL_STATE,
                            f"{tp.topic}-{tp.partition} is not assigned to this consumer")


@router.post("/consumers/{group}/instances/{instance}/positions", status_code=204,
             response_class=Response, responses=_ERRORS)
async def seek(request: Request, group: str, instance: str, body: Offsets) -> Response:
    inst = _instance(request, group, instance)
    tps = [_tp(o) for o in body.offsets]
    _check_assigned(inst, tps)
    for o, tp in zip(body.offsets, tps, strict=True):
        inst.seek(tp, o.offset)
    return Response(status_code=204)


@router.post("/consumers/{group}/instances/{instance}/positions/beginning", status_code=204,
             response_class=Response, responses=_ERRORS)
async def seek_beginning(request: Request, group: str, instance: str,
                         body: Partitions) -> Response:
    inst = _instance(request, group, instance)
    tps = [_tp(p) for p in body.partitions]
    _check_assigned(inst, tps)
    await inst.seek_to(tps, beginning=True)
    return Response(status_code=204)


@router.post("/consumers/{group}/instances/{instance}/positions/end", status_code=204,
             response_class=Response, responses=_ERRORS)
async def seek_end(request: Request, group: str, instance: str, body: Partitions) -> Response:
    inst = _instance(request, group, instance)
    tps = [_tp(p) for p in body.partitions]
    _check_assigned(inst, tps)
    await inst.seek_to(tps, beginning=False)
    return Response(status_code=204)


@router.post("/consumers/{group}/instances/{instance}/offsets", status_code=200,
             response_class=Response, responses=_ERRORS)
async def commit_offsets(request: Request, group: str, instance: str,
                         body: Annotated[Offsets | None, Body()] = None) -> Response:
    inst = _instance(request, group, instance)
    offsets = None
    if body is not None and body.offsets:
        offsets = {_tp(o): o.offset for o in body.offsets}
    try:
        await inst.commit(offsets)
    except (KafkaError, IllegalStateError) as e:
        raise RestError(500, E.KAFKA_ERROR, f"commit failed: {e!r}") from None
    return Response(status_code=200)


@router.get("/consumers/{group}/instances/{instance}/offsets", response_model=Offsets,
            responses=_ERRORS)
async def committed_offsets(request: Request, group: str, instance: str,
                            body: Partitions) -> Any:
    inst = _instance(request, group, instance)
    out = []
    for p in body.partitions:
        try:
            off = await inst.consumer.committed(_tp(p))
        except (KafkaError, IllegalStateError) as e:
            raise RestError(500, E.KAFKA_ERROR, f"offset fetch failed: {e!r}") from None
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
    inst = _instance(request, group, instance)
    accept = request.headers.get("accept", "*/*").lower()
    wanted = re.findall(r"application/vnd\.kafka\.(\w+)\.v2\+json", accept)
    if wanted and inst.format not in wanted:
        raise RestError(406, E.CONSUMER_FORMAT_MISMATCH,
                        "The requested embedded data format does not match the deserializer "
                        "for this consumer instance")
    timeout_ms = inst.poll_timeout_ms if timeout is None else timeout
    try:
        recs = await inst.records(timeout_ms, max_bytes or 64 * 1024 * 1024)
    except (KafkaError, IllegalStateError) as e:
        raise RestError(500, E.KAFKA_ERROR, f"fetch failed: {e!r}") from None
    fmt = "binary" if inst.format == "binary" else "json"
    media = f"application/vnd.kafka.{fmt}.v2+json"
    out = []
    for i, r in enumerate(recs):
        where = f"{r.topic}-{r.partition}@{r.offset}"
        try:
            key, value = _decode(fmt, r.key, where), _decode(fmt, r.value, where)
        except RestError:
            # Nothing is lost: this record and the rest go back to the instance. The ones
            # before it are returned; a GET that starts at it gets the error (seek past).
            inst.push_back(recs[i:])
            if out:
                break
            raise
        out.append({
            "topic": r.topic, "partition": r.partition, "offset": r.offset,
            "timestamp": r.timestamp,
            "key": key, "value": value,
            "headers": {k: base64.b64encode(v or b"").decode() for k, v in r.headers}
            if r.headers else None,
        })
    return V2Response(out, media_type=media)
