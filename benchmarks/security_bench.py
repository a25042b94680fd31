"""Produce/consume throughput and broker CPU per message over each listener kind.

One broker subprocess (`yak serve`) with PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL
listeners (certificates from trustme, SASL PLAIN), driven by confluent-kafka (librdkafka)
with the same client settings on every listener. Broker CPU is the broker process's own
user + system time (psutil) around each phase, so client CPU is excluded. Listeners are
measured round-robin within a round, so the machine's noise hits all of them alike; compare
ratios within a round.

    .venv/bin/python benchmarks/security_bench.py --messages 300000 --sizes 100,1024 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import trustme
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

REPO = Path(__file__).resolve().parent.parent
LISTENERS = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(d: Path) -> tuple[subprocess.Popen[bytes], dict[str, int], Path]:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    (d / "broker.pem").write_bytes(cert.private_key_pem.bytes() + b"".join(
        c.bytes() for c in cert.cert_chain_pems) + ca.cert_pem.bytes())
    (d / "ca.pem").write_bytes(ca.cert_pem.bytes())
    ports = {name: free_port() for name in LISTENERS}
    settings = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(d / "broker.pem"),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="pw";',
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="pw";',
    }
    cmd = [sys.executable, "-m", "yak.cli.main", "serve", "--data-dir", str(d / "data"),
           "--http", "none"] + [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    out = d / "broker.out"
    with open(out, "wb") as f, open(d / "broker.log", "wb") as err:
        proc = subprocess.Popen(cmd, stdout=f, stderr=err, cwd=REPO,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    deadline = time.monotonic() + 30
    while "ready" not in out.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((d / "broker.log").read_text()[-2000:])
        time.sleep(0.05)
    return proc, ports, d / "ca.pem"


def conf(listener: str, port: int, ca: Path) -> dict[str, object]:
    c: dict[str, object] = {"bootstrap.servers": f"127.0.0.1:{port}",
                            "security.protocol": listener}
    if "SSL" in listener:
        c["ssl.ca.location"] = str(ca)
    if listener.startswith("SASL"):
        c.update({"sasl.mechanism": "PLAIN", "sasl.username": "bench", "sasl.password": "pw"})
    return c


def cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def produce(c: dict[str, object], topic: str, n: int, size: int,
            broker: psutil.Process) -> tuple[float, float]:
    p = Producer({**c, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000})
    value = b"x" * size
    p.produce(topic, value)  # create the topic and connect before timing
    p.flush(30)
    c0, t0 = cpu(broker), time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return n / (time.perf_counter() - t0), (cpu(broker) - c0) / n * 1e6


def consume(c: dict[str, object], topic: str, n: int, broker: psutil.Process
            ) -> tuple[float, float]:
    cons = Consumer({**c, "group.id": "bench", "enable.auto.commit": False,
                     "fetch.max.bytes": 50 << 20, "queued.min.messages": 1_000_000})
    cons.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    c0, t0 = cpu(broker), time.perf_counter()
    deadline = time.monotonic() + 300
    while got < n + 1 and time.monotonic() < deadline:
        for m in cons.consume(10000, 1.0):
            if m.error() is None:
                got += 1
    rate = got / (time.perf_counter() - t0)
    per = (cpu(broker) - c0) / got * 1e6
    cons.close()
    return rate, per


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="yak-security-bench-"))
    proc, ports, ca = start_broker(d)
    broker = psutil.Process(proc.pid)
    results = []
    try:
        for rnd in range(a.rounds):
            for size in (int(s) for s in a.sizes.split(",")):
                n = a.messages if size <= 100 else max(a.messages // 4, 10_000)
                order = LISTENERS if rnd % 2 == 0 else list(reversed(LISTENERS))
                for listener in order:
                    c = conf(listener, ports[listener], ca)
                    topic = f"bench-{listener.lower()}-{size}-{rnd}"
                    prate, pcpu = produce(c, topic, n, size, broker)
                    crate, ccpu = consume(c, topic, n, broker)
                    row = {"round": rnd, "size": size, "listener": listener, "messages": n,
                           "produce_msg_s": round(prate), "produce_cpu_us": round(pcpu, 2),
                           "consume_msg_s": round(crate), "consume_cpu_us": round(ccpu, 2)}
                    results.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
