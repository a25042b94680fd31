"""Producer ack latency while segments upload (issue 25's goal: p99 at most 1.2x that of a
topic without tiering). One broker (`yak serve`) with tiered storage on a SeaweedFS S3
gateway on 127.0.0.1; `yak bench produce` at a fixed rate, acks=all, alternating a tiered
topic (small segments, so uploads run all the time) and a plain one, fresh topics per run.

    .venv/bin/python benchmarks/tiered_produce_ab.py --rounds 3 --rate 10000 --seconds 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.conftest import YakBroker  # noqa: E402
from tests.tiered.seaweed import SeaweedS3  # noqa: E402

YAK = str(Path(sys.executable).with_name("yak"))


def bench(b: YakBroker, topic: str, tiered: bool, args: argparse.Namespace) -> dict:
    cfg = ["-c", "segment.bytes=4194304"]
    if tiered:
        cfg += ["-c", "remote.storage.enable=true", "-c", "local.retention.bytes=8388608"]
    out = subprocess.run(
        [YAK, "bench", "produce", "-b", b.bootstrap, "-t", topic, "-s", str(args.size),
         "-n", "0", "-d", str(args.seconds), "--rate", str(args.rate), "--acks", "all",
         "--json", "--no-progress", "--broker-pid", str(b.pid), *cfg],
        capture_output=True, text=True, check=True, timeout=args.seconds + 120)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--set", action="append", default=[],
                    help="more broker settings KEY=VALUE (e.g. the copier pool size)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="yak-tiered-ab-"))
    weed = SeaweedS3(str(tmp))
    weed.start()
    try:
        run(weed, tmp, args)
    finally:
        weed.stop()


def run(weed: SeaweedS3, tmp: Path, args: argparse.Namespace) -> None:
    weed.create_bucket("abtest")
    data = tmp / "data"
    data.mkdir()
    b = YakBroker(data, {
        "remote.log.storage.system.enable": "true",
        "remote.storage.uri": f"s3://abtest/p?endpoint={weed.endpoint}&region=us-east-1",
        "remote.storage.access.key.id": "ab", "remote.storage.secret.access.key": "absecret",
        "remote.log.manager.task.interval.ms": "500",
        **dict(kv.split("=", 1) for kv in args.set)})
    results: dict[str, list[dict]] = {"tiered": [], "plain": []}
    try:
        b.start()
        for r in range(args.rounds):
            for kind in ("tiered", "plain") if r % 2 == 0 else ("plain", "tiered"):
                res = bench(b, f"{kind}-{r}", kind == "tiered", args)
                results[kind].append(res)
                print(kind, r, json.dumps({k: res.get(k) for k in res if "latency" in k
                                           or k in ("msgs_per_s", "mb_per_s")}), flush=True)
                time.sleep(5)  # let the previous run's uploads drain
    finally:
        b.stop()
    p99 = {k: [r["latency_ms"]["p99"] for r in v] for k, v in results.items()}
    p50 = {k: [r["latency_ms"]["p50"] for r in v] for k, v in results.items()}
    cpu = {k: [r["broker"]["cpu_us_per_msg"] for r in v] for k, v in results.items()}
    for kind in results:
        print(f"{kind:7s} p50 {p50[kind]} p99 {p99[kind]} broker us/msg {cpu[kind]}")
    print("median p99 ratio tiered/plain:",
          round(statistics.median(p99["tiered"]) / statistics.median(p99["plain"]), 2))

if __name__ == "__main__":
    main()
