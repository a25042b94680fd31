"""What segment uploads cost the broker's event loop (issue 25: producer p99 during uploads).

The producer p99 of `tiered_produce_ab.py` swings 9-326 ms between runs of the same code on
this shared 2-core machine, on both sides, so it cannot show what the uploader does to the
broker. What delays a Produce is the event loop: a callback that runs long, or a thread
that holds the GIL when the loop wants to wake. This measures that directly, in one
process with the broker's own parts (no broker process, no client):

- a real `ReplicaManager` with real logs, the `RemoteLogManager` a single broker runs, its
  local metadata store (`LocalKV` in a file, as `yak serve` has) and SeaweedFS's S3 on
  127.0.0.1 (or `--store file`);
- an append load on a plain partition of the same replica manager on the same loop
  (`--append-mb-s`, 16 KiB batches, acks=1: the broker's produce work);
- a probe coroutine that sleeps 1 ms and records how late it wakes (the loop's lag: what a
  request arriving then would wait);
- the event loop thread's CPU (`time.thread_time()` on the loop) and the whole process's.

Phase A ("on"): a tiered partition with `--mb` of rolled segments is uploaded (rounds of
`run_once` + `wait_idle`, the manager's own path: segments chosen in a thread, commits in
the metadata store and the bucket, multipart uploads) while the load and the probe run.
Phase B ("off"): the same load and probe, no uploads, for as long as A took. Alternated
ABAB... `--pairs` times. Reported: per phase the probe's lateness percentiles, the loop's
CPU and the process's, and per pair the loop CPU that uploading added per uploaded MB.
`--profile` runs cProfile on the loop thread during the A phases and prints the top
functions by own time (where the loop's extra CPU goes).

    .venv/bin/python benchmarks/tiered_loop_ab.py --pairs 4 --mb 64
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.spark_bench import _tree_cpu  # noqa: E402
from tests.tiered.seaweed import SeaweedS3  # noqa: E402
from yak.cluster.layout import ClusterKeys  # noqa: E402
from yak.cluster.local_kv import LocalKV  # noqa: E402
from yak.cluster.remote_log_metadata import KVRemoteLogMetadata  # noqa: E402
from yak.partition import PartitionState, ReplicaManager  # noqa: E402
from yak.protocol.records import Record, build_batch  # noqa: E402
from yak.storage import LogConfig, LogManager  # noqa: E402
from yak.tiered import HostedPartition, RemoteLogManager, TieredConfig  # noqa: E402
from yak.tiered.metadata import (  # noqa: E402
    Manifest,
    ManifestStore,
    RemoteLogSegmentMetadata,
    SegmentState,
)

ME = 1
STORE_PID: list[int] = []  # SeaweedFS's, when it runs
SEG = 4 << 20


def tiered_config() -> LogConfig:
    return LogConfig.from_props({"segment.bytes": str(SEG), "remote.storage.enable": "true",
                                 "local.retention.bytes": str(1 << 40)})


def batch(n: int, value: int) -> bytes:
    """One 16 KiB-ish batch of `n` records (built once, appended many times)."""
    return build_batch([Record(b"k", b"v" * value, int(time.time() * 1000))
                        for _ in range(n)])


class Probe:
    """Sleeps `period` s in a loop and records how late it wakes (ms)."""

    def __init__(self, period: float = 0.001) -> None:
        self.period = period
        self.late: list[float] = []
        self._stop = False

    async def run(self) -> None:
        while not self._stop:
            t = time.perf_counter()
            await asyncio.sleep(self.period)
            self.late.append((time.perf_counter() - t - self.period) * 1000)

    def stop(self) -> None:
        self._stop = True


async def append_load(rm: ReplicaManager, topic: str, mb_s: float, stop: asyncio.Event
                      ) -> int:
    """Appends 16 KiB batches to `topic`-0 at `mb_s` (acks=1), ticking every 10 ms."""
    data = memoryview(batch(16, 1000))
    per_tick = max(1, round(mb_s * 1e6 / len(data) / 100))
    n = 0
    next_t = time.perf_counter()
    while not stop.is_set():
        for _ in range(per_tick):
            (r,) = await rm.append_records([(topic, 0, data)], 1)
            assert r.error == 0, r.error
            n += 1
        next_t += 0.01
        await asyncio.sleep(max(0.0, next_t - time.perf_counter()))
    return n


class SlowCallbacks:
    """Times every callback the loop runs (`asyncio.Handle._run`) and keeps those over
    `ms` with what they ran: the loop's own long steps, as against lag from threads
    holding the GIL (which shows in the probe but in no callback)."""

    def __init__(self, ms: float) -> None:
        self.ms = ms
        self.slow: dict[str, list[float]] = {}
        self.active = False
        orig = asyncio.events.Handle._run
        me = self

        def _run(handle: asyncio.events.Handle) -> None:
            if not me.active:
                return orig(handle)
            t = time.perf_counter()
            orig(handle)
            d = (time.perf_counter() - t) * 1000
            if d > me.ms:
                cb = getattr(handle, "_callback", None)
                task = getattr(cb, "__self__", None)
                coro = getattr(task, "get_coro", lambda: None)()
                name = getattr(coro, "__qualname__", None) or repr(cb)[:80]
                me.slow.setdefault(name, []).append(round(d, 2))

        asyncio.events.Handle._run = _run  # type: ignore[method-assign]


def run_delay_s() -> float:
    """How long this thread (the loop's) has waited for a CPU while runnable (the kernel's
    schedstat): lag the OS scheduler caused, as against the loop's work or the GIL."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except OSError:
        return 0.0


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's threads, summed by thread name (the event
    loop is the main thread; obstore's I/O runtime, `asyncio.to_thread`'s pool...)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        name = "loop" if int(task) == os.getpid() else name.rstrip("0123456789-_")
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def store_cpu() -> float:
    """The object store's CPU seconds so far (SeaweedFS on the same cores), 0 for file."""
    return _tree_cpu(STORE_PID[0]) if STORE_PID else 0.0


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2)


