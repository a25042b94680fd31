"""The broker's cost per request, measured in ways that remove most of the machine's noise.

The end-to-end broker benchmark (benchmarks/broker_bench.py) reports CPU per message, which is
per-request work divided by the producer's batch size; on a loaded machine both move. These
measurements isolate the per-request part. Each runs against the tree on PYTHONPATH, so two
trees can be compared by alternating them (see docs/benchmarks/broker.md):

    PYTHONPATH=. python benchmarks/request_path_bench.py hook        # metrics hook, CPU per call
    PYTHONPATH=. python benchmarks/request_path_bench.py handler     # Produce/Fetch handler, in-process
    PYTHONPATH=. python benchmarks/request_path_bench.py stubbed     # Produce path, storage write stubbed
    PYTHONPATH=. python benchmarks/request_path_bench.py requests    # real producer: requests and CPU

The first three call the broker's own functions in-process (no sockets, CPU time of this
process); `requests` starts `yak serve --http` and reads its request counter from /metrics.
They work on trees from before and after the partition layer (issue 10).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from types import SimpleNamespace
from typing import Any

PER_BATCH, PARTS = 250, 4


def _best(fn: Any, n: int, repeat: int = 5) -> float:
    """Best CPU microseconds per call over `repeat` rounds of `n` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def hook() -> str:
    import yak.broker.metrics as bm
    from yak.protocol.records import Record, build_batch

    batch = build_batch([Record(None, b"x" * 100) for _ in range(100)])
    if hasattr(bm, "BrokerMetrics"):
        from yak.partition import LogAppendInfo, PartitionAppendResult

        m = bm.BrokerMetrics()
        results = [PartitionAppendResult("t", p, info=LogAppendInfo(0, 99, -1, 0, 100, len(batch)))
                   for p in range(PARTS)]

        def other() -> None:
            m.record_request(3, time.perf_counter())

        def produce() -> None:
            m.record_request(0, time.perf_counter())
            m.record_appended(results)

        def fetch() -> None:
            m.record_fetched("t", [batch], len(batch))
    else:  # before issue 10: module-level functions, produce counted from the request
        req = SimpleNamespace(topics=[SimpleNamespace(
            name="t", topic_id=None, partitions=[(p, memoryview(batch)) for p in range(PARTS)])])
        part = SimpleNamespace(records=[batch], records_size=len(batch))
        res = [SimpleNamespace(name="t", partitions=[part])]

        def other() -> None:
            bm.record_request(3, time.perf_counter(), None)

        def produce() -> None:
            bm.record_request(0, time.perf_counter(), req)

        def fetch() -> None:
            bm.record_fetch(res)
    n = 200_000
    return (f"metrics hook CPU per call: non-produce request {_best(other, n):.2f} us, "
            f"{PARTS}-partition Produce {_best(produce, n):.2f} us, one-batch Fetch "
            f"{_best(fetch, n):.2f} us")


async def _broker(data_dir: str) -> Any:
    from yak.broker.server import start_broker
    from yak.config import BrokerConfig

    running = await start_broker(BrokerConfig.load(data_dir=data_dir, listen="127.0.0.1:0"))
    created = running.broker.topics.create("bench", PARTS)
    if asyncio.iscoroutine(created):  # the one metadata path creates topics asynchronously
        await created
    return running


def _check_produced(response: Any) -> None:
    """Refuse to time an error path: every partition of the first answer must be error-free."""
    from yak.protocol import kio_compat

    raw = response.buffers if hasattr(response, "buffers") else None
    if raw is None:
        return  # trees whose handler answered kio objects: nothing to decode here
    body = b"".join(bytes(b) for b in raw)
    answer, _ = kio_compat.decode(kio_compat.response_class(0, 9), body)
    errors = {(t.name, p.index): int(p.error_code) for t in answer.responses
              for p in t.partition_responses if int(p.error_code)}
    if errors:
        raise SystemExit(f"the benchmark's Produce was answered with errors: {errors}")


def _produce_request() -> Any:
    from yak.protocol.produce_codec import ProduceRequestData, ProduceTopic
    from yak.protocol.records import Record, build_batch

    batch = memoryview(build_batch([Record(None, b"x" * 100) for _ in range(PER_BATCH)]))
    return ProduceRequestData(None, -1, 30000,
                              [ProduceTopic("bench", None, [(p, batch) for p in range(PARTS)])])


