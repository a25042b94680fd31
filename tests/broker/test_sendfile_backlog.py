"""The response writer's backlog (yak/broker/sendfile.py): when the socket's send buffer
fills part-way through a response, the rest waits as regions and goes out by sendfile once
the reader has read, in order with every response written meanwhile.

- In process, over a real socket pair on uvloop and on asyncio's loop: a reader that reads
  nothing for a while and takes small bites, responses of memory buffers and file regions
  mixed, some written while a backlog exists: the bytes arrive exactly in write order, the
  writer reports blocked then unblocked, and every region's descriptor is closed.
- A real broker process with sendfile on and off: three pipelined Fetch requests of a few
  MiB each to a client whose receive buffer is small and which waits before reading get
  their answers in request order with every record (tests/broker/rawclient.py frames).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import uvloop
from confluent_kafka import Producer

from broker.rawclient import RawClient
from yak.broker.sendfile import HAVE_SENDFILE, ResponseWriter
from yak.protocol import kio_compat
from yak.protocol.records import decode_records, iter_batches
from yak.storage.file_region import FileRegion

pytestmark = pytest.mark.skipif(not HAVE_SENDFILE, reason="no os.sendfile")


class _Sink(asyncio.Protocol):
    def connection_made(self, transport: Any) -> None:
        self.transport = transport


def _slow_reader(sock: socket.socket, total: int, out: list[bytes]) -> None:
    time.sleep(0.3)  # let the writer fill the socket and build a backlog
    got = 0
    while got < total:
        chunk = sock.recv(7_000)  # small bites: many writability events
        if not chunk:
            break
        out.append(chunk)
        got += len(chunk)


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_backlog_keeps_write_order(tmp_path: Path, loop_kind: str) -> None:
    data = os.urandom(6 << 20)
    path = tmp_path / "segment"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)

    def region(pos: int, size: int) -> FileRegion:
        return FileRegion(os.dup(fd), pos, size, 0)

    writes: list[list[Any]] = [
        [b"head-1", region(0, 2 << 20), b"mid", region(3 << 20, 1 << 20)],
        [b"plain response, no region"],
        [b"head-3", region(1 << 20, 3 << 20)],
        [bytearray(b"tail")],
    ]
    expected = b"".join(bytes(b) if type(b) is not FileRegion
                        else data[b.position:b.position + b.size] for w in writes for b in w)
    regions = [b for w in writes for b in w if type(b) is FileRegion]
    blocked: list[bool] = []

    async def body() -> ResponseWriter:
        a, b = socket.socketpair()
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32_768)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(_Sink, sock=a)
        writer = ResponseWriter(transport, a.fileno(), blocked.append,
                                lambda e: pytest.fail(f"write failed: {e!r}"))
        out: list[bytes] = []
        reader = threading.Thread(target=_slow_reader, args=(b, len(expected), out))
        reader.start()
        for w in writes:
            writer.write(w)
            await asyncio.sleep(0)
        deadline = loop.time() + 30
        while writer.backlogged and loop.time() < deadline:
            await asyncio.sleep(0.01)
        await loop.run_in_executor(None, reader.join, 30)
        transport.close()
        b.close()
        assert b"".join(out) == expected
        return writer

    try:
        writer = uvloop.run(body()) if loop_kind == "uvloop" else asyncio.run(body())
    finally:
        os.close(fd)
    assert writer.deferred >= 1, "the socket never filled: the backlog was not exercised"
    assert blocked[0] is True and blocked[-1] is False
    assert all(r.fd == -1 for r in regions), "a region's descriptor was left open"


def _fetch_request(topic_id: Any, offset: int, max_bytes: int) -> Any:
    mod = kio_compat.schema_module("fetch", 13, "request")
    part = kio_compat.build(mod.FetchPartition, partition=0, current_leader_epoch=-1,
                            fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                            partition_max_bytes=max_bytes)
    topic = kio_compat.build(mod.FetchTopic, topic_id=topic_id, partitions=(part,))
    return kio_compat.build(mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
                            max_bytes=max_bytes, isolation_level=0, session_id=0,
                            session_epoch=-1, topics=(topic,), forgotten_topics_data=(),
                            rack_id="")


def _topic_id(client: RawClient, topic: str) -> Any:
    mod = kio_compat.schema_module("metadata", 12, "request")
    req = kio_compat.build(mod.MetadataRequest, topics=(kio_compat.build(
        mod.MetadataRequestTopic, name=topic, topic_id=None),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False)
    return client.request(req).topics[0].topic_id


@pytest.mark.parametrize("sendfile", ["true", "false"])
def test_pipelined_fetches_to_a_slow_reader(broker_factory: Any, sendfile: str) -> None:
    broker = broker_factory(**{"socket.sendfile.enable": sendfile})
    n, size = 6000, 1024
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                  "batch.size": 256 << 10})
    for i in range(n):
        p.produce("slow", value=(b"%08d" % i) * (size // 8), partition=0)
    assert p.flush(30) == 0
    with RawClient(broker.bootstrap) as probe:
        topic_id = _topic_id(probe, "slow")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16_384)
    sock.settimeout(30)
    host, port = broker.bootstrap.rsplit(":", 1)
    sock.connect((host, int(port)))
    client = RawClient.__new__(RawClient)
    client.sock, client._cid = sock, 0
    with client:
        starts = (0, 2000, 4000)
        cids = [client.send(_fetch_request(topic_id, s, 3 << 20)) for s in starts]
        time.sleep(0.5)  # read nothing: the broker's socket fills
        for cid, start in zip(cids, starts, strict=True):
            got_cid, resp = kio_compat.decode_response(1, 13, client.recv_frame())
            assert got_cid == cid
            part = resp.responses[0].partitions[0]
            assert part.error_code == 0
            offsets = []
            data = memoryview(part.records)
            for pos, h in iter_batches(data):
                for rec in decode_records(data[pos:pos + h.size]):
                    assert rec.value == (b"%08d" % rec.offset) * (size // 8)
                    offsets.append(rec.offset)
            assert offsets[0] <= start < offsets[-1]
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
