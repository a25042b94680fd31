"""Protocol hot-path micro-benchmarks (no sockets, no broker): CPU time per call.

Run: .venv/bin/python benchmarks/protocol_bench.py [--repeat 7] [--min-time 0.2]

Each case runs in a loop for about `--min-time` CPU seconds, `--repeat` times; the
reported figure is the lowest CPU microseconds per call (time.process_time; the least
disturbed run on a shared machine). Cases:

- Produce request decode as the broker receives it (v9 flexible, v7 classic; 16 KiB of
  records in one partition, or 8 partitions of 1 KiB), and its response encode;
- Fetch response encode (v16 one partition with data, v16 16 partitions, v11 one
  partition, v16 one OFFSET_OUT_OF_RANGE partition);
- the request header as the connection parses it (Produce v9 = header v2 with tagged
  fields, Fetch v11 = header v1);
- framing through `KafkaConnection.data_received` (eight 2 KiB frames in one chunk; one
  1 MiB frame in 64 KiB chunks);
- OffsetCommit response encode (v9, v2);
- with `--alloc`: ways to assemble a frame that spans reads (1 MiB in 64 KiB chunks): the
  join `FrameDecoder` uses, a bytearray pre-sized to the announced size, and an anonymous
  `mmap` (pre-sized but committed page by page as bytes arrive).

Results and the before/after comparison go to docs/benchmarks/protocol.md by hand.
"""

from __future__ import annotations

import argparse
import mmap
import time
import types
import uuid
from collections.abc import Callable

from yak.broker.connection import KafkaConnection
from yak.broker.context import RawResponse
from yak.protocol import kio_compat
from yak.protocol.fetch_codec import FetchPartitionResult, FetchTopicResult, encode_fetch_response
from yak.protocol.framing import parse_request_header, skip_header_tagged_fields
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.offset_commit_codec import encode_offset_commit_response
from yak.protocol.produce_codec import (
    ProducePartitionResult,
    decode_produce_request,
    encode_produce_response,
)
from yak.protocol.records import Record, build_batch

Case = Callable[[], object]


def produce_frame(version: int, partitions: int, record_bytes: int) -> memoryview:
    """A Produce request frame (no size prefix) as librdkafka would send it."""
    mod = kio_compat.schema_module("produce", version, "request")
    batch = build_batch([Record(None, b"v" * record_bytes, 1_700_000_000_000)])
    parts = tuple(mod.PartitionProduceData(index=i, records=batch) for i in range(partitions))
    topic = kio_compat.build(mod.TopicProduceData, name="bench-topic", topic_id=uuid.uuid4(),
                             partition_data=parts)
    req = kio_compat.build(mod.ProduceRequest, transactional_id=None, acks=1,
                           timeout=kio_compat.ms_to_timedelta(30000), topic_data=(topic,))
    return memoryview(kio_compat.encode_request(req, correlation_id=7, client_id="rdkafka")[4:])


def fetch_frame(version: int) -> memoryview:
    mod = kio_compat.schema_module("fetch", version, "request")
    part = kio_compat.build(mod.FetchPartition, partition=0, fetch_offset=100,
                            partition_max_bytes=1 << 20)
    topic = kio_compat.build(mod.FetchTopic, topic="bench-topic", partitions=(part,))
    req = kio_compat.build(mod.FetchRequest, replica_id=-1,
                           max_wait=kio_compat.ms_to_timedelta(500), min_bytes=1,
                           max_bytes=50 << 20, topics=(topic,), forgotten_topics_data=(),
                           isolation_level=0, session_id=0, session_epoch=-1, rack_id="")
    return memoryview(kio_compat.encode_request(req, correlation_id=7, client_id="rdkafka")[4:])


def header_case(frame: memoryview) -> Case:
    """What the connection does per request before dispatch."""
    def run() -> object:
        api_key, api_version, correlation_id, client_id, pos = parse_request_header(frame)
        if kio_compat.request_header_version(api_key, api_version) >= 2:
            pos = skip_header_tagged_fields(frame, pos)
        return pos
    return run


def framing_case(chunks: list[bytes], connection: type = KafkaConnection,
                 **kwargs: object) -> Case:
    """The chunks through `data_received` as uvloop delivers them (no transport)."""
    broker = types.SimpleNamespace(
        config=types.SimpleNamespace(socket_request_max_bytes=100 << 20))
    conn = connection(broker, **kwargs)

    def run() -> object:
        for c in chunks:
            conn.data_received(c)
        n = len(conn._queue)
        conn._queue.clear()
        conn._queued_bytes = 0
        return n
    return run


