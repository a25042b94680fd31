"""What a chaos run found, written to a report directory:

    history.json   every operation (checker format, plus nemesis operations and times)
    summary.json   counts, anomalies, availability, recovery per fault, skipped faults
    summary.md     the same for people
    timeline.png   throughput, latency and faults over time (matplotlib)
    timeline.html  the same, self-contained (inline SVG, no script, no CDN)

Definitions (also printed in summary.md, so a report explains itself):

- acked writes checked: sends acknowledged (acks=all), each owed to the final reads.
- availability during faults: over every (partition, second) inside a fault window, the
  share in which at least one acks=all write to that partition was acknowledged. The
  producers write every partition several times a second, so an idle second means the
  partition could not take writes. The same share outside faults is the baseline.
- outage per fault: the longest interval without an acknowledgement on any partition that
  overlaps the fault (from its start to 30 s after it was undone, or the next fault).
- victim-led / others: both figures above, split between the partitions led by the
  fault's victims when it began (the nemesis records every leader on the fault's start
  operation, `leaders` and `victims`) and the other partitions. A (partition, second) cell
  is victim-led if any fault then in force had that partition's leader as its victim; a
  cell under a fault whose leaders are unknown is counted in the total only.
- recovery per fault: from the moment the fault was undone until every partition had
  acknowledged a write again (0 if writes never stopped).
"""

from __future__ import annotations

import bisect
import html
import json
import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from yak.chaos.anomalies import ANOMALY_KINDS, CheckResult
from yak.chaos.history import write_history
from yak.chaos.verdicts import verdicts_markdown

__all__ = ["analyse", "write_report", "FaultWindow"]

AFTER_S = 30.0


class FaultWindow:
    def __init__(self, fault: str, target: Any, start: float, stop: float | None,
                 info: dict[str, Any]) -> None:
        self.fault = fault
        self.target = target
        self.start = start
        self.stop = stop
        self.info = info

    def victim_led(self) -> set[Any] | None:
        """The partitions led by the fault's victims when it began (None: not recorded)."""
        leaders, victims = self.info.get("leaders"), self.info.get("victims")
        if not isinstance(leaders, dict) or victims is None:
            return None
        vs = set(victims)
        return {p for p, n in leaders.items() if n in vs}

    def to_dict(self) -> dict[str, Any]:
        return {"fault": self.fault, "target": self.target, "start": round(self.start, 3),
                "stop": None if self.stop is None else round(self.stop, 3), **self.info}


def fault_windows(ops: Sequence[dict[str, Any]]) -> list[FaultWindow]:
    out: list[FaultWindow] = []
    open_: dict[Any, FaultWindow] = {}  # by the nemesis's id (faults can overlap)
    for op in ops:
        if op.get("op") != "nemesis" or op.get("fault") == "client":
            continue
        phase = op.get("phase")
        if phase == "start":
            w = FaultWindow(op["fault"], op.get("target"), float(op["time"]), None,
                            {k: v for k, v in op.items()
                             if k not in ("op", "fault", "phase", "target", "time", "id")})
            open_[op.get("id", op["fault"])] = w
            out.append(w)
        elif phase == "stop":
            w = open_.pop(op.get("id", op["fault"]), None)
            if w is not None:
                w.stop = float(op["time"])
                for k in ("recovered", "undo_s", "undo_at", "outcome", "during"):
                    if k in op:
                        w.info[k] = op[k]
    return out


