"""The checker of the share-group workload (KIP-932 queues; issue 24), a pure function.

The share workload (yak/chaos/share_workload.py) logs what its producer, its share
consumers and its dead-letter reader did; `check_share` reads that history and names every
anomaly it can prove. Nothing here touches a broker, a file or a clock.

What a share group promises, and so what is checked:

- at least once: every acknowledged (acks=all) value of the share topic reaches a share
  consumer, or the dead-letter topic, once the faults are healed and the group drained;
- each record acknowledged at most once: no value is accepted (or rejected) successfully
  twice, and none is handed out again after an acceptance;
- a delivery count never goes down, and never passes the group's limit;
- the dead-letter topic (DLQ) holds exactly the values that were rejected or reached the
  delivery limit: no fewer, no more, none that was also accepted.

History format (besides the generic checker's `send` ops, which the share producer writes
for the share topic's partitions; every share op carries `time`, seconds on the run's
clock, except where said):

    {"op": "share_config", "topic": "s", "partitions": ["s-0", ...], "group": "g",
     "dlq": "s-dlq", "limit": 3}
        The share topic, its group, its dead-letter topic and `share.delivery.count.limit`.
    {"op": "share_poll", "process": "m0", "records": [["s-0", 7, "v", 2], ...]}
        What one poll of a share consumer returned: partition, offset, value, delivery
        count (None where the client does not show it). `time`: when the poll returned.
        A delivery no `share_ack` names was never acknowledged (the consumer went away
        holding it: its lock ends with the session or expires).
    {"op": "share_ack", "process": "m0", "status": "ok|fail|info", "error": "...",
     "acks": [["s-0", 7, "v", 2, "accept|release|reject"], ...]}
        The broker's answer to acknowledgements of deliveries this process received: ok
        (the broker confirmed them: the record was still acquired by this member), fail
        (refused, or never sent: the client would not take it) or info (unknown: the
        answer never came). `time`: when the client reported the outcome.
    {"op": "share_drained", "process": "share"}
        The consumers ran on after the producer stopped until nothing was delivered for
        longer than a record lock: every value still owed would have come again by then.
        Without it, values never delivered are not judged.
    {"op": "share_dlq", "final": true, "records": [["v", "s-0", 7, 3, "reason"], ...]}
        The dead-letter topic read from its start to its end after the drain: each copy's
        value and its headers' source partition, offset, delivery count and reason.
        Without a final one, DLQ contents are not judged.

Anomaly kinds (`SHARE_ANOMALY_KINDS`):

    share_undelivered        acknowledged, never delivered and never dead-lettered, after
                             the drain: lost, or stuck (the generic checker's final reads
                             say whether it is still in the log)
    share_never_sent         a delivery or DLQ copy of a value no send produced
    share_wrong_position     a delivery (or a DLQ copy's source) at another partition or
                             offset than its send was acknowledged at
    acknowledged_twice       two successful terminal acknowledgements of one value
                             (accepted twice, or accepted and rejected)
    delivered_after_accept   a delivery with a higher delivery count than one whose
                             ACCEPT the broker confirmed: acquired again after acceptance
    delivery_count_went_down two deliveries whose acknowledgements the broker both
                             confirmed, the later one received after the first one's
                             confirmation, and its count not higher (each acquisition is
                             exclusive, so the later one was acquired later)
    delivered_past_limit     a delivery count above `share.delivery.count.limit`
    dlq_missing              rejected (confirmed), or released, rejected or never
                             acknowledged at the limit, and not in the DLQ
    dlq_unexpected           in the DLQ with no reason: a "rejected" copy of a value nobody
                             rejected, a "delivery count limit reached" copy below the
                             limit, an unknown reason
    accepted_and_dead_lettered
                             in the DLQ, and its ACCEPT confirmed
    dlq_duplicate            in the DLQ more than once. The broker copies a record before
                             it writes the archive, so a crash between the two copies it
                             again (docs/share-groups.md, at least once into the DLQ):
                             counted and shown, allowed by `yak chaos run`

An acknowledgement whose outcome is unknown (fail or info) proves nothing either way: an
ACCEPT of a value at its last delivery that failed may have been written or not, so the
value may be in the DLQ or not. A value may also reach the limit through acquisitions its
consumers never saw (the broker persisted the acquisition, then died before answering):
a "delivery count limit reached" copy is always allowed for a value not accepted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from yak.chaos.anomalies import Anomaly, CheckResult, HistoryError

__all__ = ["SHARE_ANOMALY_KINDS", "check_history", "check_share", "is_share_op",
           "merge_results"]

SHARE_ANOMALY_KINDS = (
    "share_undelivered",
    "share_never_sent",
    "share_wrong_position",
    "acknowledged_twice",
    "delivered_after_accept",
    "delivery_count_went_down",
    "delivered_past_limit",
    "dlq_missing",
    "dlq_unexpected",
    "accepted_and_dead_lettered",
    "dlq_duplicate",
)

ACK_TYPES = ("accept", "release", "reject")
REASON_LIMIT = "delivery count limit reached"
REASON_REJECTED = "rejected"
_EXAMPLES_PER_KIND = 1000


def is_share_op(op: Mapping[str, Any]) -> bool:
    """The share workload's own operations, which the generic checker does not know."""
    kind = op.get("op")
    return isinstance(kind, str) and kind.startswith("share_")


