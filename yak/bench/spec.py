"""What a benchmark run asks for (`BenchSpec`) and what it measured (`BenchResult`).

Both are plain dataclasses so that the spec can be pickled to worker processes and the
result can be written as JSON unchanged: a result always carries the spec it came from,
so a number is never separated from the settings that produced it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

MODES = ("produce", "consume", "e2e")
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class BenchSpec:
    """One run's workload. Count and duration both bound a run; 0 means "no bound"."""

    bootstrap: str = "127.0.0.1:9092"
    topic: str = "yak-bench"
    message_size: int = 100
    count: int = 1_000_000
    duration_s: float = 0.0
    partitions: int = 1
    replication_factor: int = -1
    acks: str = "all"
    compression: str = "none"
    linger_ms: float = 5.0
    batch_size: int = 1_048_576
    producers: int = 1
    consumers: int = 1
    rate: int = 0  # msg/s over all producers; 0 = as fast as possible (e2e needs a rate)
    fetch_wait_ms: int = 100
    timeout_s: float = 120.0  # hard cap on any run, whatever count/duration say
    client_config: dict[str, str] = field(default_factory=dict)
    topic_config: dict[str, str] = field(default_factory=dict)  # when the run creates the topic

    def validate(self, mode: str) -> None:
        """Reject a spec before any process starts, with a message a user can act on."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")
        if self.message_size < (8 if mode == "e2e" else 1):
            raise ValueError("message size must be >= 8 bytes for e2e (timestamp) and >= 1")
        if self.count < 0 or self.duration_s < 0 or self.rate < 0:
            raise ValueError("count, duration and rate must not be negative")
        if self.count == 0 and self.duration_s == 0 and mode != "consume":
            raise ValueError("give a message count or a duration")
        if self.partitions < 1 or self.producers < 1 or self.consumers < 1:
            raise ValueError("partitions, producers and consumers must be >= 1")
        if self.acks not in ("0", "1", "all", "-1"):
            raise ValueError(f"invalid acks {self.acks!r}: expected 0, 1 or all")
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"invalid compression {self.compression!r}")
        if mode == "e2e" and self.rate == 0:
            raise ValueError("e2e needs a target rate (msg/s): latency at saturation is queueing")


@dataclass
class Latency:
    """Percentiles in milliseconds over every message of the run (not sampled)."""

    count: int
    p50: float
    p95: float
    p99: float
    p999: float
    max: float
    mean: float

    @classmethod
    def from_ns(cls, samples: list[int]) -> Latency | None:
        if not samples:
            return None
        s = sorted(samples)
        n = len(s)

        def q(p: float) -> float:
            # nearest-rank: the smallest sample with at least p of the samples at or below it
            idx = min(n - 1, max(0, math.ceil(p * n) - 1))
            return round(s[idx] / 1e6, 3)

        return cls(
            count=n,
            p50=q(0.50),
            p95=q(0.95),
            p99=q(0.99),
            p999=q(0.999),
            max=round(s[-1] / 1e6, 3),
            mean=round(sum(s) / n / 1e6, 3),
        )


@dataclass
class BrokerUsage:
    """The broker process's own cost over the measured window (psutil, user + system)."""

    pid: int
    cpu_s: float
    cpu_us_per_msg: float | None
    cpu_pct: float
    rss_mb_start: float
    rss_mb_end: float


@dataclass
class BenchResult:
    mode: str
    spec: BenchSpec
    messages: int
    bytes: int
    seconds: float
    msgs_per_s: float
    mb_per_s: float
    errors: int = 0
    latency_ms: Latency | None = None  # produce: send -> ack; e2e: send -> consumed
    client_cpu_s: float = 0.0
    broker: BrokerUsage | None = None
    other_cpu_pct: float | None = None  # everyone else on the machine, % of one core
    cpus: int = 1
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
