"""The run's history: every operation the workload clients and the nemesis performed.

Workload threads and the nemesis append to one `Recorder` as things complete; each
operation carries `time`, seconds since the run started on the machine's monotonic
clock (which, on Linux, every process shares, so the transactional producers' own
logs line up with the rest; a clock-jump fault fakes only the brokers' wall clocks).

The list is in the checker's format (`yak.chaos.checker`); the nemesis's operations
(`"op": "nemesis"`) are skipped by the checker and drawn by the report.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["Recorder", "load_history", "write_history"]


class Recorder:
    """Thread-safe append-only list of operations, time-stamped relative to `t0`."""

    def __init__(self, t0: float | None = None) -> None:
        self.t0 = time.monotonic() if t0 is None else t0
        self._ops: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def rel(self, mono: float) -> float:
        """A monotonic timestamp taken elsewhere, as seconds since the run started."""
        return mono - self.t0

    def add(self, op: dict[str, Any], at: float | None = None) -> dict[str, Any]:
        """Append `op` (stamped now, unless it already has a `time` or `at` is given)."""
        if "time" not in op:
            op["time"] = round(self.now() if at is None else at, 4)
        with self._lock:
            self._ops.append(op)
        return op

    def extend(self, ops: list[dict[str, Any]]) -> None:
        with self._lock:
            self._ops.extend(ops)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._ops)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)


def write_history(path: Path, ops: list[dict[str, Any]]) -> None:
    """One JSON array, one operation per line (greppable, and still valid JSON)."""
    with open(path, "w") as f:
        f.write("[\n")
        for i, op in enumerate(ops):
            f.write(json.dumps(op, separators=(",", ":")))
            f.write(",\n" if i + 1 < len(ops) else "\n")
        f.write("]\n")


def load_history(path: Path) -> list[dict[str, Any]]:
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict):  # tolerate {"ops": [...]}
        data = data.get("ops", [])
    if not isinstance(data, list):
        raise ValueError(f"{path}: a history is a JSON array of operations")
    return data