@dataclass(slots=True)
class _Delivery:
    process: Hashable
    partition: Hashable
    offset: int
    value: Hashable
    count: int | None
    received: float
    ack: str | None = None  # accept | release | reject
    status: str | None = None  # ok | fail | info; None: no outcome recorded
    acked_at: float | None = None


def _key(x: Any) -> Hashable:
    if isinstance(x, list):
        return tuple(_key(i) for i in x)
    if isinstance(x, dict):
        raise HistoryError(f"an object is not a valid partition/value/process: {x!r}")
    return x


def _int(x: Any, i: int, what: str, optional: bool = False) -> int | None:
    if x is None and optional:
        return None
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise HistoryError(f"operation {i}: {what} {x!r} is not a non-negative integer")
    return x


def _time(op: Mapping[str, Any], i: int) -> float:
    t = op.get("time")
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise HistoryError(f"operation {i} ({op.get('op')!r}) has no time")
    return float(t)


def _rows(op: Mapping[str, Any], name: str, width: int, i: int) -> list[list[Any]]:
    rows = op.get(name)
    if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == width
                                             for r in rows):
        raise HistoryError(f"operation {i} ({op.get('op')!r}): {name} is not a list of"
                           f" {width}-element lists")
    return rows


class _ShareHistory:
    """The share ops of one history, parsed in one pass."""

    def __init__(self, ops: Iterable[Mapping[str, Any]]) -> None:
        self.config: Mapping[str, Any] | None = None
        self.sends: list[Mapping[str, Any]] = []
        self.deliveries: list[_Delivery] = []
        self.drained = False
        self.dlq: list[tuple[Hashable, Hashable, int | None, int | None, str]] | None = None
        open_: dict[tuple[Hashable, Hashable, int | None], list[_Delivery]] = defaultdict(list)
        for i, op in enumerate(ops):
            if not isinstance(op, Mapping):
                raise HistoryError(f"operation {i} is not an object")
            kind = op.get("op")
            if kind == "share_config":
                self.config = op
            elif kind == "send":
                self.sends.append(op)
            elif kind == "share_poll":
                t = _time(op, i)
                process = _key(op.get("process"))
                for p, o, v, n in _rows(op, "records", 4, i):
                    d = _Delivery(process, _key(p), _int(o, i, "offset") or 0, _key(v),
                                  _int(n, i, "delivery count", optional=True), t)
                    self.deliveries.append(d)
                    open_[(process, d.value, d.count)].append(d)
            elif kind == "share_ack":
                t = _time(op, i)
                process = _key(op.get("process"))
                status = op.get("status")
                if status not in ("ok", "fail", "info"):
                    raise HistoryError(f"operation {i}: ack status {status!r}")
                for _p, _o, v, n, typ in _rows(op, "acks", 5, i):
                    if typ not in ACK_TYPES:
                        raise HistoryError(f"operation {i}: ack type {typ!r}")
                    waiting = open_.get((process, _key(v), n))
                    if not waiting:
                        raise HistoryError(f"operation {i}: {process} acknowledged {v!r}"
                                           f" (delivery count {n}) without a delivery")
                    d = waiting.pop(0)
                    d.ack, d.status, d.acked_at = typ, status, t
            elif kind == "share_drained":
                self.drained = True
            elif kind == "share_dlq":
                if op.get("final"):
                    self.dlq = [(_key(v), _key(p), _int(o, i, "offset", True),
                                 _int(n, i, "delivery count", True), str(r))
                                for v, p, o, n, r in _rows(op, "records", 5, i)]
            elif isinstance(kind, str) and kind.startswith("share_"):
                raise HistoryError(f"operation {i}: unknown op {kind!r}")


