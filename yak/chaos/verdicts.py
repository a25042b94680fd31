"""Every liveness fence of a chaos run, attributed to an injected fault or called needless.

Issue 27 asks that a long run make "at most a handful of needless ISR shrinks or leader
changes". The brokers' liveness probe (yak/cluster/liveness.py) fences a broker by
revoking its lease, on one of two verdicts, each a WARNING line in the prober's log:

    ... liveness: broker 3 (epoch 671) refused 3 connections in 0.3 s after its
        connection closed: its process is gone; fenced (lease 3a46a21de4b55574 revoked)
    ... liveness: broker 2 (epoch 1096) answered no ApiVersions for 2.07 s (...): 2 of 3
        brokers agree: frozen; fenced (lease 3a46a21de4b556f3 revoked)

and a broker whose lease ran out logs its own expiry on its way back
(`broker 1 session: lease 3a46a21de4b5547b lost: expired`). This module reads the
brokers' logs of a run and its history's nemesis operations and says, for each fence,
which injected fault explains it (expected) or that none does (needless), with the
evidence: the verdict's own text, the faults then in force on other brokers or etcd, and
the leader changes and ISR shrinks of the fenced broker that followed.

Rules (`EXPLAINS`): a verdict (gone or frozen) is expected when its target was a victim of
a kill, bounce, pause or network partition whose window covers it; a session expiry also
when an etcd member was killed then (every broker's renewals go to etcd). The window runs
from `PRE_S` before the fault's start (the uncertainty of lining up the logs' wall clocks
with the history's monotonic times, see `anchor`) to `POST_S` after its stop op (the
restarted broker ready, SIGCONT sent, the cut healed): a verdict already being decided
on a paused broker is logged up to the ping bound (2 s) plus the quorum's second source
(1 s) later, on a loaded machine more, hence 5 s; an expiry's is `POST_EXPIRED_S`.
Several brokers may log the same revoke; a fence is counted once per lease.

The logs carry wall-clock times, the history monotonic seconds since the run's start. A
run records `t0_wall` (the wall clock at its time 0); for older runs `anchor` estimates it
from the restarts: the nemesis's stop op of a kill or bounce is written when the
restarted broker's log says "Yak broker ready on" (the harness polls for it every 50 ms),
so their difference is t0_wall within about 0.05 s (run G: 36 restarts, all within 0.049 s
of their median). Without restarts, the run's first topic's creation stands in: it is
logged after the history's time 0 by however long CreateTopics took, 0.09-0.24 s in four
saved runs and 1.9 s in run 096f0a7 (whose kills' verdicts it put before the kills). A
clock fault jumps one broker's wall clock (libfaketime):
its log lines are shifted back by the fault's `jump_s` while the jump is in force.

Run it on a saved report: `python -m yak.chaos.verdicts REPORT_DIR [--cluster DIR]
[--json]`; `yak chaos run` puts the same object in summary.json (`verdicts`).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yak.chaos.history import load_history

if TYPE_CHECKING:
    from yak.chaos.report import FaultWindow

__all__ = ["attribute", "attribute_run", "read_broker_logs", "anchor", "verdicts_markdown",
           "report_verdicts", "EXPLAINS", "PRE_S", "POST_S", "POST_EXPIRED_S", "FOLLOW_S"]

PRE_S = 1.0
POST_S = 5.0
# A session expiry is noticed by the broker at its first renewal after the lease ran out in
# etcd: a lease renewed just before a cut or pause runs out at most its TTL (6 s in chaos
# runs) after the fault began, so by the fault's end plus the TTL at the latest, and the
# renewal that finds it gone is one etcd request (1.5 s) later.
POST_EXPIRED_S = 7.5
RENEWALS_S = 10.0  # before an expiry, the broker's own failed renewals shown as evidence
SILENCE_S = 6.0  # before a needless fence, the target's longest silence in its log
FOLLOW_S = 3.0  # after a fence, its leader changes and ISR shrinks (the controller's pass)

KILLS = ("kill", "kill-leader", "kill-controller", "store-crash-commit")
BOUNCES = ("bounce", "bounce-leader", "bounce-controller")
PAUSES = ("pause", "pause-leader", "pause-controller")
CUTS = ("partition", "partition-leader", "partition-halves")
# Which faults explain which fence, by the fenced broker being the fault's victim
# (etcd-kill has no broker victim: it explains any broker's session expiry).
EXPLAINS: dict[str, tuple[str, ...]] = {
    "gone": KILLS + BOUNCES + PAUSES + CUTS,
    "frozen": KILLS + BOUNCES + PAUSES + CUTS,
    "expired": KILLS + BOUNCES + PAUSES + CUTS + ("etcd-kill",),
}
ANY_BROKER = ("etcd-kill",)

# The end of the probe's log line for a frozen verdict that a fetch within the bound withheld
# (yak/cluster/liveness_witness.py).
WITHHELD = "replicating, so alive; verdict withheld"
_LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) (\w+) ([\w.]+): (.*)")
_VERDICT = re.compile(
    r"liveness: (?P<role>broker|controller) (?P<target>\d+) \((?:broker )?epoch (?P<epoch>\d+)"
    r".*: (?P<kind>its process is gone|frozen); fenced \(lease (?P<lease>[0-9a-f]+) revoked\)")
_LOST = re.compile(r"broker (?P<node>\d+) session: lease (?P<lease>[0-9a-f]+) lost: (?P<why>\w+)")
# env.READY: the line (printed, no timestamp) the harness waits for after a restart; it is
# read at the time of the log line before it (the broker's registration, ms before)
READY_MARK = "Yak broker ready on"
_LEADER = re.compile(r"(?P<tp>\S+): leader (?P<old>-?\d+) -> (?P<new>-?\d+) \(epoch \d+\),"
                     r" isr \[(?P<isr>[\d, ]*)\]")
_CTRL_ISR = re.compile(r"(?P<tp>\S+): isr \[(?P<isr>[\d, ]*)\] \(partition epoch (?P<pe>\d+)\)")
_ALTER = re.compile(r"(?P<tp>\S+): ISR \[(?P<old>[\d, ]*)\] -> \[(?P<isr>[\d, ]*)\]"
                    r" \(partition epoch (?P<pe>\d+)\)")
_KEEP = ("liveness: ", " session: ", "created topic ")
_KEEP_LOGGERS = ("yak.cluster.quorum_controller", "yak.cluster.alter_partition")
_JUMP_S = 300.0  # a step this large between two lines of a clock-faulted broker's log
AGREE_S = 0.1  # restarts within this of the median estimate of time 0 agree with it
FIRST_TOPIC = "created topic chaos-queue:"  # runner.py's first topic, made just after time 0


def _wall(stamp: str, ms: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp() + int(ms) / 1000


def read_broker_logs(logs_dir: Path, jumps: dict[int, list[float]] | None = None,
                     times: dict[int, list[float]] | None = None,
                     ) -> list[tuple[float, int, str, str]]:
    """(wall time, broker, logger, message) of the lines this module reads, every
    brokerN.log in `logs_dir`, wall times corrected for clock faults (`jumps`: broker ->
    the `jump_s` of its clock faults, from the history).
    `times`, if given, gets every line's time, by broker."""
    out: list[tuple[float, int, str, str]] = []
    for path in sorted(Path(logs_dir).glob("broker*.log")):
        node = int(path.stem.removeprefix("broker"))
        known = (jumps or {}).get(node, [])
        offset, prev = 0.0, None
        every = times.setdefault(node, []) if times is not None else None
        with open(path, errors="replace") as f:
            for line in f:
                m = _LINE.match(line)
                if m is None:
                    if prev is not None and line.startswith(READY_MARK):
                        out.append((prev, node, "", READY_MARK))
                    continue
                raw = _wall(m[1], m[2])
                if known and prev is not None and abs(raw - offset - prev) > _JUMP_S:
                    # the log is written in order: a big step while this broker's clock
                    # was faked is the jump (or its undoing); a quiet log's gap is not
                    offset = min((0.0, *known), key=lambda j: abs(raw - j - prev))
                prev = raw - offset
                if every is not None:
                    every.append(prev)
                msg = m[5]
                if m[4] in _KEEP_LOGGERS or any(k in msg for k in _KEEP):
                    out.append((prev, node, m[4], msg))
    out.sort(key=lambda e: e[0])
    return out


