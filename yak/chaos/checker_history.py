"""The history parsed for the checker (`yak.chaos.checker`): sends, transactions and
reads, with each transaction's fate decided.

One pass over the operations (format in `checker.py`'s docstring) builds `History`;
a malformed operation raises `HistoryError` naming it. The checks read only this.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from yak.chaos.anomalies import HistoryError

__all__ = ["READ_COMMITTED", "READ_UNCOMMITTED", "History", "Read", "Send", "Stream", "Txn",
           "consumer_streams", "fate"]

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


@dataclass(slots=True)
class Send:
    index: int
    process: Hashable
    partition: Hashable
    value: Hashable
    status: str
    offset: int | None
    txn: Hashable | None
    source: Hashable | None = None  # the input value a pipeline derived this one from
    source_at: Hashable | None = None  # (partition, offset) of that input, if known
    sent: float | None = None  # when the workload handed it to the client, if recorded
    reported: float | None = None  # when the client reported its fate (the op's time)
    error: str | None = None  # the client's error for a failed or unknown send


@dataclass(slots=True)
class Txn:
    key: Hashable
    process: Hashable = None
    commit: str | None = None  # status of the commit attempt, if any
    abort: str | None = None
    sends: list[Send] = field(default_factory=list)
    fate: str = "aborted"  # committed | aborted | unknown


@dataclass(slots=True)
class Read:
    index: int
    process: Hashable
    isolation: str
    partition: Hashable
    offset: int
    value: Hashable
    txn: Hashable | None
    epoch: int  # the consumer's resets of all partitions so far
    segment: tuple[int, int]  # (epoch, resets of this partition so far)
    final: bool = False  # made by a final reader (read to the end after the faults)


def _key(x: Any) -> Hashable:
    if isinstance(x, list):
        return tuple(_key(i) for i in x)
    if isinstance(x, dict):
        raise HistoryError(f"an object is not a valid partition/value/process: {x!r}")
    return x


def _need(op: Mapping[str, Any], name: str, i: int) -> Any:
    if name not in op:
        raise HistoryError(f"operation {i} ({op.get('op')!r}) has no {name!r}")
    return op[name]


def _time(v: Any) -> float | None:
    """An optional time in seconds; anything else (absent, malformed) is None."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _offset(x: Any, i: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise HistoryError(f"operation {i}: offset {x!r} is not a non-negative integer")
    return x