class _Report:
    def __init__(self) -> None:
        self.result = CheckResult(counts=dict.fromkeys(SHARE_ANOMALY_KINDS, 0))

    def add(self, kind: str, detail: str, value: Hashable = None, partition: Any = None,
            offsets: tuple[int, ...] = (), processes: tuple[Any, ...] = ()) -> None:
        self.result.counts[kind] += 1
        if self.result.counts[kind] <= _EXAMPLES_PER_KIND:
            self.result.anomalies.append(Anomaly(
                kind, detail, () if value is None else (value,), partition, offsets,
                processes))


def check_share(history: Iterable[Mapping[str, Any]]) -> CheckResult:
    """Check the share workload's part of a history (see the module docstring). A history
    without a `share_config` op has no share workload: an empty, valid result."""
    h = _ShareHistory(history)
    rep = _Report()
    if h.config is None:
        rep.result.counts = {}
        return rep.result
    limit = _int(h.config.get("limit"), 0, "share_config limit") or 0
    parts = {_key(p) for p in h.config.get("partitions") or ()}
    owed: dict[Hashable, tuple[Hashable, int | None]] = {}  # value -> acked position
    sent: set[Hashable] = set()
    for op in h.sends:
        if _key(op.get("partition")) not in parts:
            continue
        v = _key(op.get("value"))
        sent.add(v)
        if op.get("status", "ok") == "ok":
            owed[v] = (_key(op.get("partition")), op.get("offset"))
    by_value: dict[Hashable, list[_Delivery]] = defaultdict(list)
    for d in h.deliveries:
        by_value[d.value].append(d)
    _check_deliveries(h, rep, by_value, sent, owed, limit)
    accepted = {v for v, ds in by_value.items()
                if any(d.ack == "accept" and d.status == "ok" for d in ds)}
    dlq_values: dict[Hashable, int] = defaultdict(int)
    if h.dlq is not None:
        for v, *_ in h.dlq:
            dlq_values[v] += 1
        _check_dlq(h, rep, by_value, sent, owed, accepted, limit)
    if h.drained:
        for v, (p, o) in owed.items():
            if v not in by_value and v not in dlq_values:
                rep.add("share_undelivered", f"{v!r} acknowledged at {p}:{o}, never delivered to a"
                        " share consumer nor dead-lettered after the drain", v, p,
                        () if o is None else (o,))
    deliveries = len(h.deliveries)
    rep.result.stats = {
        "share_sends_acked": len(owed),
        "share_deliveries": deliveries,
        "share_values_delivered": len(by_value),
        "share_redeliveries": deliveries - len(by_value),
        "share_max_delivery_count": max((d.count or 0 for d in h.deliveries), default=0),
        **{f"share_acks_{t}_{s}": sum(1 for d in h.deliveries if d.ack == t and d.status == s)
           for t in ACK_TYPES for s in ("ok", "fail", "info")},
        "share_deliveries_unacknowledged": sum(1 for d in h.deliveries if d.status is None),
        "share_values_accepted": len(accepted),
        "dlq_records": -1 if h.dlq is None else len(h.dlq),
        "dlq_values": len(dlq_values),
        "dlq_values_never_delivered": sum(1 for v in dlq_values if v not in by_value),
        "share_values_outcome_unknown": sum(
            1 for v in by_value if v not in accepted and v not in dlq_values),
        "share_drained": int(h.drained),
    }
    rep.result.counts = {k: v for k, v in rep.result.counts.items() if v}
    return rep.result


