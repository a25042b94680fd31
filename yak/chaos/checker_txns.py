"""The checker's transaction checks (`yak.chaos.checker`): what committed transactions
must look like to readers and to each other.

`torn_transaction` (a read_committed reader saw part of one), `G0` and `G1c` (cycles of
write-write, and write-write plus write-read, dependencies between committed transactions,
found with Tarjan's strongly connected components), and the exactly-once pipeline's
`duplicate` and `lost_write`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping

from yak.chaos.anomalies import Anomaly, Report
from yak.chaos.checker_history import READ_COMMITTED, History, Read, Send, consumer_streams, fate

__all__ = ["check_cycles", "check_pipeline", "check_torn"]


def _txn_positions(h: History) -> dict[Hashable, dict[Hashable, dict[Hashable, int]]]:
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


def check_torn(h: History, rep: Report) -> None:
    positions = _txn_positions(h)
    # read_committed consumer (process, epoch) -> partition -> its reading segments
    by_consumer: dict[tuple[Hashable, int], dict[Hashable, list[list[Read]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    saw: dict[tuple[Hashable, int], set[Hashable]] = defaultdict(set)
    for (process, segment, partition), reads in consumer_streams(h).items():
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


def check_cycles(h: History, rep: Report) -> None:
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


def check_pipeline(h: History, rep: Report, final_reads: bool) -> None:
    """Exactly-once through a consume-transform-produce pipeline: each input value gets
    one committed output; and, once the pipeline drained its inputs (and the final reads
    happened), at least one."""
    outputs: dict[Hashable, list[Send]] = defaultdict(list)
    per_input: dict[tuple[Hashable, Hashable], list[Send]] = defaultdict(list)
    for s in h.send_order:
        if s.source is not None and fate(h, s) == "committed":
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
            and fate(h, s) == "committed"
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
