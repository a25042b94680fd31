"""Connection behaviour: pipelined requests answered in order; a client that never reads
its responses is held back alone, with bounded broker memory, while others proceed."""

from __future__ import annotations

import datetime
import socket
import time
import uuid

import psutil

from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

from .rawclient import RawClient


def test_pipelined_requests_answered_in_order(module_broker) -> None:
    topic = f"pipe-{uuid.uuid4().hex[:8]}"
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic)
        sent = []
        meta = kio_compat.build(kio_compat.request_class(3, 12), topics=None,
                                allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)
        api = kio_compat.build(kio_compat.request_class(18, 3), client_software_name="x",
                               client_software_version="1")
        mod = kio_compat.schema_module("produce", 9, "request")
        for i in range(60):
            if i % 3 == 0:
                req = meta
            elif i % 3 == 1:
                req = api
            else:
                req = mod.ProduceRequest(
                    transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
                    topic_data=(mod.TopicProduceData(name=topic, partition_data=(
                        mod.PartitionProduceData(index=0, records=build_batch(
                            [Record(None, b"%d" % i)])),)),))
            sent.append((c.send(req), req))
        offsets = []
        for cid, req in sent:
            got_cid, resp = kio_compat.decode_response(
                int(req.__api_key__), int(req.__version__), c.recv_frame())
            assert got_cid == cid
            if int(req.__api_key__) == 0:
                offsets.append(resp.responses[0].partition_responses[0].base_offset)
        assert offsets == list(range(20))


def test_slow_reader_does_not_stall_producers(module_broker) -> None:
    topic = f"slow-{uuid.uuid4().hex[:8]}"
    big = build_batch([Record(None, b"y" * 1000) for _ in range(900)])  # ~0.9 MB
    proc = psutil.Process(module_broker.pid)
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic)
        for _ in range(5):
            assert c.produce_one(topic, 0, big)[0] == ErrorCode.none
    rss0 = proc.memory_info().rss
    slow = RawClient(module_broker.bootstrap)
    slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    mod = kio_compat.schema_module("fetch", 12, "request")
    req = kio_compat.build(
        mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0),
        min_bytes=0, max_bytes=50 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(mod.FetchTopic(topic=topic, partitions=(kio_compat.build(
            mod.FetchPartition, partition=0, fetch_offset=0, partition_max_bytes=10 << 20),)),),
        forgotten_topics_data=(), rack_id="")
    frame = kio_compat.encode_request(req, 1)
    slow.sock.setblocking(False)
    pushed = 0
    try:
        for _ in range(400):  # 400 x 4.5 MB of responses requested, none read
            try:
                slow.sock.send(frame)
                pushed += 1
            except BlockingIOError:
                break
        with RawClient(module_broker.bootstrap) as c:
            worst = 0.0
            for _ in range(30):
                t0 = time.monotonic()
                assert c.produce_one(topic, 0, build_batch([Record(None, b"p")]))[0] == 0
                worst = max(worst, time.monotonic() - t0)
        assert worst < 1.0
        assert proc.memory_info().rss - rss0 < 150 * 1024 * 1024
        assert pushed >= 16
    finally:
        slow.close()
