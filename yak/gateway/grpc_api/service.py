"""The `yak.v1.Gateway` gRPC service: a thin adapter over the gateway core.

Requests are translated into core calls, `GatewayError`s into gRPC status codes (one
table, `STATUS`), and per-record Kafka errors into `RecordResult.error_code`. Keys and
values travel as bytes: an unset optional key/value is null, distinct from empty bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
from aiokafka import TopicPartition
from prometheus_client import Counter, Gauge

from yak.gateway.core import GatewayCore, GatewayError, OutRecord, ProduceResult, Reason
from yak.gateway.core.callers import Caller, callers_of
from yak.gateway.core.share_sessions import check_acks
from yak.gateway.grpc_api import gateway_pb2 as pb
from yak.gateway.grpc_api import gateway_pb2_grpc as pb_grpc
from yak.gateway.metrics import GATEWAY_REGISTRY

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Gateway"].full_name  # "yak.v1.Gateway"
DEFAULT_MAX_RECORDS = 500
MAX_RECORDS_LIMIT = 10_000
# ProduceStream requests whose acks are awaited (or whose responses are not yet taken
# by the client) at once; past that the stream stops reading and HTTP/2 flow control
# holds the client back.
STREAM_IN_FLIGHT = 64

GRPC_STREAMS = Gauge("yak_gateway_grpc_consume_streams", "Open gRPC Consume streams.",
                     registry=GATEWAY_REGISTRY)
GRPC_SENT = Counter("yak_gateway_grpc_records_sent",
                    "Kafka records handed to gRPC Consume streams.", registry=GATEWAY_REGISTRY)
GRPC_PRODUCED = Counter("yak_gateway_grpc_records_produced",
                        "Records acknowledged to gRPC Produce/ProduceStream callers.",
                        registry=GATEWAY_REGISTRY)

STATUS: dict[Reason, grpc.StatusCode] = {
    Reason.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.INVALID_PAYLOAD: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.UNSUPPORTED_FORMAT: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.TOO_LARGE: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.TOPIC_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Reason.PARTITION_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Reason.SESSION_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Reason.GROUP_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Reason.SESSION_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Reason.TOPIC_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Reason.ILLEGAL_STATE: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.OFFSET_OUT_OF_RANGE: grpc.StatusCode.OUT_OF_RANGE,
    Reason.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Reason.KAFKA_ERROR: grpc.StatusCode.UNKNOWN,
    Reason.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    Reason.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
}


def _invalid(message: str) -> GatewayError:
    return GatewayError(Reason.INVALID_ARGUMENT, message)


def _out_records(records: Sequence[pb.Record]) -> list[OutRecord]:
    out = []
    for i, r in enumerate(records):
        ts = r.timestamp_ms if r.HasField("timestamp_ms") else None
        if ts is not None and ts < 0:
            raise _invalid(f"timestamp_ms of record {i} is negative")
        out.append(OutRecord(
            r.key if r.HasField("key") else None,
            r.value if r.HasField("value") else None,
            r.partition if r.HasField("partition") else None,
            [(h.key, h.value) for h in r.headers] if r.headers else None,
            ts,
        ))
    return out


def _results(results: list[ProduceResult]) -> list[pb.RecordResult]:
    """Per-record outcomes; a refusal by the cluster's ACLs fails the request as a whole
    (PERMISSION_DENIED): authorization is per topic, so every record was refused alike."""
    for res in results:
        if res.error is not None and res.error.reason is Reason.PERMISSION_DENIED:
            raise res.error
    GRPC_PRODUCED.inc(len(results))
    out = []
    for res in results:
        err = res.error
        if err is None:
            out.append(pb.RecordResult(partition=res.partition, offset=res.offset))
        else:
            out.append(pb.RecordResult(partition=res.partition, offset=res.offset,
                                       error_code=err.kafka_code, error_message=err.message))
    return out


# Queues: AcknowledgeType <-> the core's names.
_ACK_NAMES = {pb.ACKNOWLEDGE_TYPE_ACCEPT: "accept", pb.ACKNOWLEDGE_TYPE_RELEASE: "release",
              pb.ACKNOWLEDGE_TYPE_REJECT: "reject"}
_ACK_TYPES = {name: value for value, name in _ACK_NAMES.items()}
DEFAULT_SHARE_IN_FLIGHT = 100
SHARE_ROOM_WAIT_S = 0.05


def _shared(r: Any) -> pb.SharedRecord:
    return pb.SharedRecord(
        id=r.id, topic=r.topic, partition=r.partition, offset=r.offset,
        delivery_count=r.delivery_count, lock_deadline_ms=r.lock_deadline_ms, key=r.key,
        value=r.value, headers=[pb.Header(key=k, value=v or b"") for k, v in r.headers],
        timestamp_ms=r.timestamp,
    )


def _consumed(r: Any) -> pb.ConsumedRecord:
    return pb.ConsumedRecord(
        topic=r.topic, partition=r.partition, offset=r.offset, key=r.key, value=r.value,
        headers=[pb.Header(key=k, value=v or b"") for k, v in r.headers] if r.headers else None,
        timestamp_ms=r.timestamp,
    )


class GatewayService(pb_grpc.GatewayServicer):
    """Every call runs as its caller (`yak.gateway.core.callers`), by `grpc_auth`:

    - "none": the gateway itself;
    - "basic": `authorization: Basic base64(user:password)` call metadata, the user logged
      in to the cluster with its own Kafka clients (the cluster checks everything);
    - "mtls": the principal of the TLS client certificate (mapped by
      `ssl.principal.mapping.rules`), for which the gateway acts after checking the
      cluster's ACLs (`Caller.require`: WRITE topic to produce, CREATE to auto-create,
      READ group and topics to consume and commit, DESCRIBE to list).

    No or refused credentials: UNAUTHENTICATED; an operation the ACLs refuse:
    PERMISSION_DENIED with Kafka's error name.
    """

    def __init__(self, core: GatewayCore) -> None:
        self.core = core
        self.callers = callers_of(core)
        self.auth = core.settings.grpc_auth
        self.mapper = core.settings.principal_mapper

    async def _abort(self, context: grpc.aio.ServicerContext, e: GatewayError) -> None:
        await context.abort(STATUS[e.reason], e.message)

    async def _caller(self, context: grpc.aio.ServicerContext) -> Caller:
        if self.auth == "basic":
            return await self.callers.login(*_basic(context))
        if self.auth == "mtls":
            return self.callers.acting(_certificate_principal(context, self.mapper),
                                       _peer_ip(context))
        return self.callers.gateway

    # ---------------------------------------------------------------- produce

    async def Produce(self, request: pb.ProduceRequest,
                      context: grpc.aio.ServicerContext) -> pb.ProduceResponse:
        try:
            caller = await self._caller(context)
            records = _out_records(request.records)
            meta = await caller.topic(request.topic, create=True)
            await caller.require("WRITE", "TOPIC", request.topic)
            results = _results(await caller.core.send(meta, records).results())
        except GatewayError as e:
            await self._abort(context, e)
            raise AssertionError("unreachable") from e  # context.abort raises
        return pb.ProduceResponse(request_id=request.request_id, results=results)

    async def ProduceStream(self, request_iterator: AsyncIterator[pb.ProduceRequest],
                            context: grpc.aio.ServicerContext,
                            ) -> AsyncIterator[pb.ProduceResponse]:
        """Requests are handed to the producer in arrival order, their acks awaited
        concurrently; each response goes out as soon as its request is settled."""
        try:
            caller = await self._caller(context)
        except GatewayError as e:
            await self._abort(context, e)
            return
        core = caller.core
        responses: asyncio.Queue[pb.ProduceResponse | None] = asyncio.Queue()
        slots = asyncio.Semaphore(STREAM_IN_FLIGHT)
        tasks: set[asyncio.Task[None]] = set()

        def failed(request_id: int, e: GatewayError) -> pb.ProduceResponse:
            return pb.ProduceResponse(request_id=request_id, status_code=STATUS[e.reason].value[0],
                                      status_message=e.message)

        async def settle(request_id: int, pending: Any) -> None:
            try:
                resp = pb.ProduceResponse(request_id=request_id,
                                          results=_results(await pending.results()))
            except GatewayError as e:
                resp = failed(request_id, e)
            responses.put_nowait(resp)

        async def read() -> None:
            try:
                async for req in request_iterator:
                    await slots.acquire()
                    try:
                        meta = await caller.topic(req.topic, create=True)
                        await caller.require("WRITE", "TOPIC", req.topic)
                        pending = core.send(meta, _out_records(req.records))
                    except GatewayError as e:
                        responses.put_nowait(failed(req.request_id, e))
                        continue
                    task = asyncio.get_running_loop().create_task(
                        settle(req.request_id, pending))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                while tasks:
                    await asyncio.wait(list(tasks))
            finally:
                responses.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while True:
                resp = await responses.get()
                if resp is None:
                    break
                yield resp
                slots.release()
            await reader  # re-raises what ended the reading, if anything
        finally:
            if not reader.done():
                reader.cancel()
            for task in list(tasks):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    # ---------------------------------------------------------------- consume

    async def Consume(self, request: pb.ConsumeRequest,
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ConsumeResponse]:
        try:
            caller = await self._caller(context)
            core = caller.core
            if not request.group_id:
                raise _invalid("group_id is required: a Consume stream is a group member")
            if not request.topics or not all(request.topics):
                raise _invalid("topics must be a non-empty list of topic names")
            reset = request.auto_offset_reset or "latest"
            if reset not in ("earliest", "latest"):
                raise _invalid("auto_offset_reset must be 'earliest' or 'latest'")
            max_records = request.max_records or DEFAULT_MAX_RECORDS
            if not 0 < max_records <= MAX_RECORDS_LIMIT:
                raise _invalid(f"max_records must be between 1 and {MAX_RECORDS_LIMIT}")
            topics = list(dict.fromkeys(request.topics))
            await caller.require("READ", "GROUP", request.group_id)
            for t in topics:
                await caller.topic(t, create=True)
                await caller.require("READ", "TOPIC", t)
            session = await core.sessions.open_stream(
                request.group_id, topics, reset, request.auto_commit, client_id="yak-grpc")
        except GatewayError as e:
            await self._abort(context, e)
            return
        sid = session.id
        GRPC_STREAMS.inc()
        try:
            yield pb.ConsumeResponse(session_id=sid)
            # Each batch is yielded (sent) before the next is fetched: a client that
            # stops reading stops the fetching once gRPC's flow-control window is full.
            async for batch in session.stream(max_records):
                GRPC_SENT.inc(len(batch))
                yield pb.ConsumeResponse(session_id=sid, records=[_consumed(r) for r in batch])
        except GatewayError as e:
            await self._abort(context, e)
        finally:
            GRPC_STREAMS.dec()
            # Leave the group now (not after a session timeout), even when cancelled.
            closing = asyncio.ensure_future(core.sessions.close_stream(session))
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(closing)

    async def Commit(self, request: pb.CommitRequest,
                     context: grpc.aio.ServicerContext) -> pb.CommitResponse:
        try:
            caller = await self._caller(context)
            if not request.session_id:
                raise _invalid("session_id is required")
            session = caller.core.sessions.stream(request.session_id)  # only the caller's
            offsets = None
            if request.offsets:
                offsets = {}
                for o in request.offsets:
                    if not o.topic or o.partition < 0 or o.offset < 0:
                        raise _invalid("offsets need a topic, a partition >= 0 and an "
                                       "offset >= 0")
                    offsets[TopicPartition(o.topic, o.partition)] = o.offset
            if session.group is not None:
                await caller.require("READ", "GROUP", session.group)
            for t in sorted({tp.topic for tp in offsets or session.delivered}):
                await caller.require("READ", "TOPIC", t)
            done = await session.commit(offsets)
        except GatewayError as e:
            await self._abort(context, e)
            raise AssertionError("unreachable") from e
        return pb.CommitResponse(offsets=[
            pb.TopicPartitionOffset(topic=tp.topic, partition=tp.partition, offset=off)
            for tp, off in sorted(done.items(), key=lambda kv: (kv[0].topic, kv[0].partition))
        ])

    # ---------------------------------------------------------------- queues

    async def ShareConsume(self, request: pb.ShareConsumeRequest,
                           context: grpc.aio.ServicerContext,
                           ) -> AsyncIterator[pb.ShareConsumeResponse]:
        """A share-group member for the life of the stream. Records are acquired only
        while fewer than `max_in_flight` delivered ones are unacknowledged and locked,
        and each batch is sent before the next is acquired, so a client that stops
        acknowledging or reading stops the acquiring."""
        try:
            caller = await self._caller(context)
            core = caller.core
            if not request.group_id:
                raise _invalid("group_id is required: a ShareConsume stream is a member of "
                               "that share group")
            if not request.topics or not all(request.topics):
                raise _invalid("topics must be a non-empty list of topic names")
            in_flight = request.max_in_flight or DEFAULT_SHARE_IN_FLIGHT
            if not 0 < in_flight <= MAX_RECORDS_LIMIT:
                raise _invalid(f"max_in_flight must be between 1 and {MAX_RECORDS_LIMIT}")
            topics = list(dict.fromkeys(request.topics))
            await caller.require("READ", "GROUP", request.group_id)
            for t in topics:
                await caller.topic(t)
                await caller.require("READ", "TOPIC", t)
            session = await core.share_sessions.open_stream(request.group_id, topics,
                                                            "yak-grpc-share")
        except GatewayError as e:
            await self._abort(context, e)
            return
        sid = session.id
        try:
            yield pb.ShareConsumeResponse(session_id=sid)
            while True:
                room = in_flight - session.outstanding()
                if room <= 0:
                    await asyncio.sleep(SHARE_ROOM_WAIT_S)
                    continue
                batch = await session.poll(room, 1000)
                if batch:
                    GRPC_SENT.inc(len(batch))
                    yield pb.ShareConsumeResponse(session_id=sid,
                                                  records=[_shared(r) for r in batch])
        except GatewayError as e:
            await self._abort(context, e)
        finally:
            # Close the share sessions now: what the stream held is released at once.
            closing = asyncio.ensure_future(core.share_sessions.close_stream(session))
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(closing)

    async def Acknowledge(self, request: pb.AcknowledgeRequest,
                          context: grpc.aio.ServicerContext) -> pb.AcknowledgeResponse:
        try:
            caller = await self._caller(context)
            if not request.session_id:
                raise _invalid("session_id is required")
            if not request.acknowledgements:
                raise _invalid("acknowledgements must not be empty")
            session = caller.core.share_sessions.stream(request.session_id)  # the caller's
            await caller.require("READ", "GROUP", session.group)
            acks = []
            for a in request.acknowledgements:
                if a.type not in _ACK_NAMES:
                    raise _invalid(f"unknown acknowledgement type {a.type}")
                acks.append((a.id, _ACK_NAMES[a.type]))
            done = check_acks(await session.acknowledge(acks))
        except GatewayError as e:
            await self._abort(context, e)
            raise AssertionError("unreachable") from e
        return pb.AcknowledgeResponse(acknowledgements=[
            pb.Acknowledgement(id=r.id, type=_ACK_TYPES[r.type]) for r in done])

    # ---------------------------------------------------------------- metadata

    async def ListTopics(self, request: pb.ListTopicsRequest,
                         context: grpc.aio.ServicerContext) -> pb.ListTopicsResponse:
        try:
            caller = await self._caller(context)
            topics = {name: t for name, t in (await caller.core.list_topics()).items()
                      if await caller.may("DESCRIBE", "TOPIC", name)}
        except GatewayError as e:
            await self._abort(context, e)
            raise AssertionError("unreachable") from e
        return pb.ListTopicsResponse(topics=[
            pb.TopicInfo(name=name, partitions=len(t.partitions))
            for name, t in sorted(topics.items())
        ])


# ------------------------------------------------------------------ credentials


def _basic(context: grpc.aio.ServicerContext) -> tuple[str, str]:
    """(user, password) from `authorization: Basic base64(user:password)` call metadata."""
    import base64
    import binascii

    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "basic":
                try:
                    user, sep, password = base64.b64decode(
                        token.strip(), validate=True).decode("utf-8").partition(":")
                except (binascii.Error, UnicodeDecodeError):
                    break
                if sep:
                    return user, password
            break
    raise GatewayError(Reason.UNAUTHENTICATED, "authentication required: call metadata "
                       "'authorization: Basic base64(user:password)' of a Kafka user")


def _certificate_principal(context: grpc.aio.ServicerContext, mapper: Any) -> str:
    """`User:<subject>` of the verified client certificate, mapped as a broker maps it."""
    import ssl

    from yak.security.tls import SslPrincipalMapper, ssl_principal

    pems = context.auth_context().get("x509_pem_cert") or ()
    if not pems:
        raise GatewayError(Reason.UNAUTHENTICATED, "a TLS client certificate is required")
    der = ssl.PEM_cert_to_DER_cert(pems[0].decode() if isinstance(pems[0], bytes) else pems[0])
    try:
        return str(ssl_principal(der, mapper or SslPrincipalMapper.from_rules(None)))
    except Exception as e:  # NoMatchingRule: Kafka fails such a connection's authentication
        raise GatewayError(Reason.UNAUTHENTICATED,
                           f"the client certificate maps to no principal: {e}") from None


def _peer_ip(context: grpc.aio.ServicerContext) -> str:
    """"ipv4:127.0.0.1:5000" / "ipv6:[::1]:5000" -> the IP, as ACL hosts name it."""
    peer = context.peer() or ""
    _, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0]
    return host.strip("[]") or "*"
