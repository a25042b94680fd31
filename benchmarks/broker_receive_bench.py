"""The broker connection's receive path alone, old against new (issue 28): CPU of the
receiving process per frame and per MiB, frames of one size sent over loopback by another
process.

- `decoder`: what the broker did before: an `asyncio.Protocol` whose `data_received` gets
  each read as a new `bytes` from uvloop, cut by `FrameDecoder` (a frame spanning reads is
  joined);
- `receiver`: what it does now: an `asyncio.BufferedProtocol` reading into
  `FrameReceiver`'s buffer (no per-read `bytes`, no join).

The receiver keeps the last `--hold` frames alive (requests in flight: pipelined, in
purgatory) and drops the older ones, as the broker does when their responses go out.
Modes alternate per round; the machine is shared, so compare CPU, not rates.

    .venv/bin/python benchmarks/broker_receive_bench.py [--mib 300] [--rounds 4]
        [--frames 1048576,65536,16384] [--hold 8]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop  # noqa: E402

from yak.protocol.framing import FrameDecoder, FrameReceiver  # noqa: E402

MAX = 100 << 20


class _Sink:
    def __init__(self, frames: int, hold: int, done: asyncio.Future[None]) -> None:
        self.left = frames
        self.held: collections.deque[memoryview] = collections.deque(maxlen=hold)
        self.done = done

    def take(self, frames: list[memoryview]) -> None:
        for f in frames:
            self.held.append(f)  # (the oldest is dropped: its response went out)
        self.left -= len(frames)
        if self.left <= 0 and not self.done.done():
            self.done.set_result(None)


class DecoderProtocol(asyncio.Protocol):
    def __init__(self, sink: _Sink) -> None:
        self.sink = sink
        self.decoder = FrameDecoder(MAX)

    def data_received(self, data: bytes) -> None:
        self.sink.take(self.decoder.feed(data))


class ReceiverProtocol(asyncio.BufferedProtocol):
    def __init__(self, sink: _Sink) -> None:
        self.sink = sink
        self.receiver = FrameReceiver(MAX)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.receiver.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.sink.take(self.receiver.buffer_updated(nbytes))


async def _receive(mode: str, frame: int, count: int, hold: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    sink = _Sink(count, hold, done)
    cls = DecoderProtocol if mode == "decoder" else ReceiverProtocol
    server = await loop.create_server(lambda: cls(sink), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sender = subprocess.Popen([sys.executable, __file__, "--send", str(port), str(frame),
                               str(count)])
    while sink.left == count:  # the clock starts at the first frame
        await asyncio.sleep(0.001)
    cpu0, t0 = time.process_time(), time.perf_counter()
    await done
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    sender.wait(30)
    server.close()
    n = count - 1  # (the first frame came before the clock started)
    return {"cpu_us_per_frame": cpu / n * 1e6, "cpu_ms_per_mib": cpu / (n * frame) * (1 << 20) * 1e3,
            "mib_per_s": n * frame / wall / (1 << 20)}


def _send(port: int, frame: int, count: int) -> None:
    body = os.urandom(frame)
    one = struct.pack(">i", frame) + body
    per = max(1, (4 << 20) // len(one))
    block = one * per
    s = socket.create_connection(("127.0.0.1", port))
    sent = 0
    while sent < count:
        k = min(per, count - sent)
        s.sendall(block if k == per else one * k)
        sent += k
    s.close()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--send":
        _send(*(int(x) for x in sys.argv[2:5]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--frames", default="1048576,65536,16384")
    ap.add_argument("--hold", type=int, default=8)
    a = ap.parse_args()
    rows = []
    for frame in (int(x) for x in a.frames.split(",")):
        count = max(100, (a.mib << 20) // frame)
        for r in range(a.rounds):
            for mode in ("decoder", "receiver") if r % 2 == 0 else ("receiver", "decoder"):
                d = uvloop.run(_receive(mode, frame, count, a.hold))
                row = {"frame": frame, "mode": mode, "round": r,
                       **{k: round(v, 3) for k, v in d.items()},
                       "load1": round(os.getloadavg()[0], 2)}
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    summary = {}
    for frame in sorted({x["frame"] for x in rows}):
        med = {m: statistics.median(x["cpu_ms_per_mib"] for x in rows
                                    if x["frame"] == frame and x["mode"] == m)
               for m in ("decoder", "receiver")}
        summary[frame] = {"decoder_cpu_ms_per_mib": med["decoder"],
                          "receiver_cpu_ms_per_mib": med["receiver"],
                          "receiver_over_decoder": round(med["receiver"] / med["decoder"], 3)}
    print(json.dumps({"hold": a.hold, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
