"""Yak's scale figures: 1,000 partitions, 1,000 idle connections, memory over a long run.

    .venv/bin/python -m benchmarks.suite.scale [--minutes 5] [--partitions 1000] [--connections 1000]

- producers across many partitions: two producer processes round-robin over 1,000
  partitions (1,000 concurrent batches in flight), then two consumers read them back;
- idle connections: N sockets that each complete an ApiVersions exchange and stay open;
  broker RSS per connection, broker CPU while they idle, and e2e latency with them open;
- memory: full-rate produce for M minutes into a topic with size-based retention (so disk
  use is bounded and old segments are deleted while producing); broker RSS every 5 s.

Writes docs/benchmarks/scale-DATE.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.suite import report, servers
from yak.bench.runner import ensure_topic, run
from yak.bench.spec import BenchResult, BenchSpec


def _brief(res: BenchResult) -> dict[str, Any]:
    b = res.broker
    d: dict[str, Any] = {"messages": res.messages, "msgs_per_s": res.msgs_per_s,
                         "MB_per_s": res.mb_per_s, "errors": res.errors,
                         "other_cpu_pct": res.other_cpu_pct, "notes": res.notes}
    if b is not None:
        d.update(broker_us_per_msg=b.cpu_us_per_msg, broker_cpu_pct=b.cpu_pct,
                 rss_mb=b.rss_mb_end)
    if res.latency_ms is not None:
        d["latency_ms"] = res.latency_ms.__dict__
    return d


def many_partitions(yak: servers.Server, partitions: int, n: int) -> dict[str, Any]:
    """Twice: the first run also pays each partition's first append, the second is steady."""
    t0 = time.monotonic()
    ensure_topic(BenchSpec(bootstrap=yak.bootstrap, topic="wide", partitions=partitions),
                 create=True)
    create_s = time.monotonic() - t0
    runs = []
    for _ in range(2):
        runs.append(_brief(run("produce", BenchSpec(
            bootstrap=yak.bootstrap, topic="wide", partitions=partitions, count=n, producers=2,
            timeout_s=300), broker_pid=yak.group().pid)))
    cons = run("consume", BenchSpec(bootstrap=yak.bootstrap, topic="wide", count=0, consumers=2,
                                    timeout_s=300), broker_pid=yak.group().pid)
    return {"partitions": partitions, "create_topic_s": round(create_s, 2),
            "produce_first": runs[0], "produce": runs[1], "consume": _brief(cons)}


def _api_versions_v0(corr: int) -> bytes:
    client = b"idle"
    body = struct.pack(">hhih", 18, 0, corr, len(client)) + client
    return struct.pack(">i", len(body)) + body


