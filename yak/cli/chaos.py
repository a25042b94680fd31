"""`yak chaos run|check`: a Jepsen-style reliability test of Yak on this machine.

`run` starts a local cluster, runs the workloads while injecting faults, checks the history
and writes a report directory (yak/chaos/runner.py has the phases, yak/chaos/report.py the
files). Exit 0: no anomaly and no error; 1: the run found anomalies or errors (the report
says which); 2: a usage mistake, in one line, before anything starts.

`check HISTORY` re-checks a saved history.json (e.g. after changing the checker), the
share group's part included.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from yak.cli.common import eprint, fail

app = typer.Typer(help="Reliability under faults: workloads, a nemesis and a checker.",
                  no_args_is_help=True)


def _range(flag: str, value: str) -> tuple[float, float]:
    try:
        parts = [float(x) for x in value.split(":")]
    except ValueError:
        fail(f"{flag} {value!r}: expected SECONDS or MIN:MAX", 2)
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or parts[0] <= 0 or parts[1] < parts[0]:
        fail(f"{flag} {value!r}: expected SECONDS or MIN:MAX with 0 < MIN <= MAX", 2)
    return parts[0], parts[1]


@app.command("run")
def run_cmd(
    duration: Annotated[float, typer.Option("--duration", "-d", help="Seconds of workload.",
                                            min=10)] = 120.0,
    brokers: Annotated[int, typer.Option("--brokers", "-n", help="1, 3 or 5 brokers.")] = 3,
    etcd_members: Annotated[int, typer.Option("--etcd-members",
                                              help="1 or 3 etcd members.")] = 1,
    faults: Annotated[str, typer.Option(
        "--faults", help="Comma-separated faults or groups (all, process, network), or"
        " none. See `docs/reliability.md`.")] = "kill,pause",
    seed: Annotated[int, typer.Option("--seed", help="Seed for the nemesis and workloads.")
                    ] = 1,
    interval: Annotated[str, typer.Option("--interval", help="Quiet time between faults,"
                                          " SECONDS or MIN:MAX.")] = "6:12",
    hold: Annotated[str, typer.Option("--hold", help="How long a fault lasts, SECONDS or"
                                      " MIN:MAX (pauses last past the broker session).")
                    ] = "3:8",
    schedule: Annotated[str | None, typer.Option(
        "--schedule", help="JSON file: a list of {\"at\": s, \"fault\": name, \"hold\": s}"
        " instead of random faults.")] = None,
    workloads: Annotated[str, typer.Option(
        "--workloads", help="queue, txn, pipeline, share (comma-separated; share, the"
        " share group with its dead-letter topic, is opt-in).")
    ] = "queue,txn,pipeline",
    partitions: Annotated[int, typer.Option("--partitions", help="Partitions per topic.",
                                            min=1)] = 4,
    producers: Annotated[int, typer.Option("--producers", help="Queue producers.", min=1)] = 2,
    rate: Annotated[float, typer.Option("--rate", help="Writes/s per queue producer.",
                                        min=1)] = 50.0,
    network: Annotated[str, typer.Option(
        "--network", help="auto (netns when root and a network fault is asked for),"
        " loopback (network faults through TCP proxies on the replication links) or"
        " netns.")] = "auto",
    disk_full_broker: Annotated[int | None, typer.Option(
        "--disk-full-broker", help="Broker whose data dir is a small tmpfs (disk-full"
        " fault; root). Default: the last broker when disk-full is asked for.")] = None,
    faketime: Annotated[bool | None, typer.Option(
        "--faketime/--no-faketime", help="Run brokers under libfaketime (clock fault)."
        " Default: on when the clock fault is asked for.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Broker setting KEY=VALUE for every broker; repeatable.")] = None,
    tiered: Annotated[bool, typer.Option(
        "--tiered", help="Also run an S3 store (SeaweedFS) and give the brokers tiered"
        " storage on it; the queue topic is tiered with small segments and a small local"
        " retention. Needed by the store faults (store-down, store-slow,"
        " store-crash-commit).")] = False,
    session_timeout_ms: Annotated[int, typer.Option(
        "--session-timeout-ms", help="broker.session.timeout.ms of the brokers.", min=1000)
    ] = 6000,
    report: Annotated[str | None, typer.Option(
        "--report", "-o", help="Report directory. [default: ./chaos-report-<time>]")] = None,
    keep_cluster: Annotated[bool, typer.Option(
        "--keep-cluster", help="Leave the cluster running (then `yak cluster stop"
        " --dir <report>/cluster`).")] = False,
    title: Annotated[str, typer.Option("--title", help="Title of the report.")
                     ] = "yak chaos run",
) -> None:
    """Start a local cluster, run workloads under faults, check, write a report."""
    from yak.chaos.env import faketime_library
    from yak.chaos.faults import parse_faults
    from yak.chaos.netns import netns_unavailable_reason
    from yak.chaos.runner import WORKLOADS, ChaosConfig, run

    if brokers not in (1, 3, 5):
        fail(f"--brokers {brokers}: 1, 3 or 5", 2)
    if etcd_members not in (1, 3):
        fail(f"--etcd-members {etcd_members}: 1 or 3", 2)
    try:
        fault_list = parse_faults(faults)
    except ValueError as e:
        fail(f"--faults: {e}", 2)
    wl = tuple(w.strip() for w in workloads.split(",") if w.strip())
    bad = [w for w in wl if w not in WORKLOADS]
    if bad or not wl:
        fail(f"--workloads {workloads!r}: choose from {', '.join(WORKLOADS)}", 2)
    settings: dict[str, str] = {}
    for kv in set_ or ():
        k, sep, v = kv.partition("=")
        if not sep or not k.strip():
            fail(f"--set {kv!r}: expected KEY=VALUE", 2)
        settings[k.strip()] = v.strip()
    sched = None
    if schedule is not None:
        try:
            sched = json.loads(Path(schedule).read_text())
        except (OSError, ValueError) as e:
            fail(f"--schedule {schedule}: {e}", 2)
        if not isinstance(sched, list) or not all(
                isinstance(x, dict) and "at" in x and "fault" in x for x in sched):
            fail(f"--schedule {schedule}: a JSON list of {{\"at\", \"fault\"}} objects", 2)
        try:
            parse_faults(",".join(x["fault"] for x in sched))
        except ValueError as e:
            fail(f"--schedule: {e}", 2)
        for x in sched:
            if x["fault"] not in fault_list:
                fault_list.append(x["fault"])
    network_faults = any(f.startswith("partition") or f == "slow" for f in fault_list)
    if network == "auto":
        network = "netns" if network_faults and netns_unavailable_reason() is None \
            else "loopback"
    elif network not in ("loopback", "netns"):
        fail(f"--network {network!r}: auto, loopback or netns", 2)
    if network == "netns" and (why := netns_unavailable_reason()):
        fail(f"--network netns: {why}", 2)
    # without namespaces, faults between brokers act on per-link replication proxies
    proxied = network == "loopback" and brokers > 1 and network_faults
    # named ones only: `all` takes them too, and reports them skipped without --tiered
    store_faults = [f.strip() for f in faults.split(",") if f.strip().startswith("store")]
    if store_faults and not tiered:
        fail(f"--faults {','.join(store_faults)}: the object store's faults need --tiered", 2)
    if tiered:
        if network == "netns":
            fail("--tiered with --network netns: the object store listens on 127.0.0.1, which"
                 " brokers in network namespaces do not reach (use --network loopback)", 2)
        from yak.devcluster.objectstore import WeedNotInstalledError, find_weed
        try:
            find_weed()
        except WeedNotInstalledError as e:
            fail(f"--tiered: {e}", 2)
    if "disk-full" in fault_list and disk_full_broker is None and os.geteuid() == 0:
        disk_full_broker = brokers
    if disk_full_broker is not None:
        if not 1 <= disk_full_broker <= brokers:
            fail(f"--disk-full-broker {disk_full_broker}: a broker 1..{brokers}", 2)
        if os.geteuid() != 0:
            fail("--disk-full-broker: mounting a tmpfs needs root", 2)
    if faketime is None:
        faketime = "clock" in fault_list and faketime_library() is not None
    if faketime and faketime_library() is None:
        fail("--faketime: libfaketime is not installed (Debian package libfaketime)", 2)
    out = Path(report or f"chaos-report-{time.strftime('%Y%m%d-%H%M%S')}")
    if "," in str(out.resolve()):  # the cluster's data directories live under it
        fail(f"--report {report!r}: a path with a comma cannot hold broker data directories"
             " (log.dirs is a comma-separated list)", 2)
    cfg = ChaosConfig(
        report_dir=out.resolve(), duration_s=duration, brokers=brokers,
        etcd_members=etcd_members, network=network, faults=fault_list, seed=seed,
        interval=_range("--interval", interval), hold=_range("--hold", hold), schedule=sched,
        workloads=wl, partitions=partitions, producers=producers, rate=rate,
        broker_settings=settings, tmpfs_broker=disk_full_broker, faketime=bool(faketime),
        proxied_links=proxied, tiered=tiered,
        session_timeout_ms=session_timeout_ms, keep_cluster=keep_cluster, title=title,
        command="yak chaos " + shlex.join(sys.argv[2:] if len(sys.argv) > 2 else []))
    try:
        summary = run(cfg, progress=eprint)
    except KeyboardInterrupt:
        raise
    except Exception as e:
        fail(f"chaos run failed: {type(e).__name__}: {e}", 1)
    print(json.dumps({k: summary[k] for k in (
        "valid", "anomalies_found", "anomaly_counts", "availability_during_faults")}
        | {"acked_writes_checked": summary["counts"]["acked_writes_checked"],
           "faults_injected": summary["counts"]["faults_injected"],
           "report": str(out)}))
    if not summary["valid"]:
        raise typer.Exit(1)


@app.command("check")
def check_cmd(
    history: Annotated[str, typer.Argument(help="A history.json written by `yak chaos run`.")],
    final_reads: Annotated[bool, typer.Option(
        "--final-reads/--no-final-reads", help="The history ends with reads of every"
        " partition to its end (as `yak chaos run` does).")] = True,
    allow: Annotated[str, typer.Option("--allow", help="Anomaly kinds not to fail on"
                                       " (comma-separated), e.g. G0.")] = "",
) -> None:
    """Check a saved history; print the verdict as JSON (exit 1 on anomalies)."""
    from yak.chaos.checker import HistoryError
    from yak.chaos.checker_share import check_history
    from yak.chaos.history import load_history

    try:
        ops = load_history(Path(history))
        result = check_history(ops, final_reads=final_reads)
    except HistoryError as e:
        fail(f"{history}: malformed history: {e}", 2)
    except (OSError, ValueError) as e:
        fail(f"{history}: {e}", 2)
    d = result.to_dict()
    d["anomalies"] = d["anomalies"][:50]
    print(json.dumps(d, indent=2, default=str))
    if result.failures(allowed={a.strip() for a in allow.split(",") if a.strip()}):
        raise typer.Exit(1)
