"""Two or more versions of `yak/broker/connection.py` in ONE process, rounds interleaved
(A B A B ...), so the machine's load drifts over all of them alike (issue 28): the
in-process stub cases of `connection_request_path.py` (frames written into the
connection's receive buffer as a read would, a stand-in transport, stub handlers that
answer a 16-byte body), event-loop thread CPU per request.

    git show 5cc4a70:yak/broker/connection.py > /tmp/connection_before.py
    .venv/bin/python benchmarks/connection_ab.py /tmp/connection_before.py \
        yak/broker/connection.py [--requests 3000] [--rounds 15]

Every version runs against this tree's broker and the rest of its `yak/` (each file is
loaded as a module of its own, `yak.broker._connection_ab_N`), so the files must be
compatible with it. Prints, per case and version, the median and the best round.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BODY = bytes(16)


class FakeTransport:
    """Just enough of a transport for `KafkaConnection` (no sendfile: its writer writes
    every response with `writelines`), counting the responses written."""

    def __init__(self) -> None:
        self.responses = 0
        self.target = 0
        self.done: asyncio.Future[None] | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def writelines(self, buffers: Any) -> None:
        self.responses += 1
        if self.responses >= self.target and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _load(path: Path, i: int) -> Any:
    name = f"yak.broker._connection_ab_{i}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


async def _run(conn_cls: Any, broker: Any, frame: bytes, window: int, n: int) -> float:
    conn = conn_cls(broker)
    transport = FakeTransport()
    conn.connection_made(transport)
    burst = frame * window
    loop = asyncio.get_running_loop()
    rounds = n // window
    t0 = time.thread_time()
    for i in range(rounds):
        transport.target = (i + 1) * window
        transport.done = loop.create_future()
        buf = conn.get_buffer(-1)
        buf[:len(burst)] = burst
        conn.buffer_updated(len(burst))
        await transport.done
    cpu = time.thread_time() - t0
    conn.connection_lost(None)
    return cpu / (rounds * window) * 1e6


async def main(args: argparse.Namespace) -> None:
    from yak.broker import handlers
    from yak.broker.context import RawResponse
    from yak.broker.server import start_broker
    from yak.config import BrokerConfig
    from yak.protocol import kio_compat

    modules = [_load(p, i) for i, p in enumerate(args.connections)]
    running = await start_broker(BrokerConfig.load(data_dir=tempfile.mkdtemp(),
                                                   listen="127.0.0.1:0"))
    broker = running.broker

    async def answered(ctx: Any, request: Any) -> Any:
        if ctx.turn is not None:
            await ctx.turn.wait()
        return RawResponse([bytearray(BODY)], len(BODY))

    async def parked(ctx: Any, request: Any) -> Any:
        if ctx.turn is not None:
            await ctx.turn.wait()
        await asyncio.sleep(0)  # parks once, as a request on a delayed operation does
        return RawResponse([bytearray(BODY)], len(BODY))

    reg = handlers.registry()
    for key, handle in ((0, answered), (1, parked), (18, answered)):
        spec = reg[key]
        reg[key] = type(spec)(key, spec.min_version, spec.max_version, handle,
                              lambda ctx, body: None, spec.module)
    produce = kio_compat.schema_module("produce", 9, "request")
    fetch = kio_compat.schema_module("fetch", 12, "request")
    av = kio_compat.schema_module("api_versions", 3, "request")
    frames = {
        "stub_pipelined": (kio_compat.encode_request(produce.ProduceRequest(
            transactional_id=None, acks=1, timeout=datetime.timedelta(0),
            topic_data=()), 7), 8),
        "stub_parked": (kio_compat.encode_request(kio_compat.build(
            fetch.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0),
            min_bytes=0, max_bytes=1, isolation_level=0, session_id=0, session_epoch=-1,
            topics=(), forgotten_topics_data=(), rack_id=""), 7), 2),
        "stub_barrier": (kio_compat.encode_request(kio_compat.build(
            av.ApiVersionsRequest, client_software_name="b", client_software_version="1"),
            7), 8),
    }
    results: dict[tuple[str, int], list[float]] = {}
    for case, (frame, window) in frames.items():
        for m in modules:
            await _run(m.KafkaConnection, broker, frame, window, 300)  # warm-up
        for _ in range(args.rounds):
            for i, m in enumerate(modules):
                cpu = await _run(m.KafkaConnection, broker, frame, window, args.requests)
                results.setdefault((case, i), []).append(cpu)
    await running.stop()
    for case in frames:
        for i, p in enumerate(args.connections):
            r = results[(case, i)]
            print(f"{case:15s} {str(p):40.40s} median {statistics.median(r):6.2f} us, "
                  f"best {min(r):6.2f} us per request ({len(r)} rounds of {args.requests})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("connections", nargs="+", type=Path)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=15)
    import uvloop  # what `yak serve` runs on (yak/broker/server.py)

    uvloop.run(main(ap.parse_args()))
