"""Broker load reports (issue 23): each broker publishes what it is doing, every few seconds.

Why: placement (`cluster_topics.py`) and Yak's own producers (`partitioner=load_aware`)
prefer the least-loaded brokers, and operators see the load per broker in `yak cluster
status` and the console. Kafka leaves this to Cruise Control's metrics reporter; Yak keeps
it in the metadata store it already has, so nothing else must run.

What a report holds (`BrokerLoad`, JSON under `broker_loads/<node id>`, see
`ClusterKeys.broker_load`):

- `cpu_percent`: this process's CPU time over the interval, all threads (100 = one core);
- `busy_ratio`: the share of the interval the event loop's thread spent running, which is
  where every request is handled: Yak's answer to Kafka's request-handler idle ratio
  (`RequestHandlerAvgIdlePercent` = 1 - busy);
- `loop_lag_ms`: how late the sampler's own timer fired (a stalled or paused process
  shows here first);
- bytes and records in (Produce appends) and bytes out (Fetch) per second, from the
  broker's metrics totals;
- the partition logs' bytes, and the free and total bytes of the log dir's file system.

A report is written when it differs from the last one written (`_same`: another score
step, CPU by 5 points, a rate by 20%, ...) or `REWRITE_S` after it. The key is written
on the broker's session lease, so the report of a broker whose process
died goes with its registration (at once when the controller's liveness probe revokes the
lease, else at the session's expiry), and a report is only written while the broker is
registered. The sample's disk part (`statvfs`) runs in a thread, never on the event loop;
the rest is counters read once per interval, nothing on a request path.

`load_score` folds a report into one number in [0, 1] (the busiest of the loop, the CPU
and, once nearly full, the disk), and `preference` orders brokers by it in steps of `SCORE_STEP`, ties by
node id, so brokers that are all about idle keep the order placement has always used.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from yak.cluster.etcd import EtcdError, KeyValue
from yak.cluster.layout import ClusterKeys

if TYPE_CHECKING:
    from yak.cluster.kv import KVClient
    from yak.cluster.node import ClusterNode

__all__ = [
    "SCORE_STEP",
    "BrokerLoad",
    "LoadPublisher",
    "LoadSampler",
    "load_score",
    "preference",
    "read_loads",
]

log = logging.getLogger(__name__)

# Scores closer than this are the same load: placement then keeps its deterministic order.
SCORE_STEP = 0.1
# A report that says nothing new is written again only after this long.
REWRITE_S = 30.0
# A file system fuller than this counts in the score.
DISK_FULL_FROM = 0.9


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """One broker's load over its last report interval."""

    node_id: int
    time_ms: int  # wall clock of the sample
    interval_ms: int
    cpu_percent: float
    busy_ratio: float
    loop_lag_ms: float
    bytes_in_per_s: float
    bytes_out_per_s: float
    messages_in_per_s: float
    log_bytes: int
    disk_free_bytes: int
    disk_total_bytes: int

    @property
    def score(self) -> float:
        return load_score(self)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, value: bytes) -> BrokerLoad:
        d = json.loads(value)
        return cls(
            node_id=int(d["node_id"]), time_ms=int(d["time_ms"]),
            interval_ms=int(d["interval_ms"]), cpu_percent=float(d["cpu_percent"]),
            busy_ratio=float(d["busy_ratio"]), loop_lag_ms=float(d["loop_lag_ms"]),
            bytes_in_per_s=float(d["bytes_in_per_s"]),
            bytes_out_per_s=float(d["bytes_out_per_s"]),
            messages_in_per_s=float(d["messages_in_per_s"]), log_bytes=int(d["log_bytes"]),
            disk_free_bytes=int(d["disk_free_bytes"]),
            disk_total_bytes=int(d["disk_total_bytes"]))

    def summary(self) -> str:
        """One line for `yak cluster status` and logs."""
        return (f"cpu {self.cpu_percent:.0f}%  busy {self.busy_ratio:.0%}  lag"
                f" {self.loop_lag_ms:.0f} ms  in {_rate(self.bytes_in_per_s)}  out"
                f" {_rate(self.bytes_out_per_s)}  logs {_size(self.log_bytes)}  disk free"
                f" {_size(self.disk_free_bytes)}")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _rate(n: float) -> str:
    return _size(n) + "/s"