def _check_deliveries(h: _ShareHistory, rep: _Report, by_value: dict[Hashable, list[_Delivery]],
                      sent: set[Hashable], owed: dict[Hashable, tuple[Hashable, int | None]],
                      limit: int) -> None:
    for v, ds in by_value.items():
        first = ds[0]
        if v not in sent:
            rep.add("share_never_sent", f"{first.process} was delivered {v!r} at"
                    f" {first.partition}:{first.offset}, which no send produced", v,
                    first.partition, (first.offset,), (first.process,))
        pos = owed.get(v)
        if pos is not None and pos[1] is not None:
            for d in ds:
                if (d.partition, d.offset) != pos:
                    rep.add("share_wrong_position", f"{d.process} was delivered {v!r} at"
                            f" {d.partition}:{d.offset}; its send was acknowledged at"
                            f" {pos[0]}:{pos[1]}", v, d.partition, (d.offset, pos[1]),
                            (d.process,))
                    break
        terminal = [d for d in ds if d.status == "ok" and d.ack in ("accept", "reject")]
        if len(terminal) > 1:
            what = " and ".join(f"{d.ack}ed by {d.process} (delivery {d.count}, confirmed at"
                                f" {d.acked_at:.2f} s)" for d in terminal)
            rep.add("acknowledged_twice", f"{v!r} {what}", v, first.partition,
                    processes=tuple(d.process for d in terminal))
        for a in (d for d in ds if d.ack == "accept" and d.status == "ok"
                  and d.count is not None):
            later = [d for d in ds if d.count is not None and d.count > a.count]  # type: ignore[operator]
            if later:
                d = later[0]
                rep.add("delivered_after_accept", f"{v!r}: its ACCEPT by {a.process} at"
                        f" delivery {a.count} was confirmed at {a.acked_at:.2f} s, yet"
                        f" {d.process} received delivery {d.count} at {d.received:.2f} s",
                        v, d.partition, processes=(a.process, d.process))
                break
        confirmed = sorted((d for d in ds if d.status == "ok" and d.count is not None),
                           key=lambda d: d.acked_at or 0.0)
        for i, a in enumerate(confirmed):
            bad = next((b for b in confirmed[i + 1:] if b.received > (a.acked_at or 0.0)
                        and b.count <= a.count), None)  # type: ignore[operator]
            if bad is not None:
                rep.add("delivery_count_went_down", f"{v!r}: {a.process}'s delivery"
                        f" {a.count} ({a.ack} confirmed at {a.acked_at:.2f} s), then"
                        f" {bad.process} received delivery {bad.count} at"
                        f" {bad.received:.2f} s ({bad.ack} confirmed too)", v, a.partition,
                        processes=(a.process, bad.process))
                break
        over = next((d for d in ds if d.count is not None and limit and d.count > limit), None)
        if over is not None:
            rep.add("delivered_past_limit", f"{over.process} received {v!r} at delivery"
                    f" {over.count}, above share.delivery.count.limit {limit}", v,
                    over.partition, (over.offset,), (over.process,))


