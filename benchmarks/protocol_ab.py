"""Protocol hot paths before and after issue 10's protocol work, in one process.

Run:
    git archive 0a2f7f8 yak | tar -x -C /tmp/yak-base      # the tree before the change
    .venv/bin/python benchmarks/protocol_ab.py --baseline /tmp/yak-base [--rounds 9]

Separate processes on this shared 2-core machine differ by 10-30% from run to run
(load from other work, allocator and address-space layout), more than the changes being
measured. So the baseline's modules are loaded next to the current ones (under other
names, from `--baseline`), both are fed the same inputs, and old and new alternate case
by case; the figure is the median over rounds of each round's best CPU microseconds per
call. Old entry points used: `produce_codec.decode_produce_request` /
`encode_produce_response`, `fetch_codec.encode_fetch_response` (same signatures),
`KafkaConnection.data_received` (framing), the request-header lines of
`KafkaConnection._handle_frame` with the old `kio_compat.skip_tagged_fields` (copied
below), and `handlers.offset_commit.encode_response`.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import struct
import sys
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import protocol_bench as pb  # noqa: E402

from yak.broker.connection import KafkaConnection  # noqa: E402
from yak.broker.context import RawResponse  # noqa: E402
from yak.protocol import fetch_codec, kio_compat, produce_codec  # noqa: E402
from yak.protocol.framing import parse_request_header, skip_header_tagged_fields  # noqa: E402
from yak.protocol.kio_compat import ErrorCode  # noqa: E402
from yak.protocol.offset_commit_codec import encode_offset_commit_response  # noqa: E402


def load(base: Path, rel: str, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, base / rel)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while building
    spec.loader.exec_module(mod)
    return mod


def pairs(base: Path) -> dict[str, tuple[pb.Case, pb.Case]]:
    old_produce = load(base, "yak/protocol/produce_codec.py", "old_produce_codec")
    old_fetch = load(base, "yak/protocol/fetch_codec.py", "old_fetch_codec")
    old_kio = load(base, "yak/protocol/kio_compat.py", "old_kio_compat")
    old_conn = load(base, "yak/broker/connection.py", "old_connection")
    old_commit = load(base, "yak/broker/handlers/offset_commit.py", "old_offset_commit")
    out: dict[str, tuple[pb.Case, pb.Case]] = {}

    for name, (v, parts, size) in {
        "produce decode v9 1x16KiB": (9, 1, 16384),
        "produce decode v9 8x1KiB": (9, 8, 1024),
        "produce decode v7 1x16KiB": (7, 1, 16384),
    }.items():
        frame = pb.produce_frame(v, parts, size)
        end = parse_request_header(frame)[4]
        body = frame[skip_header_tagged_fields(frame, end) if v >= 9 else end :]
        out[name] = (lambda v=v, b=body: old_produce.decode_produce_request(v, b),
                     lambda v=v, b=body: produce_codec.decode_produce_request(v, b))

    old_res = [("bench-topic", None, [old_produce.ProducePartitionResult(0, 0, 1234, -1, 0)])]
    new_res = [("bench-topic", None, [produce_codec.ProducePartitionResult(0, 0, 1234, -1, 0)])]
    out["produce encode v9 1p"] = (lambda: old_produce.encode_produce_response(9, old_res),
                                   lambda: produce_codec.encode_produce_response(9, new_res))

    data = [memoryview(b"r" * 16384), memoryview(b"s" * 4096)]

    def fetch_inputs(m: Any) -> dict[str, list[Any]]:
        return {
            "1p": [m.FetchTopicResult("bench-topic", pb.uuid.uuid4(), [
                m.FetchPartitionResult(0, 0, 5000, 5000, 0, None, -1, data, 20480)])],
            "16p": [m.FetchTopicResult(f"t{t}", pb.uuid.uuid4(), [
                m.FetchPartitionResult(p, 0, 5000, 5000, 0, None, -1,
                                       data if p % 2 == 0 else [], 20480 if p % 2 == 0 else 0)
                for p in range(8)]) for t in range(2)],
            # The old encoder wrote this partition's records as null (the bug); same fields.
            "error": [m.FetchTopicResult("bench-topic", pb.uuid.uuid4(), [
                m.FetchPartitionResult(0, int(ErrorCode.offset_out_of_range), 5000, 5000, 0)])],
        }
    fo, fn = fetch_inputs(old_fetch), fetch_inputs(fetch_codec)
    for label, v, key in (("fetch encode v16 1p", 16, "1p"), ("fetch encode v16 16p", 16, "16p"),
                          ("fetch encode v11 1p", 11, "1p"), ("fetch encode v16 error", 16,
                                                              "error")):
        out[label] = (lambda v=v, t=fo[key]: old_fetch.encode_fetch_response(v, t),
                      lambda v=v, t=fn[key]: fetch_codec.encode_fetch_response(v, t))

    header = struct.Struct(">hhih")

    def old_header(frame: memoryview) -> pb.Case:
        def run() -> object:  # the lines _handle_frame ran before issue 10
            if len(frame) < 10:
                raise ValueError("request header truncated")
            api_key, api_version, correlation_id, cid_len = header.unpack_from(frame, 0)
            pos = 10
            if cid_len >= 0:
                if pos + cid_len > len(frame):
                    raise ValueError("client id overruns the frame")
                bytes(frame[pos : pos + cid_len]).decode("utf-8", "replace")
                pos += cid_len
            try:
                if kio_compat.request_header_version(api_key, api_version) >= 2:
                    pos = old_kio.skip_tagged_fields(frame, pos)
            except (ValueError, IndexError) as e:
                raise ValueError(f"bad request header: {e}") from None
            return pos
        return run
    for label, frame in (("header produce v9 (v2)", pb.produce_frame(9, 1, 100)),
                         ("header fetch v11 (v1)", pb.fetch_frame(11))):
        out[label] = (old_header(frame), pb.header_case(frame))

    small = b"".join((2048).to_bytes(4, "big") + b"x" * 2048 for _ in range(8))
    big = (1 << 20).to_bytes(4, "big") + b"y" * (1 << 20)
    for label, chunks in (("framing 8x2KiB in 1 chunk", [small]),
                          ("framing 1MiB in 64KiB chunks",
                           [big[i : i + 65536] for i in range(0, len(big), 65536)])):
        out[label] = (pb.framing_case(chunks, old_conn.KafkaConnection),
                      pb.framing_case(chunks, KafkaConnection, channel=types.SimpleNamespace()))

    commits = {"bench-topic": [(0, ErrorCode.none)]}
    for v in (9, 2):
        def new(v: int = v) -> RawResponse:
            body = encode_offset_commit_response(v, commits)
            return RawResponse([body], len(body), flexible_header=v >= 8)
        out[f"offset commit encode v{v}"] = (lambda v=v: old_commit.encode_response(v, commits),
                                             new)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="tree before the change")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--min-time", type=float, default=0.05)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    print(f"{'case':<32} {'before':>8} {'after':>8} {'after/before':>12}  (us/call, median of "
          f"{args.rounds} rounds)")
    for name, (old, new) in pairs(args.baseline).items():
        if args.only not in name:
            continue
        before: list[float] = []
        after: list[float] = []
        for r in range(args.rounds):
            order = ((old, before), (new, after)) if r % 2 == 0 else ((new, after), (old, before))
            for fn, sink in order:
                sink.append(pb.per_call_us(fn, 3, args.min_time))
        b, a = statistics.median(before), statistics.median(after)
        print(f"{name:<32} {b:8.2f} {a:8.2f} {a / b:12.2f}", flush=True)


if __name__ == "__main__":
    main()