class History:
    """Every send (by value), transaction (by key) and read of one history, each
    transaction's fate decided; built in one pass, in the order the operations completed."""

    def __init__(self, ops: Iterable[Mapping[str, Any]]) -> None:
        self.sends: dict[Hashable, Send] = {}
        self.send_order: list[Send] = []
        self.txns: dict[Hashable, Txn] = {}
        self.reads: list[Read] = []
        self.polls = 0
        self.drained: set[Hashable] = set()  # pipeline input partitions consumed to the end
        self.final_partitions: set[Hashable] = set()  # read to their end by a final reader
        segments: dict[tuple[Hashable, Hashable], int] = defaultdict(int)
        resets_all: dict[Hashable, int] = defaultdict(int)
        for i, op in enumerate(ops):
            if not isinstance(op, Mapping):
                raise HistoryError(f"operation {i} is not an object")
            kind = op.get("op")
            if kind == "send":
                self._send(op, i)
            elif kind == "txn":
                self._txn_op(op, i)
            elif kind == "poll":
                self.polls += 1
                process = _key(_need(op, "process", i))
                isolation = op.get("isolation", READ_UNCOMMITTED)
                if isolation not in (READ_COMMITTED, READ_UNCOMMITTED):
                    raise HistoryError(f"operation {i}: isolation {isolation!r}")
                txn = _key(op.get("txn"))
                final = bool(op.get("final"))
                if txn is not None:
                    self._txn(txn).process = process
                records = _need(op, "records", i)
                if not isinstance(records, list):
                    raise HistoryError(f"operation {i}: records is not a list")
                for r in records:
                    if isinstance(r, Mapping):
                        part, off, val = (_need(r, k, i) for k in ("partition", "offset", "value"))
                    elif isinstance(r, list) and len(r) == 3:  # compact: [partition, offset, value]
                        part, off, val = r
                    else:
                        raise HistoryError(f"operation {i}: a record is not an object")
                    partition = _key(part)
                    epoch = resets_all[process]
                    self.reads.append(
                        Read(
                            i,
                            process,
                            isolation,
                            partition,
                            _offset(off, i),
                            _key(val),
                            txn,
                            epoch,
                            (epoch, segments[(process, partition)]),
                            final,
                        )
                    )
                    if final:
                        self.final_partitions.add(partition)
            elif kind == "nemesis":
                continue
            elif kind == "drained":
                self.drained.update(_key(p) for p in _need(op, "partitions", i))
            elif kind == "reset":
                process = _key(_need(op, "process", i))
                parts = op.get("partitions")
                if op.get("final") and parts is not None:
                    self.final_partitions.update(_key(p) for p in parts)
                if parts is None:
                    resets_all[process] += 1
                else:
                    for p in parts:
                        segments[(process, _key(p))] += 1
            else:
                raise HistoryError(f"operation {i}: unknown op {kind!r}")
        self._decide_fates()

    def _txn(self, key: Hashable) -> Txn:
        t = self.txns.get(key)
        if t is None:
            t = self.txns[key] = Txn(key)
        return t

    def _send(self, op: Mapping[str, Any], i: int) -> None:
        value = _key(_need(op, "value", i))
        if value in self.sends:
            raise HistoryError(f"operation {i}: value {value!r} was sent twice (values are unique)")
        status = op.get("status", "ok")
        if status not in ("ok", "fail", "info"):
            raise HistoryError(f"operation {i}: send status {status!r}")
        offset = op.get("offset")
        s = Send(
            i,
            _key(_need(op, "process", i)),
            _key(_need(op, "partition", i)),
            value,
            status,
            None if offset is None or status != "ok" else _offset(offset, i),
            _key(op.get("txn")),
            _key(op.get("source")),
            _key(op.get("source_at")),
            _time(op.get("sent")),
            _time(op.get("time")),
            op.get("error") if isinstance(op.get("error"), str) else None,
        )
        self.sends[value] = s
        self.send_order.append(s)
        if s.txn is not None:
            t = self._txn(s.txn)
            t.process = s.process
            t.sends.append(s)

    def _txn_op(self, op: Mapping[str, Any], i: int) -> None:
        t = self._txn(_key(_need(op, "txn", i)))
        t.process = _key(op.get("process", t.process))
        action = _need(op, "action", i)
        status = op.get("status", "ok")
        if status not in ("ok", "fail", "info"):
            raise HistoryError(f"operation {i}: txn status {status!r}")
        if action == "commit":
            # the strongest outcome wins: a retried commit that finally succeeded did commit
            rank = {"ok": 2, "info": 1, "fail": 0}
            if t.commit is None or rank[status] > rank[t.commit]:
                t.commit = status
        elif action == "abort":
            t.abort = status
        elif action != "begin":
            raise HistoryError(f"operation {i}: txn action {action!r}")

    def _decide_fates(self) -> None:
        read_committed_values = {r.value for r in self.reads if r.isolation == READ_COMMITTED}
        for t in self.txns.values():
            if t.commit == "ok":
                t.fate = "committed"
            elif t.commit == "info":
                # an unknown commit is proven by a read_committed reader having seen it
                seen = any(s.value in read_committed_values for s in t.sends)
                t.fate = "committed" if seen else "unknown"
            else:
                t.fate = "aborted"  # only a commit commits


def fate(h: History, s: Send) -> str:
    """committed (owed to every reader), aborted (never visible read_committed),
    unknown (may or may not be there)."""
    if s.txn is not None:
        return h.txns[s.txn].fate
    return "committed" if s.status == "ok" else "unknown"


Stream = tuple[Hashable, tuple[int, int], Hashable]  # (process, segment, partition)


def consumer_streams(h: History) -> dict[Stream, list[Read]]:
    streams: dict[Stream, list[Read]] = defaultdict(list)
    for r in h.reads:
        streams[(r.process, r.segment, r.partition)].append(r)
    return streams
