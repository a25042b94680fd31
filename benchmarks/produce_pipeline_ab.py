"""Broker CPU per pipelined Produce request, two trees alternating (issue 21).

librdkafka adapts its batch size to the broker's speed, so `yak bench produce` on a busy
machine compares different request shapes. This sends the same requests to both: one
connection, an idempotent producer, `--inflight` requests in flight (librdkafka's
max.in.flight), each with one batch of `--records` records to each of 4 partitions,
acks=all, and reads the broker's CPU time (user + system, from /proc) per request.

    python benchmarks/produce_pipeline_ab.py BEFORE_TREE AFTER_TREE [--rounds 4] [--requests 20000]

Each tree is a directory holding a `yak` package (e.g. `git archive COMMIT | tar -x`).
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from yak.protocol import kio_compat  # noqa: E402
from yak.protocol.records import Record, build_batch  # noqa: E402

PARTITIONS = 4


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _request(sock: socket.socket, req: object, cid: int) -> object:
    sock.sendall(kio_compat.encode_request(req, cid))
    return _read(sock, req)


def _read(sock: socket.socket, req: object) -> object:
    head = _exact(sock, 4)
    frame = _exact(sock, struct.unpack(">i", head)[0])
    return kio_compat.decode_response(int(req.__api_key__), int(req.__version__), frame)[1]


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def run_one(tree: Path, requests: int, inflight: int, records: int) -> float:
    """Broker CPU microseconds per Produce request."""
    with tempfile.TemporaryDirectory() as d:
        port_sock = socket.socket()
        port_sock.bind(("127.0.0.1", 0))
        port = port_sock.getsockname()[1]
        port_sock.close()
        broker = subprocess.Popen(
            [sys.executable, "-m", "yak.broker.server", "--data-dir", f"{d}/data",
             "--listen", f"127.0.0.1:{port}"], cwd=tree, env={**os.environ,
                                                            "PYTHONPATH": str(tree)},
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert broker.stdout is not None
            for line in broker.stdout:
                if "ready on" in line:
                    break
            sock = socket.create_connection(("127.0.0.1", port))
            mod = kio_compat.schema_module("create_topics", 5, "request")
            _request(sock, mod.CreateTopicsRequest(topics=(mod.CreatableTopic(
                name="t", num_partitions=PARTITIONS, replication_factor=1, assignments=(),
                configs=()),), timeout=datetime.timedelta(seconds=10), validate_only=False), 1)
            mod = kio_compat.schema_module("init_producer_id", 4, "request")
            r = _request(sock, kio_compat.build(
                mod.InitProducerIdRequest, transactional_id=None,
                transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
                producer_epoch=-1), 2)
            pid, epoch = int(r.producer_id), int(r.producer_epoch)
            produce = kio_compat.schema_module("produce", 9, "request")
            frames = []
            now = int(time.time() * 1000)
            for i in range(requests):
                frames.append(kio_compat.encode_request(produce.ProduceRequest(
                    transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
                    topic_data=(produce.TopicProduceData(name="t", partition_data=tuple(
                        produce.PartitionProduceData(index=p, records=build_batch(
                            [Record(None, b"x" * 100, now)] * records, producer_id=pid,
                            producer_epoch=epoch, base_sequence=i * records))
                        for p in range(PARTITIONS))),)), 10 + i))
            req = produce.ProduceRequest(transactional_id=None, acks=-1,
                                         timeout=datetime.timedelta(seconds=30), topic_data=())
            cpu0 = _cpu_s(broker.pid)
            sent = 0
            for i in range(requests):
                while sent - i < inflight and sent < requests:
                    sock.sendall(frames[sent])
                    sent += 1
                resp = _read(sock, req)
                assert all(p.error_code == 0 for t in resp.responses
                           for p in t.partition_responses), resp
            cpu = _cpu_s(broker.pid) - cpu0
            sock.close()
            return cpu / requests * 1e6
        finally:
            broker.terminate()
            broker.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--inflight", type=int, default=5)
    ap.add_argument("--records", type=int, default=1)
    a = ap.parse_args()
    got: dict[str, list[float]] = {"before": [], "after": []}
    for r in range(a.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for name in order:
            us = run_one(getattr(a, name), a.requests, a.inflight, a.records)
            got[name].append(us)
            print(f"round {r + 1} {name:6}: {us:7.1f} us of broker CPU per request", flush=True)
    for name, v in got.items():
        v.sort()
        print(f"{name:6}: median {v[len(v) // 2]:.1f} us/request, min {v[0]:.1f}")
    print(f"after/before (medians): {sorted(got['after'])[len(got['after']) // 2] / sorted(got['before'])[len(got['before']) // 2]:.2f}")


if __name__ == "__main__":
    main()