async def _handler(stub_storage: bool) -> str:
    from yak.broker.context import RequestContext
    from yak.broker.handlers import fetch as fh
    from yak.broker.handlers import produce as ph
    from yak.protocol import kio_compat

    if stub_storage:
        from yak.storage import log as slog

        def append(self: Any, records: Any, leader_epoch: int, **kw: Any) -> Any:
            base = self.log_end_offset
            self.log_end_offset = base + PER_BATCH
            return slog.AppendResult(base, base + PER_BATCH - 1, -1, self.log_start_offset)

        slog.PartitionLog.append_as_leader = append  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as d:
        running = await _broker(d)
        b = running.broker
        req = _produce_request()
        ctx = RequestContext(b, 0, 9, 1, "bench", ("127.0.0.1", 1))
        if hasattr(b, "metrics"):
            def hook() -> None:
                b.metrics.record_request(0, time.perf_counter())
        else:
            from yak.broker import metrics as bm

            def hook() -> None:
                bm.record_request(0, time.perf_counter(), req)
        _check_produced(await ph.handle(ctx, req))
        n = 5000 if stub_storage else 1500
        best = float("inf")
        for _ in range(5 if stub_storage else 1):
            t0 = time.process_time()
            for _ in range(n):
                await ph.handle(ctx, req)
                if stub_storage:
                    hook()
            best = min(best, (time.process_time() - t0) / n * 1e6)
        if stub_storage:
            await running.stop()
            return (f"Produce path, storage write stubbed, with the connection's metrics hook: "
                    f"{best:.1f} us CPU per {PARTS}-partition acks=all request (best of 5)")
        mod = kio_compat.schema_module("fetch", 12, "request")

        def fetch_request(offset: int) -> Any:
            parts = tuple(kio_compat.build(
                mod.FetchPartition, partition=p, fetch_offset=offset, partition_max_bytes=1 << 20,
                current_leader_epoch=-1, log_start_offset=-1, last_fetched_epoch=-1)
                for p in range(PARTS))
            request = kio_compat.build(
                mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0,
                max_bytes=50 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                topics=(kio_compat.build(mod.FetchTopic, topic="bench", partitions=parts),),
                forgotten_topics_data=(), rack_id="")
            try:  # trees with the hand-written Fetch decoder hand the handler its result
                from yak.protocol.fetch_codec import decode_fetch_request
            except ImportError:  # older trees passed kio's object to the handler
                return request
            return decode_fetch_request(12, memoryview(kio_compat.encode(request)))

        fctx = RequestContext(b, 1, 12, 1, "bench", ("127.0.0.1", 1))
        reqs = [fetch_request(i * PER_BATCH * 40) for i in range(n // 40)]
        t0 = time.process_time()
        for _ in range(5):
            for r in reqs:
                await fh.handle(fctx, r)
        fetch = (time.process_time() - t0) / (5 * len(reqs)) * 1e6
        await running.stop()
    return (f"Produce handler {best:.0f} us CPU per request ({PARTS} x {PER_BATCH} records of "
            f"100 B, acks=all, storage included); Fetch handler {fetch:.0f} us per request "
            f"({PARTS} partitions x 1 MiB)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def requests() -> str:
    """The broker bench's producer against `yak serve`: Produce requests and broker CPU."""
    import psutil
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory() as tmp:
        port, http = _free_port(), _free_port()
        out_path = os.path.join(tmp, "out")
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "yak.cli.main", "serve", "--data-dir", tmp + "/d",
                 "--listen", f"127.0.0.1:{port}", "--http", f"127.0.0.1:{http}"],
                stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while b"ready" not in _read(out_path):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("broker did not start")
                time.sleep(0.1)
            bootstrap = f"127.0.0.1:{port}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("bench", PARTS, 1)])["bench"].result(30)

            def produce_requests() -> float:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=30) as r:
                    for line in r.read().decode().splitlines():
                        if line.startswith('yak_broker_requests_total{api="produce"}'):
                            return float(line.split()[-1])
                return 0.0

            produce_requests()  # the gateway loads on first use
            n0 = produce_requests()
            bp = psutil.Process(proc.pid)
            p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                          "batch.size": 1048576, "queue.buffering.max.messages": 2_000_000,
                          "queue.buffering.max.kbytes": 2_000_000, "compression.type": "none"})
            c0 = sum(bp.cpu_times()[:2])
            n = 1_000_000
            for i in range(n):
                while True:
                    try:
                        p.produce("bench", b"x" * 100, partition=i % PARTS)
                        break
                    except BufferError:
                        p.poll(0.01)
                if i % 10000 == 0:
                    p.poll(0)
            if p.flush(120):
                raise SystemExit("messages not delivered")
            cpu = sum(bp.cpu_times()[:2]) - c0
            reqs = produce_requests() - n0
        finally:
            proc.terminate()
            proc.wait(30)
    return (f"{reqs:.0f} Produce requests for {n} messages ({n / reqs:.0f} per request); broker "
            f"CPU {cpu / n * 1e6:.3f} us per message, {cpu / reqs * 1e6:.0f} us per request")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["hook", "handler", "stubbed", "requests"])
    a = ap.parse_args()
    if a.what == "hook":
        print(hook())
    elif a.what == "handler":
        print(asyncio.run(_handler(stub_storage=False)))
    elif a.what == "stubbed":
        print(asyncio.run(_handler(stub_storage=True)))
    else:
        print(requests())


if __name__ == "__main__":
    main()