def _victims(w: FaultWindow) -> set[int]:
    vs = w.info.get("victims")
    if isinstance(vs, list):
        return {int(v) for v in vs}
    m = re.fullmatch(r"(?:broker|b)(\d+)", str(w.target))
    return {int(m[1])} if m else set()


def anchor(lines: Sequence[tuple[float, int, str, str]], windows: Sequence[FaultWindow],
           ) -> tuple[float | None, int, int]:
    """(t0_wall, restarts agreeing, restarts matched): each kill or bounce's stop time
    against its broker's nearest READY_MARK, t0_wall their median; agreeing: within
    `AGREE_S` of it (a broker that never logged ready gives a stray pair, hence the median)."""
    ready: dict[int, list[float]] = {}
    for t, node, _, msg in lines:
        if msg == READY_MARK:
            ready.setdefault(node, []).append(t)
    restarts = [(w.stop, v) for w in windows if w.fault in KILLS + BOUNCES
                and w.stop is not None and "recovered" in w.info for v in _victims(w)]
    if not restarts:
        return None, 0, 0
    # A first guess from the earliest restart, then each restart's nearest ready line.
    stop0, node0 = min(restarts)
    first = ready.get(node0, [])
    if len(first) < 2:  # the first ready line is the cluster's start
        return None, 0, 0
    guess = first[1] - stop0
    offsets = [min(ready[v], key=lambda t: abs(t - guess - stop)) - stop
               for stop, v in restarts if ready.get(v)]
    t0 = statistics.median(offsets)
    return t0, sum(1 for o in offsets if abs(o - t0) <= AGREE_S), len(offsets)


