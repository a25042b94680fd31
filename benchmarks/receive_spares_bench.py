"""The receive path with 3 spare buffers against the broker connection's setting (issue
28): CPU of the receiving process per MiB while the last `--hold` frames stay alive in
arrival order (a connection's queue of requests while its in-flight window is full).

`broker_receive_bench.py`'s receiver (an `asyncio.BufferedProtocol` on `FrameReceiver`,
frames sent over loopback by another process), with the receiver built as
`FrameReceiver(MAX, spares=3)` (the default, what the broker used before 2da3640) or
`spares=20, spare_bytes=32 MiB` (the broker's now). Modes alternate per round; the
machine is shared, so compare CPU, not rates.

    .venv/bin/python benchmarks/receive_spares_bench.py [--mib 300] [--rounds 4]
        [--frames 1048576,65536] [--hold 12]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import broker_receive_bench as brb  # noqa: E402
import uvloop  # noqa: E402

from yak.protocol.framing import FrameReceiver  # noqa: E402

MODES = {
    "spares3": functools.partial(FrameReceiver, spares=3),
    "spares20": functools.partial(FrameReceiver, spares=20, spare_bytes=32 << 20),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--frames", default="1048576,65536")
    ap.add_argument("--hold", type=int, default=12)
    a = ap.parse_args()
    rows = []
    for frame in (int(x) for x in a.frames.split(",")):
        count = max(100, (a.mib << 20) // frame)
        for r in range(a.rounds):
            for mode in ("spares3", "spares20") if r % 2 == 0 else ("spares20", "spares3"):
                brb.FrameReceiver = MODES[mode]  # (ReceiverProtocol builds its receiver)
                d = uvloop.run(brb._receive("receiver", frame, count, a.hold))
                row = {"frame": frame, "mode": mode, "round": r,
                       **{k: round(v, 3) for k, v in d.items()},
                       "load1": round(os.getloadavg()[0], 2)}
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    summary = {}
    for frame in sorted({x["frame"] for x in rows}):
        med = {m: statistics.median(x["cpu_ms_per_mib"] for x in rows
                                    if x["frame"] == frame and x["mode"] == m) for m in MODES}
        pairs = [n["cpu_ms_per_mib"] / o["cpu_ms_per_mib"] for o in rows for n in rows
                 if o["frame"] == n["frame"] == frame and o["round"] == n["round"]
                 and o["mode"] == "spares3" and n["mode"] == "spares20"]
        summary[frame] = {"spares3_cpu_ms_per_mib": med["spares3"],
                          "spares20_cpu_ms_per_mib": med["spares20"],
                          "spares20_over_spares3": round(med["spares20"] / med["spares3"], 3),
                          "pair_ratios": [round(p, 3) for p in pairs]}
    print(json.dumps({"hold": a.hold, "rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
