"""The history checker for Kafka "queue" workloads (Jepsen-style), as one pure function.

A workload (the transactions tests of issue 12, the `yak chaos` tool of issue 16) logs
what its producers and consumers did as a list of JSON-serializable operations; `check`
reads that list and names every anomaly it can prove, with the values, partitions and
offsets involved. Nothing here touches a broker, a file or a clock.

History format (one dict per operation, in the order they completed; extra keys are
ignored, so workloads can add timestamps for their own plots):

    {"op": "send", "process": "p1", "partition": "orders-0", "value": 17,
     "status": "ok", "offset": 42, "txn": "p1-t3"}
        status "ok": acknowledged (`offset` is the acked offset, if the client reports it);
        "info": outcome unknown (timeout, broker killed); "fail": refused. Outside a
        transaction a failed send may still have been written (Kafka cannot say), so
        only an ok send is owed to readers. `txn` names the transaction it belongs to.
    {"op": "txn", "process": "p1", "txn": "p1-t3", "action": "begin|commit|abort",
     "status": "ok|fail|info"}
        A transaction commits only through a commit: one that returned ok committed;
        one that failed (definite error) or was never attempted did not; an unknown
        ("info") commit is decided by what readers saw.
    {"op": "poll", "process": "c1", "isolation": "read_committed|read_uncommitted",
     "records": [{"partition": "orders-0", "offset": 42, "value": 17}, ...],
     "txn": "c1-t9"}
        `txn` only for a poll made inside a consume-transform-produce transaction. A
        record may also be written compactly as `["orders-0", 42, 17]` (long runs).
    {"op": "reset", "process": "c1", "partitions": ["orders-0"]}
        The consumer's position moved on purpose (assign, seek, rebalance, restart):
        order checks start afresh for those partitions (all if `partitions` is absent).
    {"op": "poll", ..., "final": true} / {"op": "reset", ..., "final": true, "partitions": [..]}
        A final reader: it read these partitions from the start to their end after the
        faults stopped. An acknowledged value missing from its reads is lost, even if
        another consumer read it earlier (it was in the log, then it was gone).
    {"op": "send", ..., "value": "e1:17", "txn": "e1-t4", "source": 17,
     "source_at": ["orders-0", 42]}
        A consume-transform-produce pipeline's output names the input value it was made
        from (output values stay unique: a retried transaction writes new ones), and
        optionally where it read it: an input value that is in the log twice (a producer's
        duplicate) rightly goes through twice, once per position.
    {"op": "drained", "process": "e1", "partitions": ["orders-0"]}
        The pipeline consumed these input partitions to their end and committed: every
        committed input value there is owed exactly one committed output.
    {"op": "nemesis", ...}
        Faults injected (for the report's timeline); the checker skips them.

Values must be unique across the history (one send per value); partitions are any
JSON scalars (lists are read as tuples). Anomalies (`Anomaly.kind`):

    lost_write          acknowledged (and committed), never read, though a reader read
                        past its offset (or, with final_reads=True, at all)
    duplicate           one value read at two or more positions
    inconsistent_offsets two values at one position (reads or acks), or a value read
                        somewhere other than where it was acknowledged
    aborted_read        G1a: a read_committed poll returned a value of an aborted
                        transaction
    never_sent          a poll returned a value no send produced
    nonmonotonic_poll   a consumer read an offset at or below one it read before
                        (in one partition, without a reset in between)
    poll_skip           a consumer jumped over a value it should have seen
    nonmonotonic_send   a producer's later acknowledged send landed below an earlier one
    torn_transaction    a read_committed consumer saw part of a committed transaction:
                        it read over the offsets of the rest and missed them
    (pipelines)         an input value with two committed outputs is a `duplicate`; one
                        with none, in a drained partition, a `lost_write`
    G0                  a cycle of write-write dependencies between committed
                        transactions (per-partition offset order of their last writes)
    G1c                 a cycle of write-write and write-read dependencies

Kafka does not order transactions' writes across partitions, so concurrent
transactional producers writing the same partitions can legitimately produce G0
(Jepsen's Kafka and Redpanda analyses): a workload that does so passes
`allowed={"G0"}` to `CheckResult.failures`.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["check", "CheckResult", "Anomaly", "HistoryError", "ANOMALY_KINDS"]

ANOMALY_KINDS = (
    "lost_write",
    "duplicate",
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

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
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


# ---------------------------------------------------------------- parsing


@dataclass(slots=True)
class _Send:
    index: int
    process: Hashable
    partition: Hashable
    value: Hashable
    status: str
    offset: int | None
    txn: Hashable | None
    source: Hashable | None = None  # the input value a pipeline derived this one from
    source_at: Hashable | None = None  # (partition, offset) of that input, if known


@dataclass(slots=True)
class _Txn:
    key: Hashable
    process: Hashable = None
    commit: str | None = None  # status of the commit attempt, if any
    abort: str | None = None
    sends: list[_Send] = field(default_factory=list)
    fate: str = "aborted"  # committed | aborted | unknown


@dataclass(slots=True)
class _Read:
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


def _offset(x: Any, i: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise HistoryError(f"operation {i}: offset {x!r} is not a non-negative integer")
    return x


class _History:
    def __init__(self, ops: Iterable[Mapping[str, Any]]) -> None:
        self.sends: dict[Hashable, _Send] = {}
        self.send_order: list[_Send] = []
        self.txns: dict[Hashable, _Txn] = {}
        self.reads: list[_Read] = []
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
                        _Read(
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

    def _txn(self, key: Hashable) -> _Txn:
        t = self.txns.get(key)
        if t is None:
            t = self.txns[key] = _Txn(key)
        return t

    def _send(self, op: Mapping[str, Any], i: int) -> None:
        value = _key(_need(op, "value", i))
        if value in self.sends:
            raise HistoryError(f"operation {i}: value {value!r} was sent twice (values are unique)")
        status = op.get("status", "ok")
        if status not in ("ok", "fail", "info"):
            raise HistoryError(f"operation {i}: send status {status!r}")
        offset = op.get("offset")
        s = _Send(
            i,
            _key(_need(op, "process", i)),
            _key(_need(op, "partition", i)),
            value,
            status,
            None if offset is None or status != "ok" else _offset(offset, i),
            _key(op.get("txn")),
            _key(op.get("source")),
            _key(op.get("source_at")),
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


# ---------------------------------------------------------------- checking


class _Report:
    def __init__(self) -> None:
        self.result = CheckResult(counts=dict.fromkeys(ANOMALY_KINDS, 0))

    def add(self, a: Anomaly) -> None:
        self.result.counts[a.kind] += 1
        if self.result.counts[a.kind] <= _EXAMPLES_PER_KIND:
            self.result.anomalies.append(a)


def check(history: Iterable[Mapping[str, Any]], *, final_reads: bool = False) -> CheckResult:
    """Check a history; `final_reads=True` when consumers read every partition to its end
    after the faults stopped, so an acknowledged value nobody read is lost even if no
    later offset was read."""
    h = _History(history)
    rep = _Report()
    _check_reads_against_sends(h, rep)
    _check_positions(h, rep)
    _check_lost(h, rep, final_reads)
    _check_consumer_order(h, rep)
    _check_producer_order(h, rep)
    _check_torn(h, rep)
    _check_cycles(h, rep)
    _check_pipeline(h, rep, final_reads)
    committed = sum(1 for t in h.txns.values() if t.fate == "committed")
    rep.result.stats = {
        "operations_sends": len(h.send_order),
        "sends_acked": sum(1 for s in h.send_order if s.status == "ok"),
        "polls": h.polls,
        "records_read": len(h.reads),
        "distinct_values_read": len({r.value for r in h.reads}),
        "txns_committed": committed,
        "txns_aborted": sum(1 for t in h.txns.values() if t.fate == "aborted"),
        "txns_unknown": sum(1 for t in h.txns.values() if t.fate == "unknown"),
    }
    rep.result.counts = {k: v for k, v in rep.result.counts.items() if v}
    return rep.result


def _fate(h: _History, s: _Send) -> str:
    """committed (owed to every reader), aborted (never visible read_committed),
    unknown (may or may not be there)."""
    if s.txn is not None:
        return h.txns[s.txn].fate
    return "committed" if s.status == "ok" else "unknown"


def _check_reads_against_sends(h: _History, rep: _Report) -> None:
    for r in h.reads:
        s = h.sends.get(r.value)
        if s is None:
            rep.add(
                Anomaly(
                    "never_sent",
                    f"{r.process} read {r.value!r} at {r.partition}@{r.offset}, "
                    "which no producer sent",
                    (r.value,),
                    r.partition,
                    (r.offset,),
                    (r.process,),
                )
            )
            continue
        if s.partition != r.partition:
            rep.add(
                Anomaly(
                    "inconsistent_offsets",
                    f"{r.value!r} was sent to {s.partition} but read in {r.partition}",
                    (r.value,),
                    r.partition,
                    (r.offset,),
                    (s.process, r.process),
                )
            )
        if r.isolation == READ_COMMITTED and s.txn is not None and h.txns[s.txn].fate == "aborted":
            rep.add(
                Anomaly(
                    "aborted_read",
                    f"{r.process} (read_committed) read {r.value!r} of aborted "
                    f"transaction {s.txn!r} at {r.partition}@{r.offset}",
                    (r.value,),
                    r.partition,
                    (r.offset,),
                    (r.process,),
                    (s.txn,),
                )
            )


def _check_positions(h: _History, rep: _Report) -> None:
    at: dict[tuple[Hashable, int], set[Hashable]] = defaultdict(set)
    where: dict[Hashable, set[tuple[Hashable, int]]] = defaultdict(set)
    for r in h.reads:
        at[(r.partition, r.offset)].add(r.value)
        where[r.value].add((r.partition, r.offset))
    for s in h.send_order:
        if s.offset is not None:
            at[(s.partition, s.offset)].add(s.value)
    for (partition, offset), values in at.items():
        if len(values) > 1:
            vs = tuple(sorted(values, key=repr))
            rep.add(
                Anomaly(
                    "inconsistent_offsets",
                    f"{len(vs)} different values at {partition}@{offset}: {list(vs)}",
                    vs,
                    partition,
                    (offset,),
                )
            )
    for value, positions in where.items():
        if len(positions) > 1:
            ps = sorted(positions, key=repr)
            rep.add(
                Anomaly(
                    "duplicate",
                    f"{value!r} read at {len(ps)} positions: "
                    + ", ".join(f"{p}@{o}" for p, o in ps),
                    (value,),
                    ps[0][0],
                    tuple(o for _, o in ps),
                )
            )
        s = h.sends.get(value)
        if (
            s is not None
            and s.offset is not None
            and len(positions) == 1
            and (s.partition, s.offset) not in positions
        ):
            ((p, o),) = positions
            if p == s.partition:
                rep.add(
                    Anomaly(
                        "inconsistent_offsets",
                        f"{value!r} was acknowledged at {s.partition}@{s.offset} "
                        f"but read at {p}@{o}",
                        (value,),
                        p,
                        (s.offset, o),
                        (s.process,),
                    )
                )


def _check_lost(h: _History, rep: _Report, final_reads: bool) -> None:
    if final_reads and h.final_partitions:
        _check_lost_from_final(h, rep)
    read_values = {r.value for r in h.reads}
    max_read: dict[Hashable, int] = {}
    for r in h.reads:
        if r.offset > max_read.get(r.partition, -1):
            max_read[r.partition] = r.offset
    for s in h.send_order:
        if s.status != "ok" or s.value in read_values or _fate(h, s) != "committed":
            continue
        if final_reads and s.partition in h.final_partitions:
            continue  # judged against the final reads above
        beyond = max_read.get(s.partition, -1)
        if final_reads or (s.offset is not None and beyond > s.offset):
            where = f"{s.partition}@{s.offset}" if s.offset is not None else str(s.partition)
            why = "final reads" if final_reads else f"offset {beyond} was read"
            rep.add(
                Anomaly(
                    "lost_write",
                    f"{s.value!r} acknowledged at {where} "
                    + (f"(transaction {s.txn!r} committed) " if s.txn is not None else "")
                    + f"was never read ({why})",
                    (s.value,),
                    s.partition,
                    () if s.offset is None else (s.offset,),
                    (s.process,),
                    () if s.txn is None else (s.txn,),
                )
            )


def _check_lost_from_final(h: _History, rep: _Report) -> None:
    """Every acknowledged, committed value of a partition read to its end by a final
    reader must be among those final reads (read_committed hides only aborted data)."""
    final_values = {r.value for r in h.reads if r.final}
    seen_by: dict[Hashable, Hashable] = {}
    for r in h.reads:
        if not r.final:
            seen_by.setdefault(r.value, (r.process, r.offset))
    for s in h.send_order:
        if (
            s.status != "ok"
            or s.partition not in h.final_partitions
            or s.value in final_values
            or _fate(h, s) != "committed"
        ):
            continue
        where = f"{s.partition}@{s.offset}" if s.offset is not None else str(s.partition)
        earlier = seen_by.get(s.value)
        rep.add(
            Anomaly(
                "lost_write",
                f"{s.value!r} acknowledged at {where} "
                + (f"(transaction {s.txn!r} committed) " if s.txn is not None else "")
                + "is not in the final reads"
                + (f" (though {earlier[0]} read it at offset {earlier[1]})" if earlier
                   else " (nobody ever read it)"),
                (s.value,),
                s.partition,
                () if s.offset is None else (s.offset,),
                (s.process,) + ((earlier[0],) if earlier else ()),
                () if s.txn is None else (s.txn,),
            )
        )


def _known_positions(h: _History) -> dict[Hashable, tuple[list[int], list[Hashable]]]:
    """Per partition, every (offset, value) anyone observed, sorted by offset."""
    pos: dict[Hashable, dict[int, Hashable]] = defaultdict(dict)
    for s in h.send_order:
        if s.offset is not None:
            pos[s.partition].setdefault(s.offset, s.value)
    for r in h.reads:
        pos[r.partition].setdefault(r.offset, r.value)
    out = {}
    for p, m in pos.items():
        offsets = sorted(m)
        out[p] = (offsets, [m[o] for o in offsets])
    return out


def _visible(h: _History, value: Hashable, isolation: str) -> bool:
    """Must a consumer with this isolation see `value`, known to be in the log?
    Everything there is visible read_uncommitted; read_committed hides transactional
    data unless its transaction committed."""
    s = h.sends.get(value)
    if s is None:
        return False  # never sent: reported on its own
    if isolation == READ_UNCOMMITTED or s.txn is None:
        return True
    return h.txns[s.txn].fate == "committed"


_Stream = tuple[Hashable, tuple[int, int], Hashable]  # (process, segment, partition)


def _consumer_streams(h: _History) -> dict[_Stream, list[_Read]]:
    streams: dict[_Stream, list[_Read]] = defaultdict(list)
    for r in h.reads:
        streams[(r.process, r.segment, r.partition)].append(r)
    return streams


def _check_consumer_order(h: _History, rep: _Report) -> None:
    known = _known_positions(h)
    for (process, _seg, partition), reads in _consumer_streams(h).items():
        offsets, values = known.get(partition, ([], []))
        for prev, r in zip(reads, reads[1:], strict=False):
            if r.offset <= prev.offset:
                rep.add(
                    Anomaly(
                        "nonmonotonic_poll",
                        f"{process} read {partition}@{r.offset} ({r.value!r}) after "
                        f"{partition}@{prev.offset} ({prev.value!r})",
                        (prev.value, r.value),
                        partition,
                        (prev.offset, r.offset),
                        (process,),
                    )
                )
            elif r.offset > prev.offset + 1:
                lo = bisect.bisect_right(offsets, prev.offset)
                hi = bisect.bisect_left(offsets, r.offset)
                skipped = [
                    (offsets[k], values[k])
                    for k in range(lo, hi)
                    if _visible(h, values[k], r.isolation)
                ]
                if skipped:
                    rep.add(
                        Anomaly(
                            "poll_skip",
                            f"{process} ({r.isolation}) went from {partition}@{prev.offset} "
                            f"to @{r.offset}, skipping "
                            + ", ".join(f"{v!r}@{o}" for o, v in skipped[:10])
                            + (" ..." if len(skipped) > 10 else ""),
                            tuple(v for _, v in skipped),
                            partition,
                            tuple(o for o, _ in skipped),
                            (process,),
                        )
                    )


def _check_producer_order(h: _History, rep: _Report) -> None:
    last: dict[tuple[Hashable, Hashable], _Send] = {}
    for s in h.send_order:
        if s.offset is None:
            continue
        k = (s.process, s.partition)
        prev = last.get(k)
        if prev is not None and prev.offset is not None and s.offset <= prev.offset:
            rep.add(
                Anomaly(
                    "nonmonotonic_send",
                    f"{s.process} sent {s.value!r} after {prev.value!r} but it landed at "
                    f"{s.partition}@{s.offset}, not after @{prev.offset}",
                    (prev.value, s.value),
                    s.partition,
                    (prev.offset, s.offset),
                    (s.process,),
                )
            )
        last[k] = s


def _txn_positions(h: _History) -> dict[Hashable, dict[Hashable, dict[Hashable, int]]]:
    """txn -> partition -> value -> offset (acked, or where it was read)."""
    read_at: dict[Hashable, tuple[Hashable, int]] = {}
    for r in h.reads:
        read_at.setdefault(r.value, (r.partition, r.offset))
    out: dict[Hashable, dict[Hashable, dict[Hashable, int]]] = {}
    for t in h.txns.values():
        parts: dict[Hashable, dict[Hashable, int]] = defaultdict(dict)
        for s in t.sends:
            if s.offset is not None:
                parts[s.partition][s.value] = s.offset
            elif s.value in read_at and read_at[s.value][0] == s.partition:
                parts[s.partition][s.value] = read_at[s.value][1]
        out[t.key] = parts
    return out


def _check_torn(h: _History, rep: _Report) -> None:
    positions = _txn_positions(h)
    # read_committed consumer (process, epoch) -> partition -> its reading segments
    by_consumer: dict[tuple[Hashable, int], dict[Hashable, list[list[_Read]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    saw: dict[tuple[Hashable, int], set[Hashable]] = defaultdict(set)
    for (process, segment, partition), reads in _consumer_streams(h).items():
        if reads[0].isolation != READ_COMMITTED:
            continue
        consumer = (process, segment[0])
        by_consumer[consumer][partition].append(reads)
        for r in reads:
            s = h.sends.get(r.value)
            if s is not None and s.txn is not None:
                saw[consumer].add(s.txn)
    seen_in: dict[int, set[Hashable]] = {}
    for consumer, txns in saw.items():
        for txn in sorted(txns, key=repr):
            if h.txns[txn].fate != "committed":
                continue  # an aborted one is an aborted_read already
            for partition, vals in positions[txn].items():
                if not vals:
                    continue
                lo, hi = min(vals.values()), max(vals.values())
                for reads in by_consumer[consumer].get(partition, []):
                    if reads[0].offset > lo or reads[-1].offset < hi:
                        continue  # these reads did not span the transaction here
                    seen = seen_in.get(id(reads))
                    if seen is None:  # once per stream, not per transaction
                        seen = seen_in[id(reads)] = {r.value for r in reads}
                    missing = sorted((o, v) for v, o in vals.items() if v not in seen)
                    if missing:
                        rep.add(
                            Anomaly(
                                "torn_transaction",
                                f"{consumer[0]} saw part of committed transaction {txn!r}: "
                                f"in {partition} it read over "
                                + ", ".join(f"{v!r}@{o}" for o, v in missing[:10])
                                + " without seeing them",
                                tuple(v for _, v in missing),
                                partition,
                                tuple(o for o, _ in missing),
                                (consumer[0],),
                                (txn,),
                            )
                        )


def _check_cycles(h: _History, rep: _Report) -> None:
    committed = {k for k, t in h.txns.items() if t.fate == "committed"}
    if len(committed) < 2:
        return
    positions = _txn_positions(h)
    ww: dict[Hashable, set[Hashable]] = defaultdict(set)
    last_in: dict[Hashable, list[tuple[int, Hashable]]] = defaultdict(list)
    for txn in committed:
        for partition, vals in positions[txn].items():
            if vals:
                last_in[partition].append((max(vals.values()), txn))
    for seq in last_in.values():
        seq.sort(key=lambda x: x[0])
        for (_, a), (_, b) in zip(seq, seq[1:], strict=False):
            if a != b:
                ww[a].add(b)
    wr: dict[Hashable, set[Hashable]] = defaultdict(set)
    for r in h.reads:
        if r.txn is None or r.txn not in committed:
            continue
        s = h.sends.get(r.value)
        if s is not None and s.txn in committed and s.txn != r.txn:
            wr[s.txn].add(r.txn)
    both: dict[Hashable, set[Hashable]] = defaultdict(set)
    for g in (ww, wr):
        for a, bs in g.items():
            both[a] |= bs
    for scc in _sccs(committed, both):
        if len(scc) < 2:
            continue
        ww_sccs = [c for c in _sccs(scc, {a: ww[a] & scc for a in scc}) if len(c) > 1]
        for c in ww_sccs:
            cycle = _cycle(c, {a: ww[a] & c for a in c})
            rep.add(
                Anomaly(
                    "G0",
                    "write cycle: " + " -ww-> ".join(repr(t) for t in cycle),
                    txns=tuple(cycle),
                )
            )
        if not ww_sccs:
            cycle = _cycle(scc, {a: both[a] & scc for a in scc})
            labels = []
            for a, b in zip(cycle, cycle[1:], strict=False):
                labels.append(f"{a!r} -{'wr' if b in wr[a] else 'ww'}->")
            rep.add(
                Anomaly(
                    "G1c",
                    "cycle of write and read dependencies: " + " ".join(labels) + f" {cycle[-1]!r}",
                    txns=tuple(cycle),
                )
            )


def _check_pipeline(h: _History, rep: _Report, final_reads: bool) -> None:
    """Exactly-once through a consume-transform-produce pipeline: each input value gets
    one committed output; and, once the pipeline drained its inputs (and the final reads
    happened), at least one."""
    outputs: dict[Hashable, list[_Send]] = defaultdict(list)
    per_input: dict[tuple[Hashable, Hashable], list[_Send]] = defaultdict(list)
    for s in h.send_order:
        if s.source is not None and _fate(h, s) == "committed":
            outputs[s.source].append(s)
            per_input[(s.source, s.source_at)].append(s)
    for (source, _at), outs in per_input.items():
        if len(outs) > 1:
            rep.add(
                Anomaly(
                    "duplicate",
                    f"input {source!r} went through the pipeline {len(outs)} times: "
                    + ", ".join(f"{o.value!r} in {o.txn!r}" for o in outs[:10]),
                    tuple(o.value for o in outs),
                    outs[0].partition,
                    tuple(o.offset for o in outs if o.offset is not None),
                    tuple(sorted({o.process for o in outs}, key=repr)),
                    tuple(o.txn for o in outs if o.txn is not None),
                )
            )
    if not (final_reads and h.drained):
        return
    for s in h.send_order:
        if (
            s.partition in h.drained
            and s.source is None
            and s.value not in outputs
            and s.status == "ok"
            and _fate(h, s) == "committed"
        ):
            rep.add(
                Anomaly(
                    "lost_write",
                    f"input {s.value!r} at {s.partition}@{s.offset} never came out of the "
                    "pipeline (it drained the partition)",
                    (s.value,),
                    s.partition,
                    () if s.offset is None else (s.offset,),
                    (s.process,),
                )
            )


def _sccs(
    nodes: Iterable[Hashable], edges: Mapping[Hashable, set[Hashable]]
) -> list[set[Hashable]]:
    """Tarjan's strongly connected components, iteratively (histories can be long)."""
    index: dict[Hashable, int] = {}
    low: dict[Hashable, int] = {}
    on_stack: set[Hashable] = set()
    stack: list[Hashable] = []
    out: list[set[Hashable]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()), key=repr)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ()), key=repr))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.add(x)
                    if x == node:
                        break
                out.append(comp)
    return out


def _cycle(nodes: set[Hashable], edges: Mapping[Hashable, set[Hashable]]) -> list[Hashable]:
    """One concrete cycle inside a strongly connected component (first node repeated
    at the end), found by a breadth-first search back to the start."""
    start = min(nodes, key=repr)
    parent: dict[Hashable, Hashable] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt_frontier = []
        for a in frontier:
            for b in sorted(edges.get(a, ()), key=repr):
                if b == start:
                    path = [a]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    path.reverse()
                    return [*path, start]
                if b not in seen:
                    seen.add(b)
                    parent[b] = a
                    nxt_frontier.append(b)
        frontier = nxt_frontier
    return [start, start]  # unreachable for a real component