def _must_dlq(ds: list[_Delivery], limit: int) -> str | None:
    """Why a value must be in the DLQ (None: it need not be)."""
    for d in ds:
        if d.ack == "reject" and d.status == "ok":
            return f"{d.process}'s REJECT at delivery {d.count} was confirmed"
    for d in ds:
        if d.count is not None and limit and d.count >= limit and d.ack != "accept":
            return (f"{d.process} {d.ack + 'd' if d.ack else 'never acknowledged'} it at"
                    f" delivery {d.count}, the limit ({d.status or 'no outcome'})")
    return None


def _check_dlq(h: _ShareHistory, rep: _Report, by_value: dict[Hashable, list[_Delivery]],
               sent: set[Hashable], owed: dict[Hashable, tuple[Hashable, int | None]],
               accepted: set[Hashable], limit: int) -> None:
    assert h.dlq is not None
    copies: dict[Hashable, list[tuple[Hashable, int | None, int | None, str]]] = defaultdict(list)
    for v, p, o, n, reason in h.dlq:
        copies[v].append((p, o, n, reason))
    for v, cs in copies.items():
        p, o, n, reason = cs[0]
        ds = by_value.get(v, [])
        if len(cs) > 1:
            rep.add("dlq_duplicate", f"{v!r} is in the DLQ {len(cs)} times"
                    f" ({', '.join(c[3] for c in cs)})", v, p)
        if v not in sent:
            rep.add("share_never_sent", f"the DLQ holds {v!r} (from {p}:{o}), which no send"
                    " produced", v, p)
            continue
        pos = owed.get(v)
        if pos is not None and pos[1] is not None and (p, o) != pos:
            rep.add("share_wrong_position", f"the DLQ copy of {v!r} names {p}:{o} as its"
                    f" source; its send was acknowledged at {pos[0]}:{pos[1]}", v, p)
        if v in accepted:
            a = next(d for d in ds if d.ack == "accept" and d.status == "ok")
            rep.add("accepted_and_dead_lettered", f"{v!r} is in the DLQ ({reason}, delivery"
                    f" {n}) though {a.process}'s ACCEPT at delivery {a.count} was confirmed"
                    f" at {a.acked_at:.2f} s", v, p, processes=(a.process,))
            continue
        for _p, _o, n, reason in cs:
            if reason == REASON_REJECTED:
                if not any(d.ack == "reject" for d in ds):
                    rep.add("dlq_unexpected", f"{v!r} is in the DLQ as rejected, but no"
                            " consumer rejected it", v, p)
                    break
            elif reason == REASON_LIMIT:
                if n is None or n < limit:
                    rep.add("dlq_unexpected", f"{v!r} is in the DLQ as {reason!r} at"
                            f" delivery {n}, below the limit {limit}", v, p)
                    break
            else:
                rep.add("dlq_unexpected", f"{v!r} is in the DLQ with an unknown reason"
                        f" {reason!r}", v, p)
                break
    for v, ds in by_value.items():
        if v in copies or v in accepted:  # accepted and rejected: acknowledged_twice
            continue
        why = _must_dlq(ds, limit)
        if why is not None:
            d = ds[-1]
            rep.add("dlq_missing", f"{v!r} is not in the DLQ though {why}", v, d.partition,
                    (d.offset,), tuple(sorted({str(x.process) for x in ds})))


def check_history(ops: list[dict[str, Any]], final_reads: bool = True) -> CheckResult:
    """A whole chaos history: the generic checker (`checker.check`) on everything but the
    share workload's ops, this one on those (with the share topic's sends); one result."""
    from yak.chaos.checker import check

    return merge_results(check([op for op in ops if not is_share_op(op)],
                               final_reads=final_reads), check_share(ops))


def merge_results(a: CheckResult, b: CheckResult) -> CheckResult:
    """One result of the generic checker's and the share checker's (disjoint kinds)."""
    return CheckResult(anomalies=[*a.anomalies, *b.anomalies],
                       counts={**a.counts, **b.counts}, stats={**a.stats, **b.stats})