def _quantile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def analyse(ops: Sequence[dict[str, Any]], duration: float | None = None,
            bucket: float = 1.0) -> dict[str, Any]:
    """Timeline, availability and recovery figures from a history (pure)."""
    acks: dict[Any, list[float]] = defaultdict(list)  # partition -> ack times
    partitions: set[Any] = set()
    per_bucket_ok: dict[int, int] = defaultdict(int)
    per_bucket_err: dict[int, int] = defaultdict(int)
    per_bucket_lat: dict[int, list[float]] = defaultdict(list)
    latencies: list[float] = []
    end = 0.0
    last_sent = 0.0  # the queue producers' last send: they stop there, the run drains after
    for op in ops:
        t = op.get("time")
        if t is None:
            continue
        if op.get("op") == "nemesis":
            end = max(end, float(t))
        if op.get("op") != "send" or "sent" not in op or op.get("txn") is not None:
            continue
        end = max(end, float(t))
        last_sent = max(last_sent, float(op["sent"]))
        b = int(float(t) // bucket)
        partitions.add(op["partition"])
        if op.get("status") == "ok":
            acks[op["partition"]].append(float(t))
            per_bucket_ok[b] += 1
            lat = float(t) - float(op["sent"])
            per_bucket_lat[b].append(lat)
            latencies.append(lat)
        else:
            per_bucket_err[b] += 1
    duration = duration or end
    windows = fault_windows(ops)
    for a in acks.values():
        a.sort()
    nb = int(math.ceil(duration / bucket)) if duration > 0 else 0
    series = {
        "t": [i * bucket for i in range(nb)],
        "acked_per_s": [per_bucket_ok.get(i, 0) / bucket for i in range(nb)],
        "failed_per_s": [per_bucket_err.get(i, 0) / bucket for i in range(nb)],
        "p50_ms": [_ms(_quantile(per_bucket_lat.get(i, []), 0.5)) for i in range(nb)],
        "p99_ms": [_ms(_quantile(per_bucket_lat.get(i, []), 0.99)) for i in range(nb)],
    }
    # availability: (partition, second) cells with at least one ack
    in_fault = [False] * nb
    led: list[list[set[Any] | None]] = [[] for _ in range(nb)]  # the faults in force
    for w in windows:
        stop = w.stop if w.stop is not None else duration
        vl = w.victim_led()
        for i in range(int(w.start // bucket), min(nb, int(math.ceil(stop / bucket)))):
            in_fault[i] = True
            led[i].append(vl)
    cells = {True: [0, 0], False: [0, 0]}  # in_fault -> [available, total]
    split = {"victim_led": [0, 0], "others": [0, 0], "unknown": [0, 0]}  # in faults
    # Until the producers stopped sending: after it the run drains, reads and heals, and
    # a second without a write then says nothing about the cluster (a run's last nemesis
    # operation or a late ack made those seconds count as unavailable "outside faults").
    sending = min(nb, int(last_sent // bucket) + 1)
    for p in partitions:
        have = {int(t // bucket) for t in acks.get(p, [])}
        first = min(have) if have else nb
        for i in range(first, sending):  # from the partition's first ack (its warm-up)
            ok = i in have
            cells[in_fault[i]][1] += 1
            cells[in_fault[i]][0] += ok
            if in_fault[i]:
                c = split[_cell_kind(p, led[i])]
                c[1] += 1
                c[0] += ok
    faults = []
    for k, w in enumerate(windows):
        stop = w.stop if w.stop is not None else duration
        d = w.to_dict()
        d["held_s"] = round(float(w.info.get("undo_at", stop)) - w.start, 3)
        # until AFTER_S after the undo, or the next fault, whichever comes first
        hi = min(stop + AFTER_S, windows[k + 1].start if k + 1 < len(windows) else math.inf)
        d["outage_s"] = round(_longest_gap(acks, w.start, max(hi, stop)), 3)
        vl = w.victim_led()
        d["victim_led"] = None if vl is None else sorted(vl)
        for key, group in (("outage_victim_led_s", None if vl is None else vl),
                           ("outage_others_s", None if vl is None else partitions - vl)):
            sub = {p: acks[p] for p in sorted(group or ()) if p in acks}
            d[key] = round(_longest_gap(sub, w.start, max(hi, stop)), 3) if sub else None
        d["recovery_s"] = _recovery(acks, stop)
        faults.append(d)
    return {
        "duration_s": round(duration, 3),
        "partitions_written": len(partitions),
        "availability_during_faults": _share(cells[True]),
        "availability_during_faults_victim_led": _share(split["victim_led"]),
        "availability_during_faults_others": _share(split["others"]),
        "availability_outside_faults": _share(cells[False]),
        "fault_partition_seconds": {k: v[1] * bucket for k, v in split.items()},
        "fault_seconds": sum(in_fault) * bucket,
        "latency_ms": {"p50": _ms(_quantile(latencies, 0.5)),
                       "p99": _ms(_quantile(latencies, 0.99)),
                       "max": _ms(max(latencies) if latencies else float("nan"))},
        "faults": faults,
        "series": series,
    }


def _ms(x: float) -> float | None:
    return None if math.isnan(x) else round(x * 1000, 2)


def _cell_kind(p: Any, in_force: list[set[Any] | None]) -> str:
    """A (partition, second) cell inside faults: victim-led if any fault in force had the
    partition's leader as its victim; others if every fault in force recorded its leaders."""
    if any(vl is not None and p in vl for vl in in_force):
        return "victim_led"
    return "others" if all(vl is not None for vl in in_force) else "unknown"


def _share(c: list[int]) -> float | None:
    return None if c[1] == 0 else round(c[0] / c[1], 4)


def _longest_gap(acks: dict[Any, list[float]], lo: float, hi: float) -> float:
    """Longest interval between two acks of one partition, clipped to [lo, hi] (a
    partition that never acks again is reported by the recovery figure instead)."""
    worst = 0.0
    for ts in acks.values():
        i = max(0, bisect.bisect_left(ts, lo) - 1)
        j = min(len(ts), bisect.bisect_right(ts, hi) + 1)
        seg = ts[i:j]
        for a, b in zip(seg, seg[1:], strict=False):
            if b >= lo and a <= hi:
                worst = max(worst, min(b, hi) - max(a, lo))
    return worst


def _recovery(acks: dict[Any, list[float]], stop: float) -> float | None:
    """Seconds from `stop` until every partition acked again (None: one never did)."""
    worst = 0.0
    for ts in acks.values():
        i = bisect.bisect_left(ts, stop)
        if i == len(ts):
            return None
        # writes that never stopped count as recovered at once
        prev = ts[i - 1] if i > 0 else None
        first = ts[i]
        if prev is not None and first - prev < 1.0:
            continue
        worst = max(worst, first - stop)
    return round(worst, 3)


# ---------------------------------------------------------------------- writing


def write_report(out: Path, ops: list[dict[str, Any]], result: CheckResult,
                 meta: dict[str, Any]) -> dict[str, Any]:
    """Write every file of the report; returns the summary (also summary.json)."""
    out.mkdir(parents=True, exist_ok=True)
    write_history(out / "history.json", ops)
    analysis = analyse(ops)  # the timeline runs to the last write or fault
    analysis["timeline_s"] = analysis.pop("duration_s")
    series = analysis.pop("series")
    fault_counts: dict[str, int] = defaultdict(int)
    for f in analysis["faults"]:
        fault_counts[f["fault"]] += 1
    allowed = set(meta.get("allowed_anomalies", ()))
    failing = {k: v for k, v in result.counts.items() if k not in allowed}
    summary = {
        **meta,
        "valid": not failing and not meta.get("errors"),
        "anomalies_found": sum(failing.values()),
        "anomaly_counts": failing,
        "allowed_anomaly_counts": {k: v for k, v in result.counts.items() if k in allowed},
        "counts": {
            "operations": sum(1 for op in ops if op.get("op") != "nemesis"),
            "faults_injected": sum(fault_counts.values()),
            "faults_by_kind": dict(fault_counts),
            "acked_writes_checked": result.stats.get("sends_acked", 0),
            **result.stats,
        },
        **analysis,
        "anomalies": _examples(result, 20),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "summary.md").write_text(summary_markdown(summary))
    (out / "timeline.html").write_text(timeline_html(series, analysis["faults"], summary))
    try:
        _plot_png(out / "timeline.png", series, analysis["faults"],
                  meta.get("title", "yak chaos"))
    except ImportError as e:
        # matplotlib is a declared dependency; a copy of the tool carried without it (the
        # device machine's 64 MiB limit) still gets its verdict and both summaries.
        print(f"yak chaos: timeline.png not drawn ({e}); timeline.html has the same series",
              file=sys.stderr)
    return summary


def _examples(result: CheckResult, per_kind: int) -> list[dict[str, Any]]:
    """A few examples of every kind found (the full list is the checker's, in the run)."""
    count: dict[str, int] = defaultdict(int)
    out = []
    for a in result.anomalies:
        count[a.kind] += 1
        if count[a.kind] <= per_kind:
            out.append(a.to_dict())
    return out


def summary_markdown(s: dict[str, Any]) -> str:
    c = s["counts"]
    lines = [
        f"# {s.get('title', 'yak chaos run')}",
        "",
        f"Verdict: **{'PASS' if s['valid'] else 'FAIL'}** — anomalies found:"
        f" {s['anomalies_found']}" + (
            " (" + ", ".join(f"{k} {v}" for k, v in s["anomaly_counts"].items()) + ")"
            if s["anomaly_counts"] else ""),
        "",
        f"**Availability during faults: {_pct(s['availability_during_faults'])}** (acks=all,"
        f" partition-seconds): partitions led by the fault's victim"
        f" {_pct(s.get('availability_during_faults_victim_led'))}, the other partitions"
        f" {_pct(s.get('availability_during_faults_others'))}; outside faults"
        f" {_pct(s['availability_outside_faults'])}.",
        "",
        *(["Allowed (Kafka does not promise otherwise, see docs/reliability.md): "
           + ", ".join(f"{k} {v}" for k, v in s["allowed_anomaly_counts"].items()), ""]
          if s.get("allowed_anomaly_counts") else []),
        f"- command: `{s.get('command', '')}`",
        f"- cluster: {s.get('cluster', '')}",
        f"- workloads: {s.get('workloads', '')}",
        f"- seed {s.get('seed')}, duration {s.get('duration_s')} s, started {s.get('started', '')}",
        f"- machine: {s.get('cpus', '?')} CPUs, 1-minute load average {s.get('load_at_start', '')}"
        f" at start, during the run {s.get('load_during') or 'n/a'} (sampled every 10 s)",
        "",
        "| count | value |",
        "|---|---|",
        f"| operations (history) | {c['operations']} |",
        f"| sends / acked writes checked | {c.get('operations_sends', 0)} /"
        f" {c['acked_writes_checked']} |",
        f"| polls / records read | {c.get('polls', 0)} / {c.get('records_read', 0)} |",
        f"| transactions committed / aborted / unknown | {c.get('txns_committed', 0)} /"
        f" {c.get('txns_aborted', 0)} / {c.get('txns_unknown', 0)} |",
        *(_share_rows(c) if "share_deliveries" in c else []),
        f"| faults injected | {c['faults_injected']} ("
        + ", ".join(f"{k} {v}" for k, v in sorted(c["faults_by_kind"].items())) + ") |",
        f"| availability during faults (acks=all, partition-seconds) |"
        f" {_pct(s['availability_during_faults'])} |",
        f"| ... partitions led by the fault's victim / the others |"
        f" {_pct(s.get('availability_during_faults_victim_led'))} /"
        f" {_pct(s.get('availability_during_faults_others'))} |",
        f"| availability outside faults | {_pct(s['availability_outside_faults'])} |",
        f"| write latency p50 / p99 / max (ms) | {s['latency_ms']['p50']} /"
        f" {s['latency_ms']['p99']} / {s['latency_ms']['max']} |",
        *([f"| replicas identical below the high watermark (partitions, after healing) |"
           f" {r['identical']} of {r['partitions']} ({r['replicas']} replicas,"
           f" {r['committed_bytes']} bytes per replica set) |"]
          if (r := s.get("replicas")) else []),
        "",
    ]
    if s.get("skipped_faults"):
        lines += ["Faults not run here, and why:", ""]
        lines += [f"- `{k}`: {v}" for k, v in s["skipped_faults"].items()]
        lines.append("")
    if s.get("faults_not_started"):
        lines += ["Faults skipped when drawn (no victim known in time; not errors):", ""]
        lines += [f"- {f}" for f in s["faults_not_started"]]
        lines.append("")
    if s.get("errors"):
        lines += ["Errors during the run (a run with errors does not pass):", ""]
        lines += [f"- {e}" for e in s["errors"]]
        lines.append("")
    if s["faults"]:
        lines += ["## Faults", "",
                  "| # | fault | target | start s | held s | victim led | outage s |"
                  " outage victim-led s | outage others s | recovery s | broker ready s / outcome |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for i, f in enumerate(s["faults"], 1):
            lines.append(f"| {i} | {f['fault']} | {f.get('target')} | {f['start']} |"
                         f" {f['held_s']} | {_led(f.get('victim_led'))} | {f['outage_s']} |"
                         f" {_na(f.get('outage_victim_led_s'))} |"
                         f" {_na(f.get('outage_others_s'))} | {f['recovery_s']} |"
                         f" {f.get('recovered', '')}{_outcome(f)} |")
        lines.append("")
        per_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for f in s["faults"]:
            per_kind[f["fault"]].append(f)
        lines += ["Per kind (max over the faults of that kind):", "",
                  "| fault | n | outage s | outage victim-led s | outage others s |"
                  " recovery s |", "|---|---|---|---|---|---|"]
        for k, fs in sorted(per_kind.items()):
            recs = [f["recovery_s"] for f in fs if f["recovery_s"] is not None]
            lines.append(f"| {k} | {len(fs)} | {max(f['outage_s'] for f in fs)} |"
                         f" {_na(_max(f.get('outage_victim_led_s') for f in fs))} |"
                         f" {_na(_max(f.get('outage_others_s') for f in fs))} |"
                         f" {max(recs) if recs else 'never'} |")
        lines.append("")
    if s["anomalies"]:
        lines += ["## Anomalies (up to 5 examples of each kind)", ""]
        shown: dict[str, int] = defaultdict(int)
        for a in sorted(s["anomalies"], key=lambda a: ANOMALY_KINDS.index(a["kind"])
                        if a["kind"] in ANOMALY_KINDS else len(ANOMALY_KINDS)):
            shown[a["kind"]] += 1
            if shown[a["kind"]] <= 5:
                lines.append(f"- **{a['kind']}**: {a['detail']}")
        lines.append("")
    lines += verdicts_markdown(s["verdicts"]) if s.get("verdicts") else []
    lines += [
        "## Definitions", "",
        "- acked writes checked: sends acknowledged with acks=all; each must be read by the"
        " final reads, once, at its acknowledged offset.",
        "- availability: share of (partition, second) cells with at least one acknowledged"
        " write, inside fault windows (from injection to undo) and outside them.",
        f"- outage: longest interval without an acknowledgement on any partition overlapping"
        f" the fault (until {AFTER_S:g} s after it was undone, or the next fault).",
        "- victim led / victim-led / others: the partitions whose leader was the fault's victim"
        " when it began (a Metadata read by the nemesis just before the fault), and the rest;"
        " outage and availability are split between them (a second under several faults is"
        " victim-led if it is for any of them; n/a: leaders not recorded).",
        "- held: from injection until the undo began (restart, SIGCONT, heal).",
        "- recovery: from the undo until every partition acknowledged a write again (0 if"
        " writes never stopped); broker ready: restart until the broker logged ready.",
        "",
    ]
    return "\n".join(lines)


def _share_rows(c: dict[str, Any]) -> list[str]:
    """The share-group workload's counts (yak/chaos/checker_share.py) as table rows."""
    acks = " / ".join(f"{c.get(f'share_acks_{t}_ok', 0)}"
                      f" ({c.get(f'share_acks_{t}_fail', 0) + c.get(f'share_acks_{t}_info', 0)})"
                      for t in ("accept", "release", "reject"))
    return [
        f"| share: acked writes / deliveries / redeliveries / max delivery count |"
        f" {c.get('share_sends_acked', 0)} / {c['share_deliveries']} /"
        f" {c.get('share_redeliveries', 0)} / {c.get('share_max_delivery_count', 0)} |",
        f"| share: acks confirmed (refused or unknown) accept / release / reject | {acks} |",
        f"| share: values accepted / dead-lettered (never delivered) / outcome unknown |"
        f" {c.get('share_values_accepted', 0)} / {c.get('dlq_values', 0)}"
        f" ({c.get('dlq_values_never_delivered', 0)}) /"
        f" {c.get('share_values_outcome_unknown', 0)} |",
    ]


def _outcome(f: dict[str, Any]) -> str:
    """An elastic operation's outcome in the faults table, with the faults it overlapped."""
    if "outcome" not in f:
        return ""
    during = f.get("during") or []
    return f"{f['outcome']}" + (f" (during {', '.join(during)})" if during else "")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _na(x: Any) -> str:
    return "n/a" if x is None else str(x)


def _max(xs: Any) -> float | None:
    vals = [x for x in xs if x is not None]
    return max(vals) if vals else None


def _led(parts: list[Any] | None) -> str:
    """Partitions by their number (chaos-queue-2 -> 2); 'none' or 'n/a'."""
    if parts is None:
        return "n/a"
    return ",".join(str(p).rsplit("-", 1)[-1] for p in parts) or "none"


_FAULT_COLOURS = {"kill": "#d62728", "pause": "#9467bd", "bounce": "#ff7f0e",
                  "etcd": "#8c564b", "partition": "#1f77b4", "slow": "#17becf",
                  "disk": "#7f7f7f", "clock": "#bcbd22"}


def _colour(fault: str) -> str:
    return _FAULT_COLOURS.get(fault.split("-")[0], "#e377c2")


def _plot_png(path: Path, series: dict[str, list[Any]], faults: list[dict[str, Any]],
              title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(12, 6), sharex=True)
    t = series["t"]
    ax1.plot(t, series["acked_per_s"], lw=0.8, color="#2ca02c", label="acked queue writes/s")
    ax1.plot(t, series["failed_per_s"], lw=0.8, color="#d62728", label="failed writes/s")
    ax1.set_ylabel("writes/s")
    ax1.legend(loc="upper right", fontsize=8)
    p50 = [float("nan") if v is None else v for v in series["p50_ms"]]
    p99 = [float("nan") if v is None else v for v in series["p99_ms"]]
    ax2.plot(t, p50, lw=0.8, label="p50")
    ax2.plot(t, p99, lw=0.8, label="p99")
    ax2.set_yscale("log")
    ax2.set_ylabel("ack latency (ms)")
    ax2.set_xlabel("seconds since start")
    ax2.legend(loc="upper right", fontsize=8)
    seen: set[str] = set()
    for f in faults:
        stop = f["stop"] if f["stop"] is not None else (t[-1] if t else f["start"])
        for ax in (ax1, ax2):
            ax.axvspan(f["start"], max(stop, f["start"] + 0.2), color=_colour(f["fault"]),
                       alpha=0.2, lw=0,
                       label=f["fault"] if ax is ax1 and f["fault"] not in seen else None)
        seen.add(f["fault"])
    ax1.legend(loc="upper right", fontsize=7, ncol=4)
    ax1.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def timeline_html(series: dict[str, list[Any]], faults: list[dict[str, Any]],
                  summary: dict[str, Any]) -> str:
    """One file: the summary table and two SVG charts (hover a fault for its details)."""
    w, h, pad = 1100, 220, 50
    t = series["t"]
    tmax = max(t[-1] if t else 1.0, 1.0)

    def x(v: float) -> float:
        return pad + (w - 2 * pad) * v / tmax

    def chart(lines: list[tuple[str, list[float | None], str]], ylabel: str,
              log: bool = False) -> str:
        vals = [v for _, ys, _ in lines for v in ys if v is not None and v > 0]
        ymax = max(vals) if vals else 1.0
        ymin = min(vals) if (vals and log) else 0.0
        if log:
            lo, hi = math.log10(max(ymin, 0.01)), math.log10(max(ymax, 0.02))
            hi = hi if hi > lo else lo + 1

            def y(v: float) -> float:
                return h - pad + (-(h - 2 * pad) * (math.log10(max(v, 0.01)) - lo) / (hi - lo))
        else:
            def y(v: float) -> float:
                return h - pad - (h - 2 * pad) * v / (ymax or 1.0)
        parts = [f'<svg width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">',
                 f'<rect x="{pad}" y="{pad}" width="{w - 2 * pad}" height="{h - 2 * pad}"'
                 ' fill="#fafafa" stroke="#ccc"/>']
        for f in faults:
            stop = f["stop"] if f["stop"] is not None else tmax
            tip = html.escape(f"{f['fault']} on {f.get('target')}: {f['start']}–{stop} s, "
                              f"outage {f['outage_s']} s (victim-led"
                              f" {_na(f.get('outage_victim_led_s'))} s, others"
                              f" {_na(f.get('outage_others_s'))} s), recovery"
                              f" {f['recovery_s']} s")
            parts.append(f'<rect x="{x(f["start"]):.1f}" y="{pad}" width="'
                         f'{max(1.5, x(stop) - x(f["start"])):.1f}" height="{h - 2 * pad}"'
                         f' fill="{_colour(f["fault"])}" opacity="0.25"><title>{tip}</title>'
                         '</rect>')
        for name, ys, colour in lines:
            pts = " ".join(f"{x(tv):.1f},{y(v):.1f}" for tv, v in zip(t, ys, strict=False)
                           if v is not None and (v > 0 or not log))
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1"'
                         f' points="{pts}"><title>{html.escape(name)}</title></polyline>')
        for k in range(6):
            tv = tmax * k / 5
            parts.append(f'<text x="{x(tv):.1f}" y="{h - pad + 16}" font-size="11"'
                         f' text-anchor="middle">{tv:.0f}s</text>')
        top = f"{ymax:.0f}" if not log else f"{10 ** hi:.0f}"
        parts.append(f'<text x="{pad - 4}" y="{pad + 4}" font-size="11"'
                     f' text-anchor="end">{top}</text>')
        parts.append(f'<text x="{pad}" y="{pad - 8}" font-size="12">{html.escape(ylabel)}'
                     + "".join(f' <tspan fill="{c}">■ {html.escape(n)}</tspan>'
                               for n, _, c in lines) + "</text>")
        parts.append("</svg>")
        return "\n".join(parts)

    legend = "".join(
        f'<span style="background:{_colour(k)};opacity:.5;padding:0 6px;margin-right:6px">'
        f"{html.escape(k)}</span>" for k in sorted({f["fault"] for f in faults}))
    verdict = "PASS" if summary["valid"] else "FAIL"
    rows = "".join(
        f"<tr><td>{i}</td><td>{html.escape(f['fault'])}</td>"
        f"<td>{html.escape(str(f.get('target')))}</td><td>{f['start']}</td>"
        f"<td>{f['held_s']}</td><td>{_led(f.get('victim_led'))}</td><td>{f['outage_s']}</td>"
        f"<td>{_na(f.get('outage_victim_led_s'))}</td><td>{_na(f.get('outage_others_s'))}</td>"
        f"<td>{f['recovery_s']}</td></tr>"
        for i, f in enumerate(faults, 1))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(summary.get('title', 'yak chaos'))}</title>
<style>body{{font-family:sans-serif;margin:20px}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px}}</style></head><body>
<h1>{html.escape(summary.get('title', 'yak chaos'))}: {verdict}</h1>
<p>anomalies: {summary['anomalies_found']} {html.escape(json.dumps(summary['anomaly_counts']))};
acked writes checked: {summary['counts']['acked_writes_checked']};
faults injected: {summary['counts']['faults_injected']};
<b>availability during faults: {_pct(summary['availability_during_faults'])}</b>
(partitions led by the victim: {_pct(summary.get('availability_during_faults_victim_led'))},
others: {_pct(summary.get('availability_during_faults_others'))};
outside faults: {_pct(summary['availability_outside_faults'])})</p>
<p>faults: {legend}</p>
{chart([("acked/s", series["acked_per_s"], "#2ca02c"),
        ("failed/s", series["failed_per_s"], "#d62728")], "writes per second")}
{chart([("p50", series["p50_ms"], "#1f77b4"), ("p99", series["p99_ms"], "#ff7f0e")],
       "ack latency (ms, log scale)", log=True)}
<table><tr><th>#</th><th>fault</th><th>target</th><th>start s</th><th>held s</th>
<th>victim led</th><th>outage s</th><th>outage victim-led s</th><th>outage others s</th>
<th>recovery s</th></tr>{rows}</table>
</body></html>
"""
