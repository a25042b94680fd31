"""Group coordinator benchmark: mass rebalance latency and offset-commit throughput.

Runs a real `yak serve` subprocess and drives it with raw, pre-encoded requests from
one asyncio process (real clients would spend far more CPU than the broker and hide
it). What the broker itself spends is read from psutil (user + system CPU of the
broker process), which is what matters on a shared, noisy machine.

1. rebalance: G groups x M members, each member on its own connection (a blocked
   JoinGroup holds its connection, as with real clients), do the KIP-394 round trip,
   JoinGroup, and SyncGroup (the leader hands in an assignment). Reported: wall time
   from the first JoinGroup to the last SyncGroup answer, against the protocol's own
   minimum (the initial rebalance delay, extended once by members arriving during
   it, unless the members' rebalance timeout equals the delay, as in Kafka).
2. commits: C OffsetCommit requests (P partitions each) pipelined on K connections
   by a "simple" consumer (generation -1); reported per broker CPU second.

    .venv/bin/python benchmarks/group_bench.py [--groups 1000] [--members 3] [--commits 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from yak.group.consumer_protocol import encode_assignment, encode_subscription
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

REPO = Path(__file__).resolve().parent.parent
MS = datetime.timedelta(milliseconds=1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, settings: dict[str, str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="yak-group-bench-")
        self.port = free_port()
        cmd = [sys.executable, "-m", "yak.broker.server", "--data-dir", self.dir]
        cmd += ["--listen", f"127.0.0.1:{self.port}"]
        for k, v in settings.items():
            cmd += ["--set", f"{k}={v}"]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "ready" not in line:
            raise RuntimeError(f"broker did not start: {line!r}")
        self.ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def loop_cpu(self) -> float:
        """CPU of the event-loop thread alone (the request path), without the log
        cleaner and I/O threads, which work in the background."""
        for t in self.ps.threads():
            if t.id == self.proc.pid:
                return t.user_time + t.system_time
        return 0.0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def frame(api: str, version: int, cid: int, **fields: Any) -> bytes:
    key = kio_compat.api_key_for(api)
    req = kio_compat.build(kio_compat.request_class(key, version), **fields)
    return kio_compat.encode_request(req, cid, "bench")


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r, self.w, self.cid = reader, writer, 0

    @classmethod
    async def open(cls, port: int) -> Conn:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return cls(r, w)

    async def call(self, api: str, version: int, **fields: Any) -> Any:
        self.cid += 1
        self.w.write(frame(api, version, self.cid, **fields))
        size = struct.unpack(">i", await self.r.readexactly(4))[0]
        _, resp = kio_compat.decode_response(
            kio_compat.api_key_for(api), version, await self.r.readexactly(size)
        )
        return resp

    def close(self) -> None:
        self.w.close()


async def member(
    c: Conn, group: str, rebalance_ms: int, marks: dict[str, dict[str, float]]
) -> None:
    mod = kio_compat.schema_module("join_group", 9, "request")
    sync_mod = kio_compat.schema_module("sync_group", 5, "request")
    sub = encode_subscription(["bench"])
    fields = dict(
        group_id=group,
        session_timeout=30_000 * MS,
        rebalance_timeout=rebalance_ms * MS,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(mod.JoinGroupRequestProtocol(name="range", metadata=sub),),
        reason=None,
    )
    m = marks.setdefault(group, {})
    m.setdefault("first_join", time.monotonic())
    first = await c.call("join_group", 9, member_id="", **fields)
    assert first.error_code is ErrorCode.member_id_required, first
    m.setdefault("first_rejoin", time.monotonic())  # the broker's delay starts here
    res = await c.call("join_group", 9, member_id=first.member_id, **fields)
    assert res.error_code is ErrorCode.none, res
    m["joined"] = max(m.get("joined", 0.0), time.monotonic())
    assignments = ()
    if res.leader == res.member_id:
        assignments = tuple(
            sync_mod.SyncGroupRequestAssignment(
                member_id=m.member_id, assignment=encode_assignment({"bench": [i]})
            )
            for i, m in enumerate(res.members)
        )
    sync = await c.call(
        "sync_group",
        5,
        group_id=group,
        generation_id=res.generation_id,
        member_id=res.member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=assignments,
    )
    assert sync.error_code is ErrorCode.none, sync
    m["stable"] = max(m.get("stable", 0.0), time.monotonic())


async def bench_rebalance(port: int, groups: int, members: int, rebalance_ms: int) -> dict:
    """Connections are opened first: connecting 3,000 sockets is not part of a rebalance."""
    conns = [await Conn.open(port) for _ in range(groups * members)]
    marks: dict[str, dict[str, float]] = {}
    t0 = time.monotonic()
    cpu0 = time.process_time()
    await asyncio.gather(
        *(
            member(conns[g * members + i], f"bench-{g}", rebalance_ms, marks)
            for g in range(groups)
            for i in range(members)
        )
    )
    client_cpu = time.process_time() - cpu0
    for c in conns:
        c.close()

    def stats(key: str, values: list[float]) -> dict[str, float]:
        values.sort()
        return {
            f"{key}_p50_s": round(values[len(values) // 2], 3),
            f"{key}_max_s": round(values[-1], 3),
        }

    out: dict[str, Any] = {
        "groups": len(marks),
        "members": groups * members,
        "all_stable_after_s": round(max(m["stable"] for m in marks.values()) - t0, 3),
        "client_cpu_s": round(client_cpu, 3),
    }
    # first JoinGroup -> last SyncGroup answer of the group (what the issue bounds)
    out |= stats("per_group", [m["stable"] - m["first_join"] for m in marks.values()])
    # first JoinGroup with a member id (the delay starts) -> last JoinGroup answer
    out |= stats("join_barrier", [m["joined"] - m["first_rejoin"] for m in marks.values()])
    # last JoinGroup answer -> last SyncGroup answer
    out |= stats("sync_phase", [m["stable"] - m["joined"] for m in marks.values()])
    return out


async def bench_commits(port: int, commits: int, partitions: int, conns: int) -> dict:
    mod = kio_compat.schema_module("offset_commit", 9, "request")
    per_conn = commits // conns

    def build(conn: int) -> list[bytes]:
        out = []
        for i in range(per_conn):
            topic = mod.OffsetCommitRequestTopic(
                name="bench",
                partitions=tuple(
                    mod.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=i, committed_metadata=""
                    )
                    for p in range(partitions)
                ),
            )
            out.append(
                frame(
                    "offset_commit",
                    9,
                    i + 1,
                    group_id=f"committer-{conn}",
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    group_instance_id=None,
                    topics=(topic,),
                )
            )
        return out

    frames = [build(c) for c in range(conns)]
    links = [await Conn.open(port) for _ in range(conns)]

    async def drive(link: Conn, batch: list[bytes]) -> None:
        async def send() -> None:
            for i in range(0, len(batch), 64):
                link.w.write(b"".join(batch[i : i + 64]))
                await link.w.drain()

        sender = asyncio.create_task(send())
        for _ in batch:
            size = struct.unpack(">i", await link.r.readexactly(4))[0]
            await link.r.readexactly(size)
        await sender

    t0 = time.monotonic()
    await asyncio.gather(*(drive(link, b) for link, b in zip(links, frames, strict=True)))
    wall = time.monotonic() - t0
    for link in links:
        link.close()
    return {"requests": per_conn * conns, "wall_s": round(wall, 3)}


def create_topic(port: int, partitions: int) -> None:
    async def go() -> None:
        c = await Conn.open(port)
        mod = kio_compat.schema_module("create_topics", 5, "request")
        await c.call(
            "create_topics",
            5,
            topics=(
                mod.CreatableTopic(
                    name="bench",
                    num_partitions=partitions,
                    replication_factor=1,
                    assignments=(),
                    configs=(),
                ),
            ),
            timeout=10_000 * MS,
            validate_only=False,
        )
        c.close()

    asyncio.run(go())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--delay-ms", type=int, default=3000)
    ap.add_argument("--commits", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=1, help="partitions per OffsetCommit")
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--only", choices=["rebalance", "commits"], default=None)
    args = ap.parse_args()
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    results: dict[str, Any] = {"cpus": os.cpu_count(), "shared_machine": True}

    cases = (
        ()
        if args.only == "commits"
        else (
            ("default_rebalance_timeout", 300_000),
            ("rebalance_timeout_eq_delay", args.delay_ms),
        )
    )
    for label, rebalance_ms in cases:
        b = Broker({"group.initial.rebalance.delay.ms": str(args.delay_ms)})
        try:
            cpu0 = b.cpu()
            r = asyncio.run(bench_rebalance(b.port, args.groups, args.members, rebalance_ms))
            r["broker_cpu_s"] = round(b.cpu() - cpu0, 3)
            # Kafka's initial delay is extended once when members join during it,
            # unless no rebalance time is left after the first delay.
            r["protocol_minimum_s"] = (
                args.delay_ms / 1000 * (1 if rebalance_ms <= args.delay_ms else 2)
            )
            r["max_overhead_s"] = round(r["per_group_max_s"] - r["protocol_minimum_s"], 3)
            results[f"rebalance_{label}"] = r
        finally:
            b.stop()
        print(json.dumps({label: r}), file=sys.stderr, flush=True)

    if args.only == "rebalance":
        print(json.dumps(results, indent=2))
        return 0
    b = Broker({})
    try:
        create_topic(b.port, max(args.partitions, 1))
        # Warm-up: creates __consumer_offsets and loads code paths.
        asyncio.run(bench_commits(b.port, 2000, args.partitions, args.conns))
        cpu0, loop0 = b.cpu(), b.loop_cpu()
        r = asyncio.run(bench_commits(b.port, args.commits, args.partitions, args.conns))
        cpu = b.cpu() - cpu0
        loop_cpu = b.loop_cpu() - loop0
        r["broker_cpu_s"] = round(cpu, 3)
        r["broker_loop_thread_cpu_s"] = round(loop_cpu, 3)
        r["requests_per_loop_cpu_s"] = round(r["requests"] / loop_cpu)
        r["requests_per_broker_cpu_s"] = round(r["requests"] / cpu)
        r["partition_commits_per_broker_cpu_s"] = round(r["requests"] * args.partitions / cpu)
        r["requests_per_wall_s"] = round(r["requests"] / r["wall_s"])
        r["partitions_per_request"] = args.partitions
        results["commits"] = r
    finally:
        b.stop()
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
