"""The broker connection's generic per-request cost (issue 28): the event-loop thread's CPU
per request of a real in-process broker, driven over a socket by a raw client that sends
pipelined frames built beforehand, so the client's own Python barely touches the figure.

    .venv/bin/python benchmarks/connection_request_path.py TREE [TREE ...] [--requests 20000]
        [--pairs 2] [--profile]

Each TREE holds a `yak/` package (`git archive <commit> | tar -x`); the trees are run
alternately (A B B A per pair), each in a fresh process, and each run reports the broker
thread's CPU (its own clock, `pthread_getcpuclockid`) per request for:

- `api_versions`: ApiVersions v3, a barrier (handled alone), window 8;
- `produce`: Produce v9, acks=1, one 100 B record to one partition, window 8 (pipelined);
- `fetch`: Fetch v12 of that one small batch (max_wait 0), window 2 (pipelined; a Fetch
  response goes out with writev + sendfile);
- `fetch_empty`: Fetch v12 of an empty partition, max_wait 0: an empty answer.

The stub cases (`stub_pipelined`: Produce key, answered at once, 8 per read;
`stub_parked`: Fetch key, parks once; `stub_barrier`: ApiVersions key) replace that API's
handler with one that answers a 16-byte body, so they measure the connection's path alone;
they also run in-process first (frames written into a `KafkaConnection`'s receive buffer
as a read would, a stand-in transport; `CONN_BENCH_INPROC_REAL=1` adds the real handlers
there). For two versions of connection.py compared in one process, see
`connection_ab.py`, the steadier figure on a loaded machine.

With `--profile` the broker thread also runs under cProfile, and the connection's functions'
own time per request is printed (deterministic call counts; the times are inflated;
`CONN_BENCH_ALL=1` lists every function, not only the connection's modules).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import asyncio, cProfile, datetime, pstats, socket, struct, sys, tempfile, threading, time
from pathlib import Path
MODULES = ('connection.py', 'framing.py', 'sendfile.py', 'metrics.py', 'context.py',
           'ordering.py', 'kio_compat.py', 'tasks.py', 'futures.py', 'locks.py')
sys.path.insert(0, sys.argv[1])
N = int(sys.argv[2])
PROFILE = sys.argv[3] == "1"
ROUNDS = int(sys.argv[4])
import os
ALL = os.environ.get("CONN_BENCH_ALL") == "1"
INPROC_REAL = os.environ.get("CONN_BENCH_INPROC_REAL") == "1"
from yak.broker.server import start_broker
from yak.config import BrokerConfig
from yak.protocol import kio_compat
from yak.protocol.records import Record, build_batch

import uvloop  # what `yak serve` runs on (yak/broker/server.py)
loop = uvloop.new_event_loop()
thread = threading.Thread(target=loop.run_forever, daemon=True)
thread.start()
call = lambda coro: asyncio.run_coroutine_threadsafe(coro, loop).result(60)
tmp = tempfile.mkdtemp(prefix="connbench-")
running = call(start_broker(BrokerConfig.load(data_dir=tmp, listen="127.0.0.1:0")))
broker = running.broker

async def create():
    for topic in ("bench", "empty"):
        created = broker.topics.create(topic, 1)
        if asyncio.iscoroutine(created):
            await created
call(create())
clock = time.pthread_getcpuclockid(thread.ident)

PRODUCE = kio_compat.schema_module("produce", 9, "request")
FETCH = kio_compat.schema_module("fetch", 12, "request")
AV = kio_compat.schema_module("api_versions", 3, "request")
batch = build_batch([Record(None, b"x" * 100)])
produce = PRODUCE.ProduceRequest(
    transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=10),
    topic_data=(PRODUCE.TopicProduceData(name="bench", partition_data=(
        PRODUCE.PartitionProduceData(index=0, records=batch),)),))

def fetch(topic):
    part = kio_compat.build(FETCH.FetchPartition, partition=0, fetch_offset=0,
                            partition_max_bytes=len(batch), current_leader_epoch=-1,
                            log_start_offset=-1, last_fetched_epoch=-1)
    return kio_compat.build(
        FETCH.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(kio_compat.build(FETCH.FetchTopic, topic=topic, partitions=(part,)),),
        forgotten_topics_data=(), rack_id="")

api_versions = kio_compat.build(AV.ApiVersionsRequest, client_software_name="bench",
                                client_software_version="1")
rbuf = bytearray(1 << 22)

def run(frame, window, n):
    burst = frame * window
    rounds = n // window
    pending = b""
    t0 = time.clock_gettime(clock)
    for _ in range(rounds):
        sock.sendall(burst)
        got = 0
        data = pending
        while got < window:
            while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
                k = sock.recv_into(rbuf)
                if not k:
                    raise SystemExit("broker closed the connection")
                data += rbuf[:k]
            size = struct.unpack_from(">i", data)[0]
            data = data[4 + size:]
            got += 1
        pending = data
    return (time.clock_gettime(clock) - t0) / (rounds * window) * 1e6


# Stub handlers (the `*_stub` cases) under API keys no client of this benchmark uses
# otherwise: the connection's path alone (framing, dispatch, ordering, writing, metrics).
from yak.broker import handlers
from yak.broker.context import RawResponse

BODY = bytes(16)

async def stub_now(ctx, request):
    if ctx.turn is not None:
        await ctx.turn.wait()
    return RawResponse([bytearray(BODY)], len(BODY))

async def stub_parked(ctx, request):
    if ctx.turn is not None:
        await ctx.turn.wait()
    await asyncio.sleep(0)  # parks once, as a request waiting on a delayed operation
    return RawResponse([bytearray(BODY)], len(BODY))

reg = handlers.registry()
real = {k: reg[k] for k in (0, 1, 18)}
def stubbed(key, handle):
    spec = real[key]
    return type(spec)(key, spec.min_version, spec.max_version, handle,
                      lambda ctx, body: None, spec.module)

frames = {
    "api_versions": kio_compat.encode_request(api_versions, 7),
    "produce": kio_compat.encode_request(produce, 7),
    "fetch": kio_compat.encode_request(fetch("bench"), 7),
    "fetch_empty": kio_compat.encode_request(fetch("empty"), 7),
}
cases = [("produce", "produce", 8, None), ("fetch", "fetch", 2, None),
         ("fetch_empty", "fetch_empty", 2, None),
         ("stub_pipelined", "produce", 8, (0, stub_now)),
         ("stub_parked", "fetch_empty", 2, (1, stub_parked)),
         ("stub_barrier", "api_versions", 8, (18, stub_now))]
sock = socket.create_connection(("127.0.0.1", broker.port))
run(frames["produce"], 8, 64)  # the batch the fetches read, and warm-up
sock.close()
best = {}
out = []
for r in range(ROUNDS):
    for case, frame, window, stub in cases:
        if stub is not None:
            reg[stub[0]] = stubbed(*stub)
        sock = socket.create_connection(("127.0.0.1", broker.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        run(frames[frame], window, 200)
        prof = cProfile.Profile(time.thread_time) if PROFILE and r == 0 else None
        if prof is not None:
            loop.call_soon_threadsafe(prof.enable)
            time.sleep(0.05)
        cpu = run(frames[frame], window, N)
        sock.close()
        if stub is not None:
            reg[stub[0]] = real[stub[0]]
        best[case] = min(best.get(case, cpu), cpu)
        if prof is None:
            continue
        loop.call_soon_threadsafe(prof.disable)
        time.sleep(0.05)
        rows = []
        for (fn, _, name), (_, nc, tt, _, _) in pstats.Stats(prof).stats.items():
            if ALL or any(m in fn for m in MODULES):
                rows.append((tt / N * 1e6, nc / N, f"{Path(fn).name}:{name}"))
        rows.sort(reverse=True)
        out.append(f"  {case}: own time of connection-path functions "
                   f"{sum(r[0] for r in rows):.1f} us/request (profiled):")
        out += [f"    {t:6.2f} us {c:5.2f} calls  {n}" for t, c, n in rows[:16]]


class FakeTransport:
    """Just enough of a transport for `KafkaConnection` (no sendfile: its writer writes
    every response with `writelines`), counting the responses written."""

    def __init__(self):
        self.responses = 0
        self.target = 0
        self.done = None

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def writelines(self, buffers):
        self.responses += 1
        if self.responses >= self.target and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def write(self, data):
        self.writelines([data])

    def get_write_buffer_size(self):
        return 0

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def is_closing(self):
        return False

    def close(self):
        pass

    def abort(self):
        pass


async def inproc(frame, window, n):
    """The connection's path with no socket: frames written into its receive buffer as a
    read would, responses counted by a stand-in transport. Thread CPU per request."""
    from yak.broker.connection import KafkaConnection

    conn = KafkaConnection(broker)
    transport = FakeTransport()
    conn.connection_made(transport)
    burst = frame * window
    loop = asyncio.get_running_loop()
    t0 = time.thread_time()
    for i in range(n // window):
        transport.target = (i + 1) * window
        transport.done = loop.create_future()
        buf = conn.get_buffer(-1)
        buf[:len(burst)] = burst
        conn.buffer_updated(len(burst))
        await transport.done
    cpu = time.thread_time() - t0
    conn.connection_lost(None)
    return cpu / (n // window * window) * 1e6

inproc_best = {}
for r in range(ROUNDS):
    for case, frame, window, stub in cases:
        if stub is None and not INPROC_REAL:
            continue
        if stub is not None:
            reg[stub[0]] = stubbed(*stub)
        call(inproc(frames[frame], window, 200))
        cpu = call(inproc(frames[frame], window, N))
        if stub is not None:
            reg[stub[0]] = real[stub[0]]
        inproc_best[case] = min(inproc_best.get(case, cpu), cpu)
for case, cpu in inproc_best.items():
    print(f"{case:15s} in-process CPU     {cpu:6.2f} us/request (no socket; best of {ROUNDS})",
          flush=True)
for case, *_ in cases:
    print(f"{case:15s} broker thread CPU {best[case]:6.2f} us/request "
          f"(best of {ROUNDS} rounds of {N})", flush=True)
for line in out:
    print(line)
call(running.stop())
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="+", type=Path)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    order: list[Path] = []
    for i in range(args.pairs):
        order += args.trees if i % 2 == 0 else args.trees[::-1]
    for tree in order:
        print(f"== {tree}", flush=True)
        done = subprocess.run([sys.executable, "-c", CHILD, str(tree.resolve()),
                               str(args.requests), "1" if args.profile else "0",
                               str(args.rounds)])
        if done.returncode:
            raise SystemExit(f"the run in {tree} failed ({done.returncode})")


if __name__ == "__main__":
    main()