def _isr(text: str) -> set[int]:
    return {int(x) for x in text.replace(" ", "").split(",") if x}


def _consequences(lines: Sequence[tuple[float, int, str, str]]) -> list[tuple[float, str, str,
                                                                         int]]:
    """(wall time, kind, partition, broker) of each leader change away from a broker (to
    another or to none, -1) and each ISR shrink that removed one, in time order. Each
    partition's ISR is followed through every line; a change the leader's alter_partition
    and the controller's watch both log (the same partition epoch) counts once."""
    isr: dict[str, set[int]] = {}
    epoch: dict[str, int] = {}  # the newest partition epoch seen
    out: list[tuple[float, str, str, int]] = []
    for t, _, logger, msg in lines:
        if logger.endswith("quorum_controller"):
            m = _LEADER.search(msg) or _CTRL_ISR.search(msg)
        elif logger.endswith("alter_partition"):
            m = _ALTER.search(msg)
        else:
            continue
        if m is None:
            continue
        tp, new = m["tp"], _isr(m["isr"])
        if m.re is _LEADER:
            old = int(m["old"])
            if old >= 0 and old != int(m["new"]):
                out.append((t, "leader_change", tp, old))
        else:
            pe = int(m["pe"])
            if pe <= epoch.get(tp, -1):
                continue  # the same change, logged by its leader and the controller
            epoch[tp] = pe
        # a leader's line says what its compare-and-set replaced; the controller's, only
        # the result (its watch may lag lines of other brokers, so followed here)
        before = _isr(m["old"]) if m.re is _ALTER else isr.get(tp, set())
        if before:
            out.extend((t, "isr_shrink", tp, b) for b in sorted(before - new))
        isr[tp] = new
    return out


