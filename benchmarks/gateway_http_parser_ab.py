"""REST through the gateway with uvicorn's httptools parser (A) against h11's (B), one run.

    .venv/bin/python benchmarks/gateway_http_parser_ab.py [--records 20000] [--rounds 4]

One broker and two standalone gateways (`yak gateway`) in front of it, identical but for
the HTTP parser: B maps uvicorn's "httptools" protocol to its h11 one before starting (the
gateway asks for httptools by name). Each round runs every case on both gateways, the order
alternating, using benchmarks/gateway_bench.py's clients and meter: REST produce with 100 records
per request (as gateway_bench) and with 1 (where the per-request cost shows), and REST
consume. Reports gateway CPU us per record (its own pid, user + system) and records/s,
median over rounds.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_bench import (  # noqa: E402
    REPO,
    Meter,
    create_topic,
    fill,
    free_port,
    measure,
    payloads,
    rest_consume,
    rest_produce,
    spawn,
)

H11 = ("import uvicorn.config as c; c.HTTP_PROTOCOLS['httptools'] = c.HTTP_PROTOCOLS['h11']; "
       "from yak.cli.main import app; app()")


def spawn_h11(args: list[str], log: Path, ready: str) -> subprocess.Popen[bytes]:
    """`spawn`, with the gateway's httptools request answered by h11."""
    import os
    import time

    out = open(log, "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-c", H11, *args], stdout=out,
                            stderr=subprocess.STDOUT, cwd=REPO,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        if ready in log.read_text(errors="replace"):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"gateway (h11) did not start:\n{log.read_text(errors='replace')[-3000:]}")


def rest_produce_1(url: str, topic: str, values: list[bytes]) -> None:
    ctype = {"content-type": "application/vnd.kafka.binary.v2+json"}
    with httpx.Client(base_url=url, timeout=60) as c:
        for v in values:
            r = c.post(f"/topics/{topic}", headers=ctype,
                       json={"records": [{"value": base64.b64encode(v).decode()}]})
            assert r.status_code == 200, r.text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="yak-gw-http-ab-"))
    bootstrap = f"127.0.0.1:{free_port()}"
    broker = spawn(["serve", "--data-dir", str(tmp / "data"), "--listen", bootstrap,
                    "--http", "none"], tmp / "broker.log", "Yak broker ready")
    gateways: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    rows: list[dict[str, Any]] = []
    try:
        for parser, start in (("httptools", spawn), ("h11", spawn_h11)):
            port = free_port()
            proc = start(["gateway", "--bootstrap", bootstrap, "--http", f"127.0.0.1:{port}"],
                         tmp / f"gateway-{parser}.log", "Yak gateway ready")
            gateways[parser] = (proc, f"http://127.0.0.1:{port}")
        values = payloads(args.records, args.size)
        few = values[: max(args.records // 10, 1)]  # 1 record per request: 10x fewer
        for rnd in range(args.rounds):
            order = ["httptools", "h11"] if rnd % 2 == 0 else ["h11", "httptools"]
            for case in ("produce-100", "produce-1", "consume"):
                for parser in order:
                    proc, url = gateways[parser]
                    meter = Meter(proc.pid)
                    topic = f"{case}-{parser}-{rnd}"
                    create_topic(bootstrap, topic)
                    if case == "produce-100":
                        res = measure(meter, rest_produce, url, topic, values, n=len(values))
                    elif case == "produce-1":
                        res = measure(meter, rest_produce_1, url, topic, few, n=len(few))
                    else:
                        fill(bootstrap, topic, values)
                        res = measure(meter, rest_consume, url, topic, n=len(values),
                                      consume=True)
                    rows.append({"round": rnd, "case": case, "parser": parser, **res})
                    print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        for proc, _ in gateways.values():
            proc.terminate()
        broker.terminate()
        for p in [*(g for g, _ in gateways.values()), broker]:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(rows))
    print()
    print("| case | parser | records/s | gateway us/record (median, range) |")
    print("|---|---|---|---|")
    for case in ("produce-100", "produce-1", "consume"):
        for parser in ("httptools", "h11"):
            rs = [r for r in rows if r["case"] == case and r["parser"] == parser]
            us = [r["gateway_us_per_record"] for r in rs]
            rate = statistics.median(r["records_per_s"] for r in rs)
            print(f"| {case} | {parser} | {rate:,.0f} | {statistics.median(us):.1f} "
                  f"({min(us):.1f}-{max(us):.1f}) |")


if __name__ == "__main__":
    main()