def load_score(load: BrokerLoad) -> float:
    """The busiest of the broker's resources, in [0, 1]: the event loop's busy share, the
    CPU (one core = 1: the loop runs on one), and the disk once the log dir's file system
    is over DISK_FULL_FROM full (rising to 1 when full: a broker about to run out of disk
    must not get new partitions; below that, brokers sharing a disk, or disks of
    different sizes, would otherwise hide their CPU differences behind the fill)."""
    fill = (1.0 - load.disk_free_bytes / load.disk_total_bytes
            if load.disk_total_bytes > 0 else 0.0)
    disk = max(0.0, (fill - DISK_FULL_FROM) / (1.0 - DISK_FULL_FROM))
    return max(0.0, min(1.0, max(load.busy_ratio, load.cpu_percent / 100.0, disk)))


def preference(brokers: Iterable[int], loads: Mapping[int, BrokerLoad]) -> list[int]:
    """`brokers` least loaded first: by score in steps of SCORE_STEP, then node id. A broker
    without a report counts as idle (a new broker is where new partitions should go)."""
    def key(b: int) -> tuple[int, int]:
        load = loads.get(b)
        return (int(load.score / SCORE_STEP) if load is not None else 0, b)

    return sorted(brokers, key=key)


def read_loads(kvs: Iterable[KeyValue]) -> dict[int, BrokerLoad]:
    """The reports among `kvs` (the image's `broker_loads/` keys); an unreadable one is
    skipped (written by a broker of another version)."""
    out: dict[int, BrokerLoad] = {}
    for kv in kvs:
        try:
            load = BrokerLoad.from_json(kv.value)
        except (ValueError, KeyError, TypeError) as e:
            log.debug("ignoring unreadable load report %s: %s", kv.key, e)
            continue
        out[load.node_id] = load
    return out


class LoadSampler:
    """Rates and ratios since the previous `sample()`; the first call sets the baseline.

    `totals()`: the broker's metrics totals (`bytes_in`, `bytes_out`, `messages_in`);
    `log_bytes()`: the partition logs' size; `log_dir`: where to measure free space.
    """

    def __init__(self, node_id: int, totals: Callable[[], Mapping[str, float]],
                 log_bytes: Callable[[], int], log_dir: Path) -> None:
        self.node_id = node_id
        self.totals = totals
        self.log_bytes = log_bytes
        self.log_dir = Path(log_dir)
        self._last: tuple[float, float, float, Mapping[str, float]] | None = None

    def _now(self) -> tuple[float, float, float, Mapping[str, float]]:
        # (monotonic, process CPU, this thread's CPU, counters): the caller is the loop.
        return (time.monotonic(), time.process_time(), time.thread_time(), self.totals())

    def baseline(self) -> None:
        self._last = self._now()

    async def sample(self, lag_ms: float = 0.0) -> BrokerLoad:
        now = self._now()
        last = self._last or now
        self._last = now
        wall = max(now[0] - last[0], 1e-6)

        def rate(name: str) -> float:
            return max(0.0, (now[3].get(name, 0.0) - last[3].get(name, 0.0)) / wall)

        usage = await asyncio.to_thread(_disk_usage, self.log_dir)
        return BrokerLoad(
            node_id=self.node_id, time_ms=int(time.time() * 1000),
            interval_ms=int(wall * 1000),
            cpu_percent=round(100.0 * (now[1] - last[1]) / wall, 1),
            busy_ratio=round(min(1.0, (now[2] - last[2]) / wall), 3),
            loop_lag_ms=round(max(0.0, lag_ms), 1),
            bytes_in_per_s=round(rate("bytes_in"), 1),
            bytes_out_per_s=round(rate("bytes_out"), 1),
            messages_in_per_s=round(rate("messages_in"), 1),
            log_bytes=self.log_bytes(), disk_free_bytes=usage[0], disk_total_bytes=usage[1])


def _disk_usage(path: Path) -> tuple[int, int]:
    try:
        u = shutil.disk_usage(path)
    except OSError:
        return 0, 0
    return int(u.free), int(u.total)