def attribute(lines: Sequence[tuple[float, int, str, str]], windows: Sequence[FaultWindow],
              t0_wall: float, end: float | None = None) -> dict[str, Any]:
    """The `verdicts` object: every fence (a verdict's revoke, once per lease, or a
    session expiry) as expected or needless, in the history's seconds."""
    fences: dict[str, dict[str, Any]] = {}
    expiries: list[dict[str, Any]] = []
    revoked_seen: set[str] = set()
    renewals: list[tuple[float, int, str]] = []  # "lease ... not renewed" lines
    withheld: list[dict[str, Any]] = []  # frozen verdicts a fetch withheld (not fences)
    for t, node, _, msg in lines:
        if (m := _VERDICT.search(msg)) is not None:
            f = fences.get(m["lease"])
            if f is not None:  # another prober's revoke of the same lease
                f["probers"].append(node)
                continue
            kind = "gone" if m["kind"].startswith("its process") else "frozen"
            fences[m["lease"]] = {
                "kind": kind, "time": round(t - t0_wall, 3), "prober": node,
                "probers": [node], "target": int(m["target"]), "role": m["role"],
                "epoch": int(m["epoch"]), "lease": m["lease"],
                "evidence": msg[msg.index("liveness: ") + 10:]}
        elif (m := _LOST.search(msg)) is not None and int(m["node"]) == node:
            if m["why"] == "expired":
                expiries.append({"kind": "expired", "time": round(t - t0_wall, 3),
                                 "prober": None, "probers": [], "target": node,
                                 "role": "broker", "lease": m["lease"], "evidence": msg})
            else:
                revoked_seen.add(m["lease"])
        elif " session: " in msg and " not renewed" in msg:
            renewals.append((t, node, msg))
        elif msg.endswith(WITHHELD):  # liveness_witness.py: it fetched, so no verdict
            withheld.append({"time": round(t - t0_wall, 3), "prober": node,
                             "evidence": msg[msg.index("liveness: ") + 10:]})
    horizon = end if end is not None else max((w.stop or w.start for w in windows),
                                              default=0.0)
    effects = _consequences(lines)
    out: dict[str, Any] = {
        "t0_wall": round(t0_wall, 3), "window_s": [-PRE_S, POST_S],
        "window_expired_s": [-PRE_S, POST_EXPIRED_S], "follow_s": FOLLOW_S,
        "expected": {}, "needless": {}, "expected_by_fault": {},
        "revokes_logged_by_target": len(revoked_seen & set(fences)),
        "needless_list": [], "needless_leader_changes": 0, "needless_isr_shrinks": 0,
        "withheld": len(withheld), "withheld_list": withheld}
    for k in ("gone", "frozen", "expired"):
        out["expected"][k] = out["needless"][k] = 0
    for f in sorted([*fences.values(), *expiries], key=lambda f: f["time"]):
        cause = _explain(f, windows, horizon)
        if cause is not None:
            out["expected"][f["kind"]] += 1
            by = out["expected_by_fault"].setdefault(f["kind"], {})
            by[cause] = by.get(cause, 0) + 1
            continue
        out["needless"][f["kind"]] += 1
        f["leader_changes"] = f["isr_shrinks"] = 0
        f["faults_in_force"] = [
            f"{w.fault} {w.target}" for w in windows
            if w.start - PRE_S <= f["time"] <= (w.stop if w.stop is not None else horizon)
            + POST_S]
        if f["kind"] == "expired":  # why the keeper failed: etcd, or its own thread late
            f["renewal_failures"] = [
                m[m.index("session: ") + 9:][:160] for t, node, m in renewals
                if node == f["target"] and 0 <= f["time"] + t0_wall - t <= RENEWALS_S]
        out["needless_list"].append(f)
    _count_effects(out["needless_list"], [*fences.values(), *expiries], effects, t0_wall)
    out["outside_faults"] = _outside(effects, windows, t0_wall, end, horizon)
    out["needless_leader_changes"] = sum(f["leader_changes"] for f in out["needless_list"])
    out["needless_isr_shrinks"] = sum(f["isr_shrinks"] for f in out["needless_list"])
    return out


def _outside(effects: list[tuple[float, str, str, int]], windows: Sequence[FaultWindow],
             t0_wall: float, end: float | None, horizon: float) -> dict[str, int]:
    """Leader changes and ISR shrinks with no fault in force (from `PRE_S` before each,
    elastic moves included, to `POST_EXPIRED_S` after it), between the history's start and
    `end` (the cluster's own shutdown moves leaders too): in a no-fault run, all of them
    are needless (issue 27's count), fenced or not."""
    out = {"leader_changes": 0, "isr_shrinks": 0}
    for t, kind, _, _ in effects:
        rt = t - t0_wall
        if rt < 0 or (end is not None and rt > end) or any(
                w.start - PRE_S <= rt <= (w.stop if w.stop is not None else horizon)
                + POST_EXPIRED_S for w in windows):
            continue
        out[kind + "s"] += 1
    return out


