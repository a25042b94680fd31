"""The checker's per-partition checks (`yak.chaos.checker`): what each partition's
acknowledgements and reads must agree on.

`never_sent`, `inconsistent_offsets`, `aborted_read`, `duplicate` (one value at two
positions), `lost_write` (against later reads or the final reads), `nonmonotonic_poll`,
`poll_skip` and `nonmonotonic_send`. Each check reads the parsed `History` and adds to the
`Report`; none depends on another's result.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Hashable

from yak.chaos.anomalies import Anomaly, Report
from yak.chaos.checker_history import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    History,
    Send,
    consumer_streams,
    fate,
)

__all__ = ["check_consumer_order", "check_lost", "check_positions", "check_producer_order",
           "check_reads_against_sends"]

CLIENT_TIMEOUT_ERRORS = frozenset({"_MSG_TIMED_OUT", "_TIMED_OUT"})
"""librdkafka's delivery errors for a message whose time (message.timeout.ms) ran out."""


def _client_timeouts(h: History) -> dict[Hashable, list[float]]:
    """Per producer process, the sorted times at which the client reported a timed-out
    send."""
    out: dict[Hashable, list[float]] = defaultdict(list)
    for s in h.send_order:
        if s.error in CLIENT_TIMEOUT_ERRORS and s.reported is not None:
            out[s.process].append(s.reported)
    for times in out.values():
        times.sort()
    return out


def _resent_after_client_timeout(s: Send | None,
                                 timeouts: dict[Hashable, list[float]]) -> float | None:
    """The time of a client timeout that explains `s` being in the log twice, or None.

    librdkafka documents it (INTRODUCTION.md, "Message timeout considerations"; the
    maintainers in confluentinc/librdkafka#4953): when a message times out in flight, the
    idempotent producer drains, bumps its epoch and resends every message still queued
    with new sequence numbers, on every partition. A queued message that had already
    been written, its answer lost with the closed connection, is then written again, and
    no broker can tell (a new epoch restarts the sequences). So a duplicate is the
    client's, not the broker's, exactly when its producer had a timeout reported after
    the value was handed over and no later than the value's own fate was reported. A
    duplicate outside such a window stays a `duplicate`."""
    if s is None or s.sent is None or s.reported is None:
        return None
    times = timeouts.get(s.process)
    if not times:
        return None
    i = bisect.bisect_left(times, s.sent)
    if i < len(times) and times[i] <= s.reported:
        return times[i]
    return None



def check_reads_against_sends(h: History, rep: Report) -> None:
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


def check_positions(h: History, rep: Report) -> None:
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
    timeouts = _client_timeouts(h)
    for value, positions in where.items():
        if len(positions) > 1:
            ps = sorted(positions, key=repr)
            after_timeout = _resent_after_client_timeout(h.sends.get(value), timeouts)
            rep.add(
                Anomaly(
                    "duplicate_after_client_timeout" if after_timeout else "duplicate",
                    f"{value!r} read at {len(ps)} positions: "
                    + ", ".join(f"{p}@{o}" for p, o in ps)
                    + (f" (its producer's in-flight send timed out at {after_timeout:.1f} s,"
                       " while this value was still queued)" if after_timeout else ""),
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


def check_lost(h: History, rep: Report, final_reads: bool) -> None:
    if final_reads and h.final_partitions:
        _check_lost_from_final(h, rep)
    read_values = {r.value for r in h.reads}
    max_read: dict[Hashable, int] = {}
    for r in h.reads:
        if r.offset > max_read.get(r.partition, -1):
            max_read[r.partition] = r.offset
    for s in h.send_order:
        if s.status != "ok" or s.value in read_values or fate(h, s) != "committed":
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


def _check_lost_from_final(h: History, rep: Report) -> None:
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
            or fate(h, s) != "committed"
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


def _known_positions(h: History) -> dict[Hashable, tuple[list[int], list[Hashable]]]:
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


def _visible(h: History, value: Hashable, isolation: str) -> bool:
    """Must a consumer with this isolation see `value`, known to be in the log?
    Everything there is visible read_uncommitted; read_committed hides transactional
    data unless its transaction committed."""
    s = h.sends.get(value)
    if s is None:
        return False  # never sent: reported on its own
    if isolation == READ_UNCOMMITTED or s.txn is None:
        return True
    return h.txns[s.txn].fate == "committed"


def check_consumer_order(h: History, rep: Report) -> None:
    known = _known_positions(h)
    for (process, _seg, partition), reads in consumer_streams(h).items():
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


def check_producer_order(h: History, rep: Report) -> None:
    last: dict[tuple[Hashable, Hashable], Send] = {}
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
