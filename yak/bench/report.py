"""Show a result: a table for people, JSON for scripts (the same numbers in both)."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from yak.bench.spec import BenchResult


def to_json(result: BenchResult) -> str:
    return json.dumps(result.to_dict(), indent=2)


def rows(result: BenchResult) -> list[tuple[str, str]]:
    s = result.spec
    clients = {"produce": f"{s.producers} producers", "consume": f"{s.consumers} consumers",
               "e2e": f"{s.producers} producers, {s.consumers} consumers"}[result.mode]
    out: list[tuple[str, str]] = [
        ("workload", f"{result.mode} {s.topic!r}: {s.message_size} B x {result.messages:,}, "
                     f"{s.partitions} partitions, {clients}"),
        ("client settings", f"acks={s.acks} compression={s.compression} "
                            f"linger.ms={s.linger_ms:g} batch.size={s.batch_size}"
                            + (f" rate={s.rate:,} msg/s" if s.rate else "")),
        ("throughput", f"{result.msgs_per_s:,.0f} msg/s  {result.mb_per_s:,.2f} MB/s  "
                       f"({result.seconds:.3f} s)"),
    ]
    if result.latency_ms is not None:
        lat = result.latency_ms
        what = "e2e latency" if result.mode == "e2e" else "ack latency"
        out.append((f"{what} (ms)", f"p50 {lat.p50:g}  p95 {lat.p95:g}  p99 {lat.p99:g}  "
                                    f"p99.9 {lat.p999:g}  max {lat.max:g}"))
    if result.broker is not None:
        b = result.broker
        per = f"{b.cpu_us_per_msg:g} us/msg" if b.cpu_us_per_msg is not None else "n/a"
        out.append(("broker CPU", f"{per}  ({b.cpu_s:.3f} CPU-s, {b.cpu_pct:g}% of a core, "
                                  f"pid {b.pid})"))
        out.append(("broker RSS", f"{b.rss_mb_start:.1f} -> {b.rss_mb_end:.1f} MiB"))
    out.append(("client CPU", f"{result.client_cpu_s:.3f} CPU-s"))
    out.append(("other processes", f"{result.other_cpu_pct:g}% of a core ({result.cpus} cores)"))
    if result.errors:
        out.append(("errors", str(result.errors)))
    for n in result.notes:
        out.append(("note", n))
    return out


def print_table(result: BenchResult, console: Console | None = None) -> None:
    table = Table(title=f"yak bench {result.mode}", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    for k, v in rows(result):
        table.add_row(k, v)
    (console or Console()).print(table)