def _count_effects(needless: list[dict[str, Any]], fences: list[dict[str, Any]],
                   effects: list[tuple[float, str, str, int]], t0_wall: float) -> None:
    """Give each leader change and ISR shrink of a broker to the latest of its fences that
    began before it, within `FOLLOW_S` (the controller's pass over the deleted lease), and
    count those of the needless fences. A verdict's revoke is logged before the controller
    sees it; an expiry is logged by the fenced broker itself at its next renewal, after the
    controller acted, hence its 3 s earlier start. A needless verdict also gets
    `shrinks_before`: the ISR shrinks of its target in the `FOLLOW_S` before it, the
    leaders' own judgement (no fetch for replica.fetch.dead.ms) that it had stopped."""
    def began(f: dict[str, Any]) -> float:
        return f["time"] + t0_wall - (3.0 if f["kind"] == "expired" else 0.0)

    ids = {id(f) for f in needless}
    for f in needless:
        f["shrinks_before"] = 0 if f["kind"] != "expired" else None
    for t, kind, _, broker in effects:
        owners = [f for f in fences if f["target"] == broker
                  and began(f) <= t <= f["time"] + t0_wall + FOLLOW_S]
        if owners:
            f = max(owners, key=began)
            if id(f) in ids:
                f["leader_changes" if kind == "leader_change" else "isr_shrinks"] += 1
        elif kind == "isr_shrink":
            for f in needless:
                if (f["target"] == broker and f["kind"] != "expired"
                        and began(f) - FOLLOW_S <= t < began(f)):
                    f["shrinks_before"] += 1


def _explain(f: dict[str, Any], windows: Iterable[FaultWindow], horizon: float) -> str | None:
    """The fault that explains fence `f` ("pause broker3 at 105.7"), or None."""
    for w in windows:
        if w.fault not in EXPLAINS[f["kind"]]:
            continue
        if w.fault not in ANY_BROKER and f["target"] not in _victims(w):
            continue
        stop = w.stop if w.stop is not None else horizon
        post = POST_EXPIRED_S if f["kind"] == "expired" else POST_S
        if w.start - PRE_S <= f["time"] <= stop + post:
            return w.fault
    return None


def attribute_run(cluster_dir: Path, ops: Sequence[dict[str, Any]],
                  t0_wall: float | None = None, end: float | None = None) -> dict[str, Any]:
    """Attribute the fences of the run whose cluster directory (its logs/) is
    `cluster_dir` and whose history is `ops`. Without `t0_wall`, `anchor` estimates it."""
    from yak.chaos.report import fault_windows  # report.py imports this module's markdown

    windows = fault_windows(ops)
    jumps: dict[int, list[float]] = {}
    for w in windows:
        if w.fault == "clock" and "jump_s" in w.info:
            for v in _victims(w):
                jumps.setdefault(v, []).append(float(w.info["jump_s"]))
    logs = Path(cluster_dir) / "logs"
    if not any(logs.glob("broker*.log")):  # no logs must not read as "nothing needless"
        raise FileNotFoundError(f"{logs}: no broker logs")
    times: dict[int, list[float]] = {}
    lines = read_broker_logs(logs, jumps, times)
    how = "recorded by the run"
    if t0_wall is None:
        t0_wall, agree, n = anchor(lines, windows)
        how = f"estimated from {n} restarts ({agree} within {AGREE_S:g} s of their median)"
    if t0_wall is None:  # no restarts, nothing recorded: the run creates its topics at 0
        first = next((t for t, _, _, msg in lines if msg.startswith(FIRST_TOPIC)), None)
        if first is None:
            raise ValueError(f"{logs}: no restart nor topic creation to line the logs up with")
        t0_wall = first
        how = "estimated from the first topic's creation (no restart to line up; 0.1-2 s late)"
    out = attribute(lines, windows, t0_wall, end)
    out["t0_wall_source"] = how
    for f in out["needless_list"]:
        f["target_silent_s"] = _silence(times.get(f["target"], []), f["time"] + t0_wall)
    return out


