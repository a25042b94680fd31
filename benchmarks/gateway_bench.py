"""Gateway benchmark: REST, WebSocket and gRPC produce and consume, side by side, one run.

A broker (`yak serve --http none`) and a standalone gateway (`yak gateway --http --grpc`)
run as two processes, so the gateway's CPU (psutil user + system of its own pid) is the
gateway's alone. One client at a time, in this process; its CPU is reported too, since on
a 2-core machine the Python client often sets the rate.

Produce, N records of S bytes to a fresh 3-partition topic per case:
- rest:         POST /topics/t, 100 records per request (binary = base64), one at a time
- ws:           one record per `produce` frame, pipelined (the socket keeps up to 1000 open)
- grpc-unary:   Produce, 100 records per request, one at a time
- grpc-stream:  ProduceStream, 100 records per request, pipelined (up to 64 in flight)
- grpc-stream-1: ProduceStream, 1 record per request, pipelined (WebSocket's granularity)
Consume, the same N records read back (written beforehand with confluent-kafka):
- rest: one consumer instance, GET records (binary) in a loop
- ws:   subscribe (no group), pushed messages
- grpc: Consume, max_records 500
Rates are records / wall second from the first record answered to the last; CPU per
record is the gateway's CPU over the same phase divided by N.

    .venv/bin/python benchmarks/gateway_bench.py [--records 20000] [--sizes 100,1024] [--rounds 3]

Prints a markdown table (medians over rounds) and JSON with every round.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import psutil
import websockets
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from yak.gateway.grpc_api import gateway_pb2 as pb  # noqa: E402
from yak.gateway.grpc_api import gateway_pb2_grpc as pb_grpc  # noqa: E402

BATCH = 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(args: list[str], log: Path, ready: str) -> subprocess.Popen[bytes]:
    out = open(log, "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-c", "from yak.cli.main import app; app()", *args],
                            stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        if ready in log.read_text(errors="replace"):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{args[0]} did not start:\n{log.read_text(errors='replace')[-3000:]}")


class Meter:
    """CPU seconds of the gateway process and of this client over one phase."""

    def __init__(self, pid: int) -> None:
        self.gw = psutil.Process(pid)
        self.me = psutil.Process()

    def _cpu(self) -> tuple[float, float]:
        g, m = self.gw.cpu_times(), self.me.cpu_times()
        return g.user + g.system, m.user + m.system

    def __enter__(self) -> Meter:
        self.g0, self.c0 = self._cpu()
        return self

    def __exit__(self, *exc: Any) -> None:
        g1, c1 = self._cpu()
        self.gateway_s, self.client_s = g1 - self.g0, c1 - self.c0


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=3)])[name].result(15)


def payloads(n: int, size: int) -> list[bytes]:
    return [f"{i:010d}".encode() + b"x" * max(size - 10, 0) for i in range(n)]


# ------------------------------------------------------------------ produce


def rest_produce(url: str, topic: str, values: list[bytes]) -> None:
    ctype = {"content-type": "application/vnd.kafka.binary.v2+json"}
    with httpx.Client(base_url=url, timeout=60) as c:
        for i in range(0, len(values), BATCH):
            body = {"records": [{"value": base64.b64encode(v).decode()}
                                for v in values[i:i + BATCH]]}
            r = c.post(f"/topics/{topic}", json=body, headers=ctype)
            assert r.status_code == 200, r.text
            assert all(o["error_code"] is None for o in r.json()["offsets"]), r.text


def ws_produce(url: str, topic: str, values: list[bytes]) -> None:
    async def run() -> None:
        async with websockets.connect(url.replace("http://", "ws://") + "/ws",
                                      max_size=2**22) as ws:
            async def send() -> None:
                for i, v in enumerate(values):
                    await ws.send(json.dumps({"type": "produce", "id": i, "topic": topic,
                                              "value": v.decode()}))
            sender = asyncio.get_running_loop().create_task(send())
            got = 0
            while got < len(values):
                msg = json.loads(await asyncio.wait_for(ws.recv(), 60))
                assert msg["type"] == "produced", msg
                got += 1
            await sender

    asyncio.run(run())


def grpc_unary(target: str, topic: str, values: list[bytes]) -> None:
    with grpc.insecure_channel(target) as ch:
        stub = pb_grpc.GatewayStub(ch)
        for i in range(0, len(values), BATCH):
            resp = stub.Produce(pb.ProduceRequest(
                topic=topic, records=[pb.Record(value=v) for v in values[i:i + BATCH]]),
                timeout=60)
            assert all(r.error_code == 0 for r in resp.results)


def grpc_stream(target: str, topic: str, values: list[bytes], batch: int = BATCH) -> None:
    def requests() -> Iterator[pb.ProduceRequest]:
        for i in range(0, len(values), batch):
            yield pb.ProduceRequest(topic=topic, request_id=i,
                                    records=[pb.Record(value=v) for v in values[i:i + batch]])

    with grpc.insecure_channel(target) as ch:
        n = 0
        for resp in pb_grpc.GatewayStub(ch).ProduceStream(requests(), timeout=300):
            assert resp.status_code == 0 and all(r.error_code == 0 for r in resp.results)
            n += len(resp.results)
        assert n == len(values), n


# ------------------------------------------------------------------ consume


def fill(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % 3)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def rest_consume(url: str, topic: str, n: int, clock: Callable[[], None]) -> None:
    v2 = {"content-type": "application/vnd.kafka.v2+json"}
    with httpx.Client(base_url=url, timeout=60) as c:
        r = c.post(f"/consumers/bench-{topic}", headers=v2,
                   json={"format": "binary", "auto.offset.reset": "earliest"})
        base = f"/consumers/bench-{topic}/instances/{r.json()['instance_id']}"
        c.post(f"{base}/subscription", json={"topics": [topic]}, headers=v2)
        got = 0
        while got < n:
            r = c.get(f"{base}/records", params={"timeout": 1000},
                      headers={"accept": "application/vnd.kafka.binary.v2+json"})
            batch = r.json()
            if batch and not got:
                clock()
            got += len(batch)
        c.delete(base)


def ws_consume(url: str, topic: str, n: int, clock: Callable[[], None]) -> None:
    async def run() -> None:
        async with websockets.connect(url.replace("http://", "ws://") + "/ws",
                                      max_size=2**22) as ws:
            await ws.send(json.dumps({"type": "subscribe", "topics": [topic],
                                      "offset_reset": "earliest"}))
            got = 0
            while got < n:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 60))
                if msg["type"] == "message":
                    if not got:
                        clock()
                    got += 1

    asyncio.run(run())


def grpc_consume(target: str, topic: str, n: int, clock: Callable[[], None]) -> None:
    with grpc.insecure_channel(target) as ch:
        stream = pb_grpc.GatewayStub(ch).Consume(pb.ConsumeRequest(
            group_id=f"bench-{topic}", topics=[topic], auto_offset_reset="earliest",
            max_records=500), timeout=300)
        got = 0
        for resp in stream:
            if resp.records and not got:
                clock()
            got += len(resp.records)
            if got >= n:
                break
        stream.cancel()


# ------------------------------------------------------------------ driver


def measure(meter: Meter, fn: Callable[..., None], *args: Any, n: int,
            consume: bool = False) -> dict[str, float]:
    t = {"first": 0.0}

    def clock() -> None:
        t["first"] = time.perf_counter()

    with meter:
        t0 = time.perf_counter()
        if consume:
            fn(*args, n, clock)
        else:
            fn(*args)
        t1 = time.perf_counter()
    start = t["first"] if consume else t0
    return {"records_per_s": n / (t1 - start), "gateway_us_per_record": meter.gateway_s / n * 1e6,
            "client_us_per_record": meter.client_s / n * 1e6, "seconds": t1 - start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="yak-gw-bench-"))
    kport, hport, gport = free_port(), free_port(), free_port()
    bootstrap, url, target = f"127.0.0.1:{kport}", f"http://127.0.0.1:{hport}", f"127.0.0.1:{gport}"
    broker = spawn(["serve", "--data-dir", str(tmp / "data"), "--listen", bootstrap,
                    "--http", "none"], tmp / "broker.log", "Yak broker ready")
    gateway = spawn(["gateway", "--bootstrap", bootstrap, "--http", f"127.0.0.1:{hport}",
                     "--grpc", target], tmp / "gateway.log", "Yak gateway ready")
    meter = Meter(gateway.pid)
    rows: list[dict[str, Any]] = []
    try:
        for rnd in range(args.rounds):
            for size in (int(s) for s in args.sizes.split(",")):
                values = payloads(args.records, size)
                n = len(values)
                cases: list[tuple[str, str, Callable[..., None], tuple[Any, ...]]] = [
                    ("produce", "rest", rest_produce, (url,)),
                    ("produce", "ws", ws_produce, (url,)),
                    ("produce", "grpc-unary", grpc_unary, (target,)),
                    ("produce", "grpc-stream", grpc_stream, (target,)),
                    ("produce", "grpc-stream-1",
                     lambda t, topic, v: grpc_stream(t, topic, v, 1), (target,)),
                ]
                if rnd % 2:  # alternate the order: no transport always goes first
                    cases.reverse()
                for op, name, fn, pre in cases:
                    topic = f"p-{name}-{size}-{rnd}"
                    create_topic(bootstrap, topic)
                    res = measure(meter, fn, *pre, topic, values, n=n)
                    rows.append({"round": rnd, "op": op, "transport": name, "size": size, **res})
                    print(json.dumps(rows[-1]), file=sys.stderr)
                consumers = [("rest", rest_consume, url), ("ws", ws_consume, url),
                             ("grpc", grpc_consume, target)]
                if rnd % 2:
                    consumers.reverse()
                for name, fn, where in consumers:
                    topic = f"c-{name}-{size}-{rnd}"
                    create_topic(bootstrap, topic)
                    fill(bootstrap, topic, values)
                    res = measure(meter, fn, where, topic, n=n, consume=True)
                    rows.append({"round": rnd, "op": "consume", "transport": name,
                                 "size": size, **res})
                    print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        for p in (gateway, broker):
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(rows))
    print()
    print("| op | transport | size | records/s | gateway us/record | client us/record |")
    print("|---|---|---|---|---|---|")
    keys = sorted({(r["op"], r["transport"], r["size"]) for r in rows},
                  key=lambda k: (k[0] != "produce", k[2], k[1]))
    for op, tr, size in keys:
        rs = [r for r in rows if (r["op"], r["transport"], r["size"]) == (op, tr, size)]
        med = {k: statistics.median(r[k] for r in rs)
               for k in ("records_per_s", "gateway_us_per_record", "client_us_per_record")}
        print(f"| {op} | {tr} | {size} B | {med['records_per_s']:,.0f} | "
              f"{med['gateway_us_per_record']:.1f} | {med['client_us_per_record']:.1f} |")


if __name__ == "__main__":
    main()