def cases() -> dict[str, Case]:
    out: dict[str, Case] = {}
    for name, (v, parts, size) in {
        "produce decode v9 1x16KiB": (9, 1, 16384),
        "produce decode v9 8x1KiB": (9, 8, 1024),
        "produce decode v7 1x16KiB": (7, 1, 16384),
    }.items():
        frame = produce_frame(v, parts, size)
        size = parse_request_header(frame)[4]
        pos = skip_header_tagged_fields(frame, size) if v >= 9 else size
        body = frame[pos:]
        out[name] = lambda v=v, body=body: decode_produce_request(v, body)

    results = [("bench-topic", None, [ProducePartitionResult(0, 0, 1234, -1, 0)])]
    out["produce encode v9 1p"] = lambda: encode_produce_response(9, results)

    data = [memoryview(b"r" * 16384), memoryview(b"s" * 4096)]
    one = [FetchTopicResult("bench-topic", uuid.uuid4(), [
        FetchPartitionResult(0, 0, 5000, 5000, 0, None, -1, data, 20480)])]
    many = [FetchTopicResult(f"t{t}", uuid.uuid4(), [
        FetchPartitionResult(p, 0, 5000, 5000, 0, None, -1,
                             data if p % 2 == 0 else [], 20480 if p % 2 == 0 else 0)
        for p in range(8)]) for t in range(2)]
    error = [FetchTopicResult("bench-topic", uuid.uuid4(), [
        FetchPartitionResult(0, int(ErrorCode.offset_out_of_range), 5000, 5000, 0)])]
    out["fetch encode v16 1p"] = lambda: encode_fetch_response(16, one)
    out["fetch encode v16 16p"] = lambda: encode_fetch_response(16, many)
    out["fetch encode v11 1p"] = lambda: encode_fetch_response(11, one)
    out["fetch encode v16 error"] = lambda: encode_fetch_response(16, error)

    out["header produce v9 (v2)"] = header_case(produce_frame(9, 1, 100))
    out["header fetch v11 (v1)"] = header_case(fetch_frame(11))

    small = b"".join(len(b"x" * 2048).to_bytes(4, "big") + b"x" * 2048 for _ in range(8))
    big = (1 << 20).to_bytes(4, "big") + b"y" * (1 << 20)
    channel = types.SimpleNamespace()  # the listener's authentication: unused by framing
    out["framing 8x2KiB in 1 chunk"] = framing_case([small], channel=channel)
    out["framing 1MiB in 64KiB chunks"] = framing_case(
        [big[i : i + 65536] for i in range(0, len(big), 65536)], channel=channel)

    commits = {"bench-topic": [(0, ErrorCode.none)]}

    def commit(v: int) -> RawResponse:  # as the handler does
        body = encode_offset_commit_response(v, commits)
        return RawResponse([body], len(body), flexible_header=v >= 8)
    out["offset commit encode v9"] = lambda: commit(9)
    out["offset commit encode v2"] = lambda: commit(2)
    return out


def alloc_cases() -> dict[str, Case]:
    size = 1 << 20
    chunks = [memoryview(b"z" * 65536) for _ in range(size // 65536)]

    def join() -> object:
        return memoryview(b"".join(chunks))

    def presized() -> object:
        buf = bytearray(size)  # zero-filled: every page touched before a byte arrives
        mv = memoryview(buf)
        pos = 0
        for c in chunks:
            mv[pos : pos + len(c)] = c
            pos += len(c)
        return mv

    def lazy_mmap() -> object:
        m = mmap.mmap(-1, size)
        with memoryview(m) as mv:
            pos = 0
            for c in chunks:
                mv[pos : pos + len(c)] = c
                pos += len(c)
        m.close()
        return m

    return {"assemble 1MiB: join": join, "assemble 1MiB: pre-sized bytearray": presized,
            "assemble 1MiB: anonymous mmap": lazy_mmap}


def per_call_us(fn: Case, repeat: int, min_time: float) -> float:
    n = 1
    while True:  # calibrate: enough calls for min_time of CPU
        t0 = time.process_time()
        for _ in range(n):
            fn()
        dt = time.process_time() - t0
        if dt >= min_time / 4:
            break
        n *= 4
    n = max(1, int(n * min_time / max(dt, 1e-9)))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t0) / n)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--only", default="", help="run cases whose name contains this")
    ap.add_argument("--alloc", action="store_true", help="also the frame-assembly variants")
    args = ap.parse_args()
    all_cases = cases()
    if args.alloc:
        all_cases.update(alloc_cases())
    for name, fn in all_cases.items():
        if args.only in name:
            print(f"{name:<36} {per_call_us(fn, args.repeat, args.min_time):9.2f} us/call",
                  flush=True)


if __name__ == "__main__":
    main()