def _read_frame(s: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    (size,) = struct.unpack(">i", head)
    buf = b""
    while len(buf) < size:
        chunk = s.recv(size - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def idle_connections(yak: servers.Server, count: int, idle_s: float) -> dict[str, Any]:
    g = yak.group()
    rss0 = g.rss_mb()
    socks: list[socket.socket] = []
    t0 = time.monotonic()
    try:
        for i in range(count):
            s = socket.create_connection(("127.0.0.1", yak.port), timeout=10)
            s.sendall(_api_versions_v0(i))
            resp = _read_frame(s)
            assert struct.unpack_from(">i", resp, 0)[0] == i, "correlation id mismatch"
            socks.append(s)
        opened = time.monotonic() - t0
        time.sleep(2)
        rss1 = g.rss_mb()
        c0 = g.cpu_s()
        time.sleep(idle_s)
        idle_cpu_pct = 100 * (g.cpu_s() - c0) / idle_s
        lat = run("e2e", BenchSpec(bootstrap=yak.bootstrap, topic="idle-e2e", rate=10_000,
                                   count=0, duration_s=5, linger_ms=0, timeout_s=60),
                  broker_pid=g.pid)
        alive = 0
        for i, s in enumerate(socks):  # every idle connection still answers
            s.sendall(_api_versions_v0(count + i))
            if struct.unpack_from(">i", _read_frame(s), 0)[0] == count + i:
                alive += 1
    finally:
        for s in socks:
            s.close()
    return {"connections": count, "open_s": round(opened, 2), "rss_mb_before": round(rss0, 1),
            "rss_mb_with_connections": round(rss1, 1),
            "kib_per_connection": round((rss1 - rss0) * 1024 / count, 1),
            "broker_idle_cpu_pct": round(idle_cpu_pct, 2), "still_answering": alive,
            "e2e_10k_with_idle_connections": _brief(lat)}


def memory_run(yak: servers.Server, minutes: float) -> dict[str, Any]:
    g = yak.group()
    samples: list[tuple[float, float]] = []
    out: dict[str, Any] = {}
    secs = minutes * 60

    def load() -> None:
        out["result"] = run("produce", BenchSpec(
            bootstrap=yak.bootstrap, topic="soak", partitions=4, producers=2, count=0,
            duration_s=secs, timeout_s=secs + 120), broker_pid=g.pid)

    t = threading.Thread(target=load)
    t0 = time.monotonic()
    t.start()
    while t.is_alive():
        samples.append((round(time.monotonic() - t0, 1), round(g.rss_mb(), 1)))
        t.join(5)
    res: BenchResult = out["result"]
    steady = [m for s, m in samples if s >= 30] or [m for _, m in samples]
    half = len(steady) // 2
    first, second = steady[:half] or steady, steady[half:] or steady
    return {"minutes": minutes, "load": _brief(res), "rss_samples": samples,
            "rss_mb_min": min(m for _, m in samples), "rss_mb_max": max(m for _, m in samples),
            "rss_mb_end": samples[-1][1],
            "rss_mb_mean_first_half_after_30s": round(sum(first) / len(first), 1),
            "rss_mb_mean_second_half": round(sum(second) / len(second), 1)}


def write(doc: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"scale-{time.strftime('%Y-%m-%d')}"
    m = doc["meta"]
    lines = [f"# Yak scale figures ({m['date']})", "",
             f"Reproduce: `{m['command']}`", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python "
             f"{m['python']}, data on {m['work_dir_fs']}. Shared machine: *other CPU %* is "
             "what other processes used (percent of one core).", ""]
    w = doc.get("partitions")
    if w:
        lines += [f"## Producers across {w['partitions']:,} partitions", "",
                  f"CreateTopics with {w['partitions']:,} partitions took "
                  f"{w['create_topic_s']} s.", "",
                  "| run | messages | msg/s | MB/s | ack p50 ms | broker CPU us/msg | "
                  "broker RSS MiB | other CPU % |", "|---|---|---|---|---|---|---|---|"]
        for label, key in (("produce 100 B, 2 producers, acks=all: run 1, fresh topic",
                            "produce_first"),
                           ("run 2, every partition already written", "produce"),
                           ("consume both runs, 2 consumers", "consume")):
            r = w[key]
            p50 = r.get("latency_ms", {}).get("p50", "-")
            lines.append(f"| {label} | {r['messages']:,} | {r['msgs_per_s']:,.0f} | "
                         f"{r['MB_per_s']} | {p50} | {r.get('broker_us_per_msg')} | "
                         f"{r.get('rss_mb')} | {r['other_cpu_pct']} |")
        lines += ["", "Round-robin over 1,000 partitions, librdkafka builds one batch per "
                  "partition: the fewer messages per 5 ms linger window and partition, the more "
                  "requests per message, so broker CPU per message and throughput depend on how "
                  "much the client queued (compare the ack latency). Run 1 also pays each "
                  "partition's first append (a leader-epoch checkpoint written with fsync).", ""]
    i = doc.get("idle")
    if i:
        e = i["e2e_10k_with_idle_connections"]
        lat = e.get("latency_ms", {})
        lines += [f"## {i['connections']:,} idle connections", "",
                  f"- opened (each with an ApiVersions round trip) in {i['open_s']} s; "
                  f"{i['still_answering']:,} still answering afterwards",
                  f"- broker RSS {i['rss_mb_before']} -> {i['rss_mb_with_connections']} MiB "
                  f"({i['kib_per_connection']} KiB per connection)",
                  f"- broker CPU while they idle: {i['broker_idle_cpu_pct']}% of a core",
                  f"- e2e at 10k msg/s meanwhile: p50 {lat.get('p50')} ms, p99 {lat.get('p99')} "
                  f"ms, p99.9 {lat.get('p999')} ms (other CPU {e['other_cpu_pct']}%)", ""]
    mem = doc.get("memory")
    if mem:
        ld = mem["load"]
        lines += [f"## Broker memory over {mem['minutes']:g} minutes of full-rate produce", "",
                  f"- load: 2 producers, 100 B, acks=all, 4 partitions, size-based retention: "
                  f"{ld['messages']:,} messages at {ld['msgs_per_s']:,.0f} msg/s, broker "
                  f"{ld.get('broker_us_per_msg')} us/msg (other CPU {ld['other_cpu_pct']}%)",
                  f"- RSS min {mem['rss_mb_min']} / max {mem['rss_mb_max']} / end "
                  f"{mem['rss_mb_end']} MiB; mean after 30 s: first half "
                  f"{mem['rss_mb_mean_first_half_after_30s']}, second half "
                  f"{mem['rss_mb_mean_second_half']} MiB",
                  f"- samples (s, MiB) every 5 s: {mem['rss_samples']}", ""]
    md = out / f"{stem}.md"
    md.write_text("\n".join(lines))
    js = out / f"{stem}.json"
    js.write_text(json.dumps(doc, indent=1) + "\n")
    return [md, js]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.suite.scale", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--idle-secs", type=float, default=20.0)
    ap.add_argument("--skip", default="", help="comma list of: partitions,idle,memory")
    ap.add_argument("--out", type=Path, default=servers.REPO / "docs" / "benchmarks")
    ap.add_argument("--work", type=Path,
                    default=Path(os.environ.get("TMPDIR", "/tmp")) / "yak-scale")
    a = ap.parse_args(argv)
    skip = set(a.skip.split(","))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.connections + 1024
    if soft < need:  # the broker inherits it: each idle connection is a descriptor
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    a.work.mkdir(parents=True, exist_ok=True)
    yak = servers.make("yak", a.work)
    assert isinstance(yak, servers.YakServer)
    yak.settings = {"log.segment.bytes": str(64 * 2**20),
                    "log.retention.bytes": str(512 * 2**20),
                    "log.retention.check.interval.ms": "5000"}
    command = "python -m benchmarks.suite.scale " + " ".join(
        argv if argv is not None else __import__("sys").argv[1:])
    doc: dict[str, Any] = {"meta": {**report.machine_info(a.work), "command": command}}
    yak.start()
    try:
        if "partitions" not in skip:
            doc["partitions"] = many_partitions(yak, a.partitions, a.messages)
            print(json.dumps(doc["partitions"]), flush=True)
        if "idle" not in skip:
            doc["idle"] = idle_connections(yak, a.connections, a.idle_secs)
            print(json.dumps(doc["idle"]), flush=True)
        if "memory" not in skip:
            doc["memory"] = memory_run(yak, a.minutes)
            print(json.dumps({k: v for k, v in doc["memory"].items() if k != "rss_samples"}),
                  flush=True)
    finally:
        yak.stop()
    for p in write(doc, a.out):
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