class LoadPublisher:
    """Samples every `interval_ms` and writes the report on the broker's session lease.

    `lease()`: the session lease id while registered, else 0 (nothing is written then).
    Started and stopped by the composition as the part "broker load reports".
    """

    def __init__(self, client: KVClient, keys: ClusterKeys, sampler: LoadSampler,
                 lease: Callable[[], int], interval_ms: int) -> None:
        self.client = client
        self.key = keys.broker_load(sampler.node_id)
        self.sampler = sampler
        self.lease = lease
        self.interval_s = interval_ms / 1000.0
        self.last: BrokerLoad | None = None
        self._written: tuple[int, float, BrokerLoad] | None = None  # lease, when, what
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def of(cls, node: ClusterNode, interval_ms: int,
           totals: Callable[[], Mapping[str, float]]) -> LoadPublisher:
        """The publisher of a broker's `ClusterNode` (its KV store, keys, session lease and
        logs), reading the broker's metrics `totals`."""
        logs = node.replica_manager.logs

        def log_bytes() -> int:
            return sum(lg.size_in_bytes for lg in logs.logs())

        def lease() -> int:
            reg = node.registration
            return reg.lease.lease_id if reg is not None and reg.is_registered() else 0  # type: ignore[union-attr]

        sampler = LoadSampler(node.node_id, totals, log_bytes, node.data_dir)
        return cls(node.client, node.keys, sampler, lease, interval_ms)

    async def start(self) -> None:
        if self.interval_s <= 0:
            return
        self.sampler.baseline()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"broker-{self.sampler.node_id}-load")

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        # The lease takes it away anyway (deregistration revokes it); this is sooner.
        if self.lease():
            with contextlib.suppress(EtcdError, OSError, TimeoutError):
                await asyncio.wait_for(self.client.delete(self.key), 2.0)

    async def _run(self) -> None:
        while True:
            planned = time.monotonic() + self.interval_s
            await asyncio.sleep(self.interval_s)
            lag_ms = (time.monotonic() - planned) * 1000.0
            try:
                await self.publish(lag_ms)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # etcd down, lease just lost: the next tick tries again
                log.debug("broker %d: load report not written: %s", self.sampler.node_id, e)

    async def publish(self, lag_ms: float = 0.0) -> BrokerLoad | None:
        """Sample now and write the report if it says something new (None when not
        registered or not written)."""
        report = await self.sampler.sample(lag_ms)
        self.last = report
        lease = self.lease()
        if not lease:
            self._written = None
            return None
        now = time.monotonic()
        if (self._written is not None and self._written[0] == lease
                and now - self._written[1] < REWRITE_S and _same(self._written[2], report)):
            return None
        await self.client.put(self.key, report.to_json(), lease=lease)
        self._written = (lease, now, report)
        return report


def _same(a: BrokerLoad, b: BrokerLoad) -> bool:
    """Whether `b` tells a reader nothing `a` did not: the same score step, CPU within 5
    points, rates within 20% (or both under 1 KiB/s), disk and logs within 1%. An idle
    broker then writes once per REWRITE_S instead of every interval (each write is a watch
    event on every broker, and a file rewrite for a single broker's local store)."""
    def near(x: float, y: float, rel: float, floor: float) -> bool:
        return abs(x - y) <= max(floor, rel * max(abs(x), abs(y)))

    return (int(a.score / SCORE_STEP) == int(b.score / SCORE_STEP)
            and near(a.cpu_percent, b.cpu_percent, 0.0, 5.0)
            and near(a.busy_ratio, b.busy_ratio, 0.0, 0.05)
            and near(a.loop_lag_ms, b.loop_lag_ms, 0.0, 50.0)
            and all(near(x, y, 0.2, 1024.0) for x, y in (
                (a.bytes_in_per_s, b.bytes_in_per_s), (a.bytes_out_per_s, b.bytes_out_per_s),
                (a.messages_in_per_s * 100, b.messages_in_per_s * 100)))
            and near(a.log_bytes, b.log_bytes, 0.01, 1 << 20)
            and near(a.disk_free_bytes, b.disk_free_bytes, 0.01, 1 << 20))

