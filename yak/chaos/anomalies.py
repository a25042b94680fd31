"""What the history checker (`yak.chaos.checker`) reports: the anomaly kinds, one
`Anomaly` with the values, partitions, offsets, processes and transactions that prove it,
and the `CheckResult` a run's report is written from.

Apart from `checker.py` so that the checks (`checker_reads.py`, `checker_txns.py`) and the
report (`report.py`) share one vocabulary without importing the checker that runs them.
The kinds are defined in `checker.py`'s docstring.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ANOMALY_KINDS", "Anomaly", "CheckResult", "HistoryError", "Report"]

ANOMALY_KINDS = (
    "lost_write",
    "duplicate",
    "duplicate_after_client_timeout",
    "inconsistent_offsets",
    "aborted_read",
    "never_sent",
    "nonmonotonic_poll",
    "poll_skip",
    "nonmonotonic_send",
    "torn_transaction",
    "G0",
    "G1c",
)

_EXAMPLES_PER_KIND = 1000  # a broken run must not produce a report of gigabytes


class HistoryError(ValueError):
    """The history itself is malformed (the workload's bug, not the broker's)."""


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: str
    detail: str
    values: tuple[Any, ...] = ()
    partition: Any = None
    offsets: tuple[int, ...] = ()
    processes: tuple[Any, ...] = ()
    txns: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "detail": self.detail}
        if self.values:
            d["values"] = list(self.values)
        if self.partition is not None:
            d["partition"] = self.partition
        if self.offsets:
            d["offsets"] = list(self.offsets)
        if self.processes:
            d["processes"] = list(self.processes)
        if self.txns:
            d["txns"] = list(self.txns)
        return d


@dataclass(slots=True)
class CheckResult:
    anomalies: list[Anomaly] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # anomalies per kind (uncapped)
    stats: dict[str, int] = field(default_factory=dict)  # what the history contained

    def failures(self, allowed: Iterable[str] = ()) -> list[Anomaly]:
        allow = set(allowed)
        return [a for a in self.anomalies if a.kind not in allow]

    @property
    def valid(self) -> bool:
        return not self.anomalies

    def to_dict(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "anomaly_counts": dict(self.counts),
            "stats": dict(self.stats),
            "anomalies": [a.to_dict() for a in self.anomalies],
        }


class Report:
    """Collects anomalies: each one counted, at most `_EXAMPLES_PER_KIND` kept per kind."""

    def __init__(self) -> None:
        self.result = CheckResult(counts=dict.fromkeys(ANOMALY_KINDS, 0))

    def add(self, a: Anomaly) -> None:
        self.result.counts[a.kind] += 1
        if self.result.counts[a.kind] <= _EXAMPLES_PER_KIND:
            self.result.anomalies.append(a)