async def fill(rm: ReplicaManager, topic: str, mb: int) -> None:
    """`mb` of rolled segments in `topic`-0 (written before the phase, not measured)."""
    data = memoryview(batch(16, 1000))
    for _ in range(mb * (1 << 20) // len(data) + 2):
        await rm.append_records([(topic, 0, data)], 1)
    await asyncio.to_thread(rm.logs.maintenance)
    await asyncio.to_thread(rm.logs.wait_for_flushes, 60)


async def seed(rm: ReplicaManager, rlm: RemoteLogManager, topic: str, tid: str, n: int
               ) -> None:
    """A remote log of `n` segments already (what a partition tiered for a while has):
    entries for [0, n * 1000) in the bucket's manifest, the local log restarted at
    n * 1000, and one round (nothing to copy yet) that takes the manifest into the metadata
    store, so the measured rounds commit versions of a long remote log."""
    now = int(time.time() * 1000)
    files = {"log": (SEG, 0), "index": (8192, 1), "timeindex": (12288, 2),
             "snapshot": (100, 3), "leader-epoch-checkpoint": (20, 4)}
    segs = tuple(RemoteLogSegmentMetadata(
        RemoteLogSegmentMetadata.new_id(), i * 1000, i * 1000 + 999, now, SEG, [(0, i * 1000)],
        SegmentState.COPY_SEGMENT_FINISHED, files, ME, now) for i in range(n))
    await ManifestStore(rlm.store).commit(Manifest(topic, 0, tid, 1, 0, ME, 0, segs))
    plog = rm.get_partition(topic, 0).log  # type: ignore[union-attr]
    plog.truncate_fully_and_start_at(n * 1000)
    rlm.run_once()
    await rlm.wait_idle()
    assert plog.tiered_upto == n * 1000, (plog.tiered_upto, rlm.last_error)


async def phase(rm: ReplicaManager, rlm: RemoteLogManager | None, topic: str | None,
                seconds: float | None, args: argparse.Namespace,
                prof: cProfile.Profile | None) -> dict[str, float]:
    """One measured phase: uploads of `topic` (rlm given) or `seconds` of idle uploader."""
    probe = Probe()
    stop = asyncio.Event()
    load = asyncio.create_task(append_load(rm, "load", args.append_mb_s, stop))
    ptask = asyncio.create_task(probe.run())
    await asyncio.sleep(0.2)  # both running before the measurement starts
    probe.late.clear()
    c0, p0, t0 = time.thread_time(), time.process_time(), time.perf_counter()
    r0 = run_delay_s()
    th0, s0 = thread_cpu(), store_cpu()
    uploaded = 0
    rounds = 0
    if prof is not None:
        prof.enable()
    if rlm is not None and topic is not None:
        plog = rm.get_partition(topic, 0).log  # type: ignore[union-attr]
        target = plog.segments[-1].base_offset
        while (plog.tiered_upto or 0) < target:
            rlm.run_once()
            await rlm.wait_idle()
            rounds += 1
            if rounds > 200:
                raise RuntimeError(f"uploads stuck: {rlm.last_error}")
        uploaded = rlm.copy_bytes
    else:
        await asyncio.sleep(seconds or 1.0)
    if prof is not None:
        prof.disable()
    wall = time.perf_counter() - t0
    loop_cpu, proc_cpu = time.thread_time() - c0, time.process_time() - p0
    run_delay = run_delay_s() - r0
    th1, store = thread_cpu(), store_cpu() - s0
    threads = {k: round(v - th0.get(k, 0.0), 2) for k, v in th1.items()
               if v - th0.get(k, 0.0) >= 0.01}
    stop.set()
    probe.stop()
    await load
    await ptask
    return {"wall_s": round(wall, 3), "rounds": rounds, "uploaded_mb": round(uploaded / 1e6, 2),
            "loop_cpu_s": round(loop_cpu, 3), "process_cpu_s": round(proc_cpu, 3),
            "loop_busy": round(loop_cpu / wall, 3),
            "lag_p50_ms": pct(probe.late, 0.50), "lag_p99_ms": pct(probe.late, 0.99),
            "lag_p999_ms": pct(probe.late, 0.999), "lag_max_ms": round(max(probe.late), 2),
            "lag_over_5ms": sum(1 for x in probe.late if x > 5),
            "lag_sum_ms": round(sum(probe.late), 1),
            "loop_run_delay_ms": round(run_delay * 1000, 1),
            "store_cpu_s": round(store, 2), "threads_cpu_s": threads,  # type: ignore[dict-item]
            "wakeups": len(probe.late), "load_1m": round(os.getloadavg()[0], 1)}


async def main_async(args: argparse.Namespace, tmp: Path, uri: str,
                     creds: dict[str, str]) -> None:
    logs = LogManager(str(tmp / "data"), LogConfig(), start_cleaner=False)
    logs.startup()
    rm = ReplicaManager(ME, logs)
    kv = LocalKV(tmp / "kv.json").open_sync()
    cfg = TieredConfig(enabled=True, uri=uri, task_interval_ms=3_600_000, retry_backoff_ms=0,
                       access_key_id=creds.get("id"), secret_access_key=creds.get("secret"),
                       **{k: int(v) for k, v in (kv_.split("=", 1) for kv_ in args.set)})

    def hosted() -> list[HostedPartition]:
        return [HostedPartition(p.topic, p.index, str(p.topic_id), p.log, p.leader_epoch,
                                p.is_leader) for p in rm.partitions()]

    rlm = RemoteLogManager(cfg, ME, hosted, metadata=KVRemoteLogMetadata(kv, ClusterKeys("b")))
    rm.remote_log = rlm
    await rlm.start()
    state = PartitionState((ME,), (ME,), ME, 0, 0)
    rm.apply_partition_state("load", 0, uuid.uuid4(), state, LogConfig.from_props(
        {"segment.bytes": str(64 << 20), "retention.bytes": str(256 << 20)}))
    prof = cProfile.Profile() if args.profile else None
    slow = SlowCallbacks(args.slow_ms) if args.slow_ms else None
    rows: list[dict[str, object]] = []
    on_wall: float | None = None  # an "off" phase lasts as long as the last "on" one
    try:
        for i in range(args.pairs):
            topic = f"tiered{i}"
            tid = uuid.uuid4()
            rm.apply_partition_state(topic, 0, tid, state, tiered_config())
            if args.remote_segments:
                await seed(rm, rlm, topic, str(tid), args.remote_segments)
            await fill(rm, topic, args.mb)
            rlm.copy_bytes = 0
            order = ("on", "off") if i % 2 == 0 else ("off", "on")
            res: dict[str, dict[str, float]] = {}
            for kind in order:
                if kind == "on":
                    if slow is not None:
                        slow.active = True
                    res["on"] = await phase(rm, rlm, topic, None, args, prof)
                    if slow is not None:
                        slow.active = False
                    on_wall = res["on"]["wall_s"]
                else:
                    res["off"] = await phase(rm, None, None, on_wall or args.off_seconds,
                                             args, None)
            extra = res["on"]["loop_cpu_s"] - res["off"]["loop_cpu_s"] * (
                res["on"]["wall_s"] / res["off"]["wall_s"])
            per_mb = extra / max(res["on"]["uploaded_mb"], 1e-9) * 1000
            row = {"pair": i, "order": "".join(k[1] for k in order), **{
                f"{k}_{m}": v for k in ("on", "off") for m, v in res[k].items()},
                "loop_cpu_ms_per_uploaded_mb": round(per_mb, 2)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        await rlm.stop()
        rm.io_pool.shutdown(wait=True)
        logs.shutdown()
    for m in ("lag_p50_ms", "lag_p99_ms", "lag_p999_ms", "lag_max_ms", "lag_over_5ms",
              "lag_sum_ms", "loop_run_delay_ms", "loop_busy", "loop_cpu_s", "process_cpu_s",
              "store_cpu_s"):
        on = [r[f"on_{m}"] for r in rows]
        off = [r[f"off_{m}"] for r in rows]
        print(f"{m:14s} on {on}  off {off}  median on/off "
              f"{statistics.median(on)} / {statistics.median(off)}")  # type: ignore[type-var]
    print("loop CPU per uploaded MB (ms):",
          [r["loop_cpu_ms_per_uploaded_mb"] for r in rows], "median",
          statistics.median(r["loop_cpu_ms_per_uploaded_mb"] for r in rows))  # type: ignore[type-var]
    if slow is not None:
        print(f"loop callbacks over {args.slow_ms} ms in the 'on' phases:")
        for name, ds in sorted(slow.slow.items(), key=lambda kv: -sum(kv[1])):
            print(f"  {len(ds):4d} x  max {max(ds):7.2f} ms  {name}")
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(r"yak/|json|{", args.profile)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--mb", type=int, default=64, help="MB of rolled segments per upload phase")
    ap.add_argument("--append-mb-s", type=float, default=10.0,
                    help="the produce-like append load on the loop in both phases")
    ap.add_argument("--remote-segments", type=int, default=0,
                    help="seed each tiered partition's remote log with this many segments")
    ap.add_argument("--off-seconds", type=float, default=5.0)
    ap.add_argument("--store", choices=("s3", "file"), default="s3")
    ap.add_argument("--profile", type=int, default=0,
                    help="cProfile the loop thread in the 'on' phases; print this many rows")
    ap.add_argument("--slow-ms", type=float, default=0.0,
                    help="list the loop's callbacks longer than this in the 'on' phases")
    ap.add_argument("--set", action="append", default=[],
                    help="TieredConfig field=int (e.g. copier_pool_size=1)")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="yak-tiered-loop-"))
    try:
        if args.store == "file":
            asyncio.run(main_async(args, tmp, f"file://{tmp}/bucket", {}))
            return
        weed = SeaweedS3(str(tmp))
        weed.start()
        if weed.proc is not None:
            STORE_PID.append(weed.proc.pid)
        try:
            weed.create_bucket("loopab")
            asyncio.run(main_async(args, tmp, f"s3://loopab/p?endpoint={weed.endpoint}"
                                   "&region=us-east-1", {"id": "ab", "secret": "absecret"}))
        finally:
            weed.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