def _silence(times: list[float], at: float) -> float:
    """The longest time the broker's log said nothing in the `SILENCE_S` before `at` (its
    log was empty then: the whole span). A busy broker logs several lines a second; seconds
    of silence before a verdict on it say its process stood still (a stall, not the
    prober's), though a quiet broker (no faults, no ISR changes) is silent anyway."""
    lo = at - SILENCE_S
    seen = [lo, *(t for t in times if lo < t < at), at]
    return round(max(b - a for a, b in zip(seen, seen[1:], strict=False)), 2)


def report_verdicts(cluster_dir: Path, ops: Sequence[dict[str, Any]], t0_wall: float | None,
                    end: float | None) -> dict[str, Any]:
    """`attribute_run` for the run's report: whatever goes wrong reading the logs is said,
    not raised, since it would come at the end of a run whose report (its verdict, its
    anomalies) matters more than this section of it."""
    try:
        return attribute_run(cluster_dir, ops, t0_wall, end)
    except (OSError, ValueError) as e:
        return {"error": f"fences not attributed: {e}"}
    except Exception as e:  # a log line this module did not foresee must not lose the run
        return {"error": f"fences not attributed: {type(e).__name__}: {e}"}


def verdicts_markdown(v: dict[str, Any]) -> list[str]:
    """summary.md's section: the counts, then each needless fence with its evidence."""
    if "error" in v:
        return ["## Liveness fences", "", v["error"], ""]
    e, n = v["expected"], v["needless"]
    lines = [
        "## Liveness fences", "",
        f"Expected (the fenced broker was a fault's victim then): gone {e['gone']},"
        f" frozen {e['frozen']}, session expired {e['expired']}. **Needless: gone"
        f" {n['gone']}, frozen {n['frozen']}, session expired {n['expired']}**, followed by"
        f" {v['needless_leader_changes']} leader changes and {v['needless_isr_shrinks']} ISR"
        f" shrinks of the fenced broker within {v['follow_s']:g} s. With no fault in force:"
        f" {v['outside_faults']['leader_changes']} leader changes,"
        f" {v['outside_faults']['isr_shrinks']} ISR shrinks. Window: from"
        f" {-v['window_s'][0]:g} s before a fault to {v['window_s'][1]:g} s after it was"
        f" undone ({v['window_expired_s'][1]:g} s for an expiry); log times lined up {v.get('t0_wall_source', '')} (yak/chaos/verdicts.py).",
        ""]
    if v.get("withheld"):
        lines += [f"Frozen verdicts withheld because the silent broker was still fetching"
                  f" (liveness_witness.py; not fences): {v['withheld']}.", ""]
    for f in v["needless_list"]:
        lines.append(f"- {f['time']} s: {f['kind']} {f['role']} {f['target']}"
                     + (f" by {f['prober']}" if f["prober"] is not None else "")
                     + f" (in force: {', '.join(f['faults_in_force']) or 'none'};"
                     + (f" its log silent for {f['target_silent_s']} s of the"
                        f" {SILENCE_S:g} before;" if "target_silent_s" in f else "")
                     + (f" {f['shrinks_before']} ISR shrinks of it by its leaders in the"
                        f" {v['follow_s']:g} s before;" if f.get("shrinks_before") else "")
                     + f" then {f['leader_changes']} leader changes, {f['isr_shrinks']} ISR"
                     f" shrinks): {f['evidence']}"
                     + (f" (before it: {'; '.join(f['renewal_failures'])})"
                        if f.get("renewal_failures") else ""))
    if v["needless_list"]:
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m yak.chaos.verdicts",
                                description="Attribute a chaos run's liveness fences.")
    p.add_argument("report_dir", type=Path)
    p.add_argument("--cluster", type=Path, help="the cluster directory (default REPORT/cluster)")
    p.add_argument("--json", action="store_true", help="print the object, not markdown")
    a = p.parse_args(argv)
    try:
        ops = load_history(a.report_dir / "history.json")
        summary = a.report_dir / "summary.json"
        meta = json.loads(summary.read_text()) if summary.exists() else {}
        v = attribute_run(a.cluster or a.report_dir / "cluster", ops, meta.get("t0_wall"), meta.get("duration_s"))
    except (OSError, ValueError) as e:
        print(f"yak chaos verdicts: {e}", file=sys.stderr)
        return 2
    print(json.dumps(v, indent=2) if a.json else "\n".join(verdicts_markdown(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
