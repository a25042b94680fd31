"""The gRPC gateway (`yak.v1.Gateway`) against real brokers, read and written by confluent-kafka.

Every test talks to a real `yak serve --grpc` (or `yak gateway --grpc`) subprocess over a
real HTTP/2 connection on 127.0.0.1, with the generated stubs (or, for discovery, with
nothing but server reflection).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from tests.waiting import wait_steady
from yak.gateway.grpc_api import gateway_pb2 as pb
from yak.gateway.grpc_api import gateway_pb2_grpc as pb_grpc

from .conftest import REPO, GatewayProc, free_port

READY_S = 40.0


@dataclass
class GrpcProc(GatewayProc):
    target: str = ""

    def stub(self, **options: Any) -> pb_grpc.GatewayStub:
        return pb_grpc.GatewayStub(grpc.insecure_channel(self.target,
                                                         options=list(options.items())))


def _wait_ready(proc: subprocess.Popen[bytes], out: Path, ready: str, target: str) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if ready in out.read_text(errors="replace"):
            channel = grpc.insecure_channel(target)
            try:
                grpc.channel_ready_future(channel).result(timeout=5)
                return
            except grpc.FutureTimeoutError:
                pass
            finally:
                channel.close()
        if proc.poll() is not None:
            break
        time.sleep(0.1)  # back-off of this wait-for-ready loop
    proc.kill()
    proc.wait(5)
    raise RuntimeError(f"did not start: {out.read_text(errors='replace')[-3000:]}")


def _spawn(args: list[str], out: Path) -> subprocess.Popen[bytes]:
    with open(out, "wb") as f:
        return subprocess.Popen(
            [sys.executable, "-c", "from yak.cli.main import app; app()", *args],
            stdout=f, stderr=subprocess.STDOUT, cwd=REPO,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )


def start_serve_grpc(tmp: Path, *extra: str, http: bool = True) -> GrpcProc:
    """`yak serve --grpc` (and `--http` unless http=False): broker and gateway in one process."""
    data = tmp / "data"
    data.mkdir(parents=True, exist_ok=True)
    kport, hport, gport = free_port(), free_port(), free_port()
    out = tmp / "serve.log"
    target = f"127.0.0.1:{gport}"
    proc = _spawn(["serve", "--data-dir", str(data), "--listen", f"127.0.0.1:{kport}",
                   "--http", f"127.0.0.1:{hport}" if http else "none", "--grpc", target,
                   *extra], out)
    _wait_ready(proc, out, "Yak gRPC gateway on", target)
    return GrpcProc(proc, f"http://127.0.0.1:{hport}", f"127.0.0.1:{kport}", out, target)


def start_gateway_grpc(tmp: Path, bootstrap: str) -> GrpcProc:
    """`yak gateway --grpc --http none` against an existing cluster."""
    tmp.mkdir(parents=True, exist_ok=True)
    target = f"127.0.0.1:{free_port()}"
    out = tmp / "gateway.log"
    proc = _spawn(["gateway", "--bootstrap", bootstrap, "--http", "none", "--grpc", target,
                   "--request-timeout", "3"], out)
    _wait_ready(proc, out, "Yak gateway ready on", target)
    return GrpcProc(proc, "", bootstrap, out, target)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcProc]:
    g = start_serve_grpc(tmp_path_factory.mktemp("yak-grpc"))
    yield g
    g.stop()


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions)])[name].result(15)


def read_all(bootstrap: str, topic: str, n: int, timeout_s: float = 30.0) -> list[Any]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m)
    finally:
        c.close()
    assert len(got) == n, f"read {len(got)} of {n}"
    return sorted(got, key=lambda m: (m.partition(), m.offset()))


def wait_health(target: str, want: int, timeout_s: float = 20.0, service: str = "") -> None:
    with grpc.insecure_channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        deadline = time.monotonic() + timeout_s
        status = None
        while time.monotonic() < deadline:
            status = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
            if status == want:
                return
            time.sleep(0.2)  # back-off of this wait-for-status loop
        raise AssertionError(f"health of {service!r} stayed {status}, wanted {want}")


# ------------------------------------------------------------------ produce


def test_produce_null_vs_empty_headers_partition_and_timestamp_read_by_confluent(
    gw: GrpcProc,
) -> None:
    create_topic(gw.bootstrap, "g-prod", partitions=3)
    records = [
        pb.Record(key=b"k", value=b"v", headers=[pb.Header(key="h", value=b"1"),
                                                  pb.Header(key="h", value=b"2"),
                                                  pb.Header(key="a", value=b"")]),
        pb.Record(key=b"tomb"),                                # value unset: a tombstone
        pb.Record(key=b"", value=b""),                         # both empty, not null
        pb.Record(value=b"p2", partition=2, timestamp_ms=1_600_000_000_000),
    ]
    resp = gw.stub().Produce(pb.ProduceRequest(topic="g-prod", records=records, request_id=42),
                             timeout=30)
    assert resp.request_id == 42 and len(resp.results) == 4
    assert all(r.error_code == 0 and r.offset >= 0 for r in resp.results), resp
    assert resp.results[3].partition == 2

    msgs = read_all(gw.bootstrap, "g-prod", 4)
    by_pos = {(m.partition(), m.offset()): m for m in msgs}
    got = [by_pos[(r.partition, r.offset)] for r in resp.results]
    assert (got[0].key(), got[0].value()) == (b"k", b"v")
    assert got[0].headers() == [("h", b"1"), ("h", b"2"), ("a", b"")]
    assert (got[1].key(), got[1].value()) == (b"tomb", None)
    assert (got[2].key(), got[2].value()) == (b"", b"")
    assert (got[3].key(), got[3].value(), got[3].partition()) == (None, b"p2", 2)
    assert got[3].timestamp() == (TIMESTAMP_CREATE_TIME, 1_600_000_000_000)


def test_produce_stream_answers_every_request_once_by_request_id(gw: GrpcProc) -> None:
    create_topic(gw.bootstrap, "g-stream", partitions=2)
    n = 200

    def requests() -> Iterator[pb.ProduceRequest]:
        for i in range(n):
            yield pb.ProduceRequest(topic="g-stream", request_id=1000 + i, records=[
                pb.Record(key=f"k{i}".encode(), value=f"v{i}".encode()),
                pb.Record(value=f"w{i}".encode(), partition=i % 2),
            ])
        # A request that fails as a whole does not end the stream.
        yield pb.ProduceRequest(topic="", request_id=7)

    answers: dict[int, pb.ProduceResponse] = {}
    for resp in gw.stub().ProduceStream(requests(), timeout=60):
        assert resp.request_id not in answers, f"two answers for {resp.request_id}"
        answers[resp.request_id] = resp
    assert sorted(answers) == [7] + [1000 + i for i in range(n)]
    bad = answers.pop(7)
    assert bad.status_code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and not bad.results
    assert all(len(a.results) == 2 and a.status_code == 0 for a in answers.values())
    assert all(r.error_code == 0 for a in answers.values() for r in a.results)

    msgs = read_all(gw.bootstrap, "g-stream", 2 * n)
    where = {(m.partition(), m.offset()): m.value() for m in msgs}
    for i in range(n):
        a = answers[1000 + i]
        assert where[(a.results[0].partition, a.results[0].offset)] == f"v{i}".encode()
        assert a.results[1].partition == i % 2
        assert where[(a.results[1].partition, a.results[1].offset)] == f"w{i}".encode()
    # One stream's requests are appended in the order they were sent.
    p0 = [v for (p, _), v in sorted(where.items()) if p == 0 and v.startswith(b"w")]
    assert p0 == [f"w{i}".encode() for i in range(0, n, 2)]


# ------------------------------------------------------------------ consume


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
    finally:
        c.close()
    return [tp.offset for tp in tps]


def test_consume_and_commit_of_what_confluent_wrote(gw: GrpcProc) -> None:
    topic, group = "g-cons", "g-cons-g"
    create_topic(gw.bootstrap, topic, partitions=3)
    p = Producer({"bootstrap.servers": gw.bootstrap})
    sent = []
    for i in range(30):
        key = None if i % 5 == 0 else (b"" if i % 5 == 1 else f"k{i}".encode())
        value = None if i % 7 == 0 else (b"" if i % 7 == 1 else f"v{i}".encode())
        headers = [("x", str(i).encode()), ("x", b"again")]
        p.produce(topic, key=key, value=value, partition=i % 3, headers=headers)
        sent.append((i % 3, key, value))
    assert p.flush(20) == 0

    stub = gw.stub()
    t0 = time.monotonic()
    stream = stub.Consume(pb.ConsumeRequest(group_id=group, topics=[topic],
                                            auto_offset_reset="earliest", auto_commit=False,
                                            max_records=4), timeout=60)
    first = next(stream)
    assert first.session_id and not first.records
    assert time.monotonic() - t0 < 15, "the session id must come before the group is joined"
    got: list[pb.ConsumedRecord] = []
    while len(got) < 30:
        resp = next(stream)
        assert resp.session_id == first.session_id
        assert 0 < len(resp.records) <= 4
        got.extend(resp.records)
    # Nothing is committed before Commit (auto_commit false).
    assert committed(gw.bootstrap, group, topic, 3) == [-1001, -1001, -1001]

    by_partition: dict[int, list[pb.ConsumedRecord]] = {}
    for r in got:
        assert r.topic == topic
        by_partition.setdefault(r.partition, []).append(r)
    for part, recs in by_partition.items():
        assert [r.offset for r in recs] == list(range(10)), part
        want = [(k, v) for p_, k, v in sent if p_ == part]
        have = [(r.key if r.HasField("key") else None, r.value if r.HasField("value") else None)
                for r in recs]
        assert have == want
        for r in recs:
            assert [(h.key, h.value) for h in r.headers][1] == ("x", b"again")
            assert r.timestamp_ms > 0

    done = stub.Commit(pb.CommitRequest(session_id=first.session_id), timeout=20)
    assert sorted((o.partition, o.offset) for o in done.offsets) == [(0, 10), (1, 10), (2, 10)]
    assert committed(gw.bootstrap, group, topic, 3) == [10, 10, 10]
    # Explicit offsets commit exactly those.
    stub.Commit(pb.CommitRequest(session_id=first.session_id, offsets=[
        pb.TopicPartitionOffset(topic=topic, partition=1, offset=4)]), timeout=20)
    assert committed(gw.bootstrap, group, topic, 3) == [10, 4, 10]
    stream.cancel()
    # Once the stream is gone, so is its session.
    with pytest.raises(grpc.RpcError) as e:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            stub.Commit(pb.CommitRequest(session_id=first.session_id), timeout=10)
            time.sleep(0.2)  # back-off of this wait-for-NOT_FOUND loop
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def group_members(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
    return len(desc.members)


def test_a_cancelled_consume_stream_leaves_its_group_at_once(gw: GrpcProc) -> None:
    topic, group = "g-cancel", "g-cancel-g"
    create_topic(gw.bootstrap, topic)
    p = Producer({"bootstrap.servers": gw.bootstrap})
    p.produce(topic, value=b"one")
    assert p.flush(20) == 0
    stream = gw.stub().Consume(pb.ConsumeRequest(group_id=group, topics=[topic],
                                                 auto_offset_reset="earliest"), timeout=60)
    next(stream)
    assert len(next(stream).records) == 1  # delivered: the member is in the group
    assert group_members(gw.bootstrap, group) == 1
    t0 = time.monotonic()
    stream.cancel()
    deadline = t0 + 20
    while group_members(gw.bootstrap, group) and time.monotonic() < deadline:
        time.sleep(0.1)  # back-off of this wait-for-leave loop (timed, so kept inline)
    left_after = time.monotonic() - t0
    assert group_members(gw.bootstrap, group) == 0
    # aiokafka's session timeout is 10 s: leaving by LeaveGroup is much faster than expiry.
    assert left_after < 5, f"member left after {left_after:.1f} s"


@pytest.mark.slow
def test_a_client_that_stops_reading_stops_the_fetching(gw: GrpcProc) -> None:
    """20 MiB waiting in the topic; a Consume stream whose client reads nothing gets what
    fits in HTTP/2 flow-control windows, then the server stops fetching; once the client
    reads, everything arrives in order."""
    topic = "g-slow"
    create_topic(gw.bootstrap, topic)
    n, size = 5000, 4096
    p = Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 20})
    for i in range(n):
        p.produce(topic, value=f"{i:08d}".encode() + b"x" * (size - 8))
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(30) == 0

    def sent() -> float:
        text = httpx.get(gw.url + "/metrics", timeout=30).text
        m = re.search(r"^yak_gateway_grpc_records_sent_total (\S+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    before = sent()
    stream = gw.stub(**{"grpc.http2.bdp_probe": 0}).Consume(
        pb.ConsumeRequest(group_id="g-slow-g", topics=[topic], auto_offset_reset="earliest",
                          max_records=100), timeout=120)
    next(stream)
    # Read nothing; wait until the server has handed something over, then stops.
    stalled = wait_steady(lambda: sent() - before, 2.0, 30, "records sent to a non-reader")
    time.sleep(2.0)  # a window in which nothing more may be sent: the check, not a wait
    assert sent() - before == stalled, "the stream kept fetching for a client not reading"
    print(f"stream stalled after {stalled:.0f} records of {size} B")
    assert 0 < stalled * size < 8 * 1024 * 1024, stalled
    seen: list[int] = []
    while len(seen) < n:
        seen.extend(r.offset for r in next(stream).records)
    assert seen == list(range(n))
    stream.cancel()


# ------------------------------------------------------------------ discovery, health


def test_the_service_is_discovered_and_called_through_reflection_alone(gw: GrpcProc) -> None:
    """No generated code: reflection gives the descriptors, a dynamic message calls."""
    channel = grpc.insecure_channel(gw.target)
    db = ProtoReflectionDescriptorDatabase(channel)
    services = set(db.get_services())
    assert {"yak.v1.Gateway", "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection"} <= services
    pool = descriptor_pool.DescriptorPool(db)
    svc = pool.FindServiceByName("yak.v1.Gateway")
    methods = {m.name: m for m in svc.methods}
    assert set(methods) >= {"Produce", "ProduceStream", "Consume", "Commit", "ListTopics"}
    assert methods["ProduceStream"].client_streaming and methods["ProduceStream"].server_streaming
    assert methods["Consume"].server_streaming and not methods["Consume"].client_streaming
    record = pool.FindMessageTypeByName("yak.v1.Record")
    assert {(f.name, f.number) for f in record.fields} == {
        ("key", 1), ("value", 2), ("headers", 3), ("partition", 4), ("timestamp_ms", 5)}
    assert record.fields_by_name["key"].has_presence

    produce = methods["Produce"]
    req_cls = message_factory.GetMessageClass(produce.input_type)
    resp_cls = message_factory.GetMessageClass(produce.output_type)
    rec_cls = message_factory.GetMessageClass(record)
    call = channel.unary_unary(f"/{svc.full_name}/Produce",
                               request_serializer=req_cls.SerializeToString,
                               response_deserializer=resp_cls.FromString)
    resp = call(req_cls(topic="g-reflect", request_id=5,
                        records=[rec_cls(value=b"found by reflection")]), timeout=30)
    assert resp.request_id == 5 and resp.results[0].error_code == 0
    lt = methods["ListTopics"]
    topics = channel.unary_unary(
        f"/{svc.full_name}/ListTopics",
        request_serializer=message_factory.GetMessageClass(lt.input_type).SerializeToString,
        response_deserializer=message_factory.GetMessageClass(lt.output_type).FromString,
    )(message_factory.GetMessageClass(lt.input_type)(), timeout=30)
    assert ("g-reflect", 1) in {(t.name, t.partitions) for t in topics.topics}
    channel.close()


def test_health_serving_while_the_cluster_is_reachable(
    broker_factory: Any, tmp_path: Path,
) -> None:
    """`yak gateway --grpc --http none`: SERVING with a live broker, NOT_SERVING and
    UNAVAILABLE once it is gone."""
    broker = broker_factory()
    g = start_gateway_grpc(tmp_path / "gw", broker.bootstrap)
    try:
        wait_health(g.target, health_pb2.HealthCheckResponse.SERVING)
        wait_health(g.target, health_pb2.HealthCheckResponse.SERVING, service="yak.v1.Gateway")
        topics = g.stub().ListTopics(pb.ListTopicsRequest(), timeout=15)
        assert isinstance(list(topics.topics), list)
        broker.kill()
        wait_health(g.target, health_pb2.HealthCheckResponse.NOT_SERVING, timeout_s=30)
        with pytest.raises(grpc.RpcError) as e:
            g.stub().Produce(pb.ProduceRequest(topic="gone", records=[pb.Record(value=b"x")]),
                             timeout=30)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value.details()
    finally:
        g.stop()


# ------------------------------------------------------------------ errors


def test_error_statuses_with_auto_create_off_and_http_off(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    g = start_serve_grpc(tmp_path_factory.mktemp("yak-grpc-err"),
                         "--set", "auto.create.topics.enable=false", http=False)
    try:
        stub = g.stub()
        create_topic(g.bootstrap, "g-err")

        def status(call: Any) -> grpc.StatusCode:
            with pytest.raises(grpc.RpcError) as e:
                call()
            return e.value.code()

        one = [pb.Record(value=b"x")]
        assert status(lambda: stub.Produce(
            pb.ProduceRequest(topic="g-missing", records=one), timeout=30)
        ) == grpc.StatusCode.NOT_FOUND
        assert status(lambda: stub.Produce(
            pb.ProduceRequest(topic="", records=one), timeout=30)
        ) == grpc.StatusCode.INVALID_ARGUMENT
        assert status(lambda: stub.Produce(pb.ProduceRequest(
            topic="g-err", records=[pb.Record(value=b"x", partition=9)]), timeout=30)
        ) == grpc.StatusCode.NOT_FOUND
        assert status(lambda: stub.Produce(pb.ProduceRequest(
            topic="g-err", records=[pb.Record(value=b"x", timestamp_ms=-5)]), timeout=30)
        ) == grpc.StatusCode.INVALID_ARGUMENT

        def consume(**kw: Any) -> grpc.StatusCode:
            req = pb.ConsumeRequest(**({"group_id": "g-err-g", "topics": ["g-err"]} | kw))
            return status(lambda: next(stub.Consume(req, timeout=30)))

        assert consume(auto_offset_reset="smallest") == grpc.StatusCode.INVALID_ARGUMENT
        assert consume(topics=["g-missing"]) == grpc.StatusCode.NOT_FOUND
        assert consume(topics=[]) == grpc.StatusCode.INVALID_ARGUMENT
        assert consume(group_id="") == grpc.StatusCode.INVALID_ARGUMENT
        assert consume(max_records=-1) == grpc.StatusCode.INVALID_ARGUMENT
        assert status(lambda: stub.Commit(pb.CommitRequest(session_id="nope"), timeout=30)
                      ) == grpc.StatusCode.NOT_FOUND
        assert status(lambda: stub.Commit(pb.CommitRequest(), timeout=30)
                      ) == grpc.StatusCode.INVALID_ARGUMENT

        # In a stream, a request that fails as a whole gets its status in its response.
        out = list(stub.ProduceStream(iter([
            pb.ProduceRequest(topic="g-missing", request_id=1, records=one),
            pb.ProduceRequest(topic="g-err", request_id=2, records=one),
        ]), timeout=30))
        by_id = {r.request_id: r for r in out}
        assert by_id[1].status_code == grpc.StatusCode.NOT_FOUND.value[0]
        assert by_id[2].status_code == 0 and by_id[2].results[0].offset == 0

        # A record Kafka refuses is a per-record error, the others are written.
        big = b"x" * (1024 * 1024 + 100)
        resp = stub.Produce(pb.ProduceRequest(topic="g-err", records=[
            pb.Record(value=b"ok"), pb.Record(value=big)]), timeout=60)
        assert resp.results[0].error_code == 0 and resp.results[0].offset == 1
        assert resp.results[1].error_code == 10, resp.results[1]  # MSG_SIZE_TOO_LARGE
        assert resp.results[1].error_message
        assert "g-missing" not in {t.name for t in stub.ListTopics(pb.ListTopicsRequest(),
                                                                   timeout=15).topics}
    finally:
        g.stop()


def test_auto_create_on_produce_and_consume(gw: GrpcProc) -> None:
    stub = gw.stub()
    r = stub.Produce(pb.ProduceRequest(topic="g-auto", records=[pb.Record(value=b"a")]),
                     timeout=30)
    assert r.results[0].error_code == 0
    assert "g-auto" in {t.name for t in stub.ListTopics(pb.ListTopicsRequest(), timeout=15).topics}
    with pytest.raises(grpc.RpcError) as e:
        stub.Produce(pb.ProduceRequest(topic="bad name!", records=[pb.Record(value=b"a")]),
                     timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_concurrent_consumers_split_the_partitions(gw: GrpcProc) -> None:
    """Two streams in one group are two members: the partitions are shared, not doubled."""
    topic, group = "g-split", "g-split-g"
    create_topic(gw.bootstrap, topic, partitions=4)
    p = Producer({"bootstrap.servers": gw.bootstrap})
    for i in range(40):
        p.produce(topic, value=str(i).encode(), partition=i % 4)
    assert p.flush(20) == 0
    seen: list[list[tuple[int, int]]] = [[], []]
    streams = [gw.stub().Consume(pb.ConsumeRequest(group_id=group, topics=[topic],
                                                   auto_offset_reset="earliest"), timeout=60)
               for _ in range(2)]

    def drain(i: int) -> None:
        try:
            for resp in streams[i]:
                seen[i].extend((r.partition, r.offset) for r in resp.records)
        except grpc.RpcError:
            pass

    threads = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 40
    while len(set(seen[0]) | set(seen[1])) < 40 and time.monotonic() < deadline:
        time.sleep(0.2)  # back-off of this wait-for-40-records loop
    for s in streams:
        s.cancel()
    for t in threads:
        t.join(10)
    assert len(set(seen[0]) | set(seen[1])) == 40
    assert seen[0] and seen[1], "both members got partitions"


@pytest.mark.parametrize("args", [
    ["gateway", "--http", "none", "--grpc", "none"],
    ["gateway", "--grpc", "nonsense"],
    ["serve", "--http", "none", "--grpc", "127.0.0.1:notaport"],
])
def test_bad_grpc_flags_are_one_line_and_exit_2(args: list[str], tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", "from yak.cli.main import app; app()", *args,
                        *(["--data-dir", str(tmp_path)] if args[0] == "serve" else [])],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("yak: error:"), r.stderr
