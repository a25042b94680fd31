"""One chaos run, end to end: cluster up, workloads, faults, heal, final reads, check,
report, cluster down. `yak chaos run` (yak/cli/chaos.py) and the tests call `run()`.

Phases and their bounds (every wait has one):

1. start the cluster (ChaosCluster) and create the topics (RF 3 and min.insync.replicas 2
   on 3 or 5 brokers);
2. start the workloads: queue producers, consumers (assign and subscribe, both isolation
   levels), the exactly-once pipeline, the transactional workload (TxnWorkload of issue 12,
   whose producers are processes killed with SIGKILL on their own schedule), and, opt-in,
   the share group (share_workload.py: a producer, share consumers, a dead-letter topic);
3. the nemesis injects faults from `warmup_s` until `duration_s - cooldown_s`;
4. heal everything, wait until every partition takes writes again (`recover_timeout_s`);
5. stop the producers (each drains what it has in flight), let the pipeline drain its
   input, decide every transaction, let the share group drain and read its dead-letter
   topic, stop the consumers;
6. final reads of every topic to its end (read_committed); the replicas' segment files
   compared byte for byte below the high watermark (yak/chaos/replicas.py); then the
   checker with `final_reads=True` (and checker_share.py on the share ops), the report.

A broker that exits without the nemesis asking (a crash) is restarted and recorded as an
error: a run with errors does not pass, whatever the checker says.

Over 600 lines on purpose: the phases above are one function's sequence, and the waits
they use (`_wait_writable`, `_wait_pipeline_drained`, `_compare_replicas`) are read with
them; each workload's own logic lives in its module (queue.py, workloads.py,
share_workload.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from yak.chaos.checker_share import check_history
from yak.chaos.env import ChaosCluster, ClusterSpec
from yak.chaos.faults import FaultPlan, Nemesis
from yak.chaos.history import Recorder, write_history
from yak.chaos.pipeline import Pipeline
from yak.chaos.queue import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ConsumerSpec,
    QueueConsumer,
    QueueProducer,
    final_reads,
    partition_name,
)
from yak.chaos.report import write_report
from yak.chaos.share_workload import ShareWorkload
from yak.chaos.verdicts import report_verdicts
from yak.chaos.workloads import TxnWorkload, WorkloadConfig

__all__ = ["ChaosConfig", "run", "WORKLOADS", "DEFAULT_WORKLOADS"]

log = logging.getLogger(__name__)

WORKLOADS = ("queue", "txn", "pipeline", "share")
DEFAULT_WORKLOADS = ("queue", "txn", "pipeline")  # share is opt-in
QUEUE_TOPIC = "chaos-queue"
SHARE_TOPIC = "chaos-share"
SHARE_DLQ = "chaos-share-dlq"
EOS_TOPIC = "chaos-eos-out"
TXN_TOPIC = "chaos-txn"


@dataclass
class ChaosConfig:
    report_dir: Path
    duration_s: float = 120.0
    brokers: int = 3
    etcd_members: int = 1
    network: str = "loopback"
    faults: list[str] = field(default_factory=lambda: ["kill", "pause"])
    seed: int = 1
    interval: tuple[float, float] = (6.0, 12.0)
    hold: tuple[float, float] = (3.0, 8.0)
    schedule: list[dict[str, Any]] | None = None
    workloads: tuple[str, ...] = DEFAULT_WORKLOADS
    partitions: int = 4
    producers: int = 2
    rate: float = 50.0  # writes per second per queue producer
    txn_producers: int = 2
    txn_kill_every_s: float = 0.0  # SIGKILL a transactional producer this often (0: never)
    txn_interval_s: float = 0.05  # pause between a transactional producer's transactions
    share_members: int = 3  # share consumers in the share group
    share_rate: float = 20.0  # writes per second to the share topic
    warmup_s: float = 5.0
    cooldown_s: float = 5.0
    recover_timeout_s: float = 90.0
    session_timeout_ms: int = 6000
    broker_settings: dict[str, str] = field(default_factory=dict)
    tmpfs_broker: int | None = None
    tmpfs_mb: int = 256
    faketime: bool = False
    proxied_links: bool = False  # loopback: replication through per-link TCP proxies
    tiered: bool = False  # an S3 store and a tiered queue topic (yak/chaos/store.py)
    cluster_dir: Path | None = None  # default: <report_dir>/cluster
    keep_cluster: bool = False
    base_port: int | None = None
    title: str = "yak chaos run"
    command: str = ""


class _Progress:
    def __init__(self, out: Callable[[str], None] | None) -> None:
        self.out = out
        self.t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        if self.out is not None:
            self.out(f"[{time.monotonic() - self.t0:7.1f}s] {msg}")


def _precompile(say: Callable[[str], None]) -> None:
    """Compile Yak's modules to bytecode once, before the brokers start.

    A run restarts brokers dozens of times; where PYTHONDONTWRITEBYTECODE is set (as on
    the development machine) each start compiled ~230 modules again, about a third of a
    restart's import CPU (docs/benchmarks/recovery.md, "Restart to ready"). Readable
    bytecode is used even with that variable set. A package directory that cannot be
    written (an installed, read-only Yak) keeps today's behaviour, and says so."""
    import compileall

    import yak

    if not compileall.compile_dir(Path(yak.__file__).parent, quiet=1):
        say("could not write bytecode for every module of yak (read-only install?);"
            " brokers compile at each start")


def run(cfg: ChaosConfig, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run one chaos test; returns the summary (also written to cfg.report_dir)."""
    say = _Progress(progress)
    cfg.report_dir.mkdir(parents=True, exist_ok=True)
    spec = ClusterSpec(
        directory=cfg.cluster_dir or cfg.report_dir / "cluster", brokers=cfg.brokers,
        etcd_members=cfg.etcd_members, network=cfg.network, base_port=cfg.base_port,
        broker_settings=dict(cfg.broker_settings), tmpfs_broker=cfg.tmpfs_broker,
        tmpfs_mb=cfg.tmpfs_mb, faketime=cfg.faketime, proxied_links=cfg.proxied_links,
        session_timeout_ms=cfg.session_timeout_ms, tiered=cfg.tiered)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    load = os.getloadavg()[0]
    cluster = ChaosCluster(spec)
    _precompile(say)
    say(f"starting {cfg.brokers} broker(s)"
        + (f" and {cfg.etcd_members} etcd member(s)" if cfg.brokers > 1 else "")
        + f" in {spec.directory} ({cfg.network})")
    cluster.start()
    errors: list[str] = []
    loads: list[float] = []
    sampling = threading.Event()

    def sample_load() -> None:  # the machine is shared: say how busy it was
        while not sampling.wait(10.0):
            loads.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample_load, name="chaos-load", daemon=True)
    sampler.start()
    try:
        ops, extra = _run_workloads(cfg, cluster, say, errors)
    finally:
        sampling.set()
        if not cfg.keep_cluster:
            say("stopping the cluster")
            cluster.stop()
    say(f"checking {len(ops)} operations")
    # Saved before the check, so a history the checker refuses (a HistoryError) is still
    # there to read and to check again with `yak chaos check`.
    cfg.report_dir.mkdir(parents=True, exist_ok=True)
    write_history(cfg.report_dir / "history.json", ops)
    t = time.monotonic()
    result = check_history(ops)
    check_s = time.monotonic() - t
    meta = {
        "title": cfg.title,
        "command": cfg.command,
        "started": started,
        "load_at_start": round(load, 2),
        "load_during": {"min": round(min(loads), 2), "mean": round(sum(loads) / len(loads), 2),
                        "max": round(max(loads), 2)} if loads else None,
        "cpus": os.cpu_count(),
        "seed": cfg.seed,
        "duration_s": extra.pop("duration_s"),
        "cluster": f"{cfg.brokers} broker(s)"
                   + (f", etcd {cfg.etcd_members} member(s)" if cfg.brokers > 1 else "")
                   + f", network {cfg.network}"
                   + (" (replication through TCP proxies)" if cfg.proxied_links else "")
                   + f", RF {spec.replication_factor},"
                     f" min.insync.replicas {spec.min_insync_replicas}"
                   + (f", settings {cfg.broker_settings}" if cfg.broker_settings else ""),
        "workloads": ", ".join(cfg.workloads) + f" ({cfg.partitions} partitions"
                     + (f", {cfg.producers} queue producers at {cfg.rate:g}/s"
                        if {"queue", "pipeline"} & set(cfg.workloads) else "") + ")"
                     + (f"; share: {cfg.share_members} members, 1 producer at"
                        f" {cfg.share_rate:g}/s" if "share" in cfg.workloads else ""),
        "check_s": round(check_s, 2),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "errors": errors,
        # Kafka does not order transactions' writes across partitions: concurrent
        # transactional producers writing the same partitions can show G0 legitimately
        # (Jepsen's Kafka and Redpanda analyses). Counted and shown, not failed on.
        # An idempotent producer whose in-flight send timed out (message.timeout.ms)
        # bumps its epoch and resends what it still queued: a duplicate librdkafka
        # documents and no broker can prevent (checker_reads._resent_after_client_timeout).
        "allowed_anomalies": (["G0"] if "txn" in cfg.workloads and cfg.txn_producers > 1
                              else []) + ["duplicate_after_client_timeout"]
                             # the broker copies to the DLQ at least once (checker_share)
                             + (["dlq_duplicate"] if "share" in cfg.workloads else []),
        **extra,
    }
    meta["verdicts"] = report_verdicts(spec.directory, ops, meta["t0_wall"], meta["duration_s"])
    summary = write_report(cfg.report_dir, ops, result, meta)
    say(f"{'PASS' if summary['valid'] else 'FAIL'}: {summary['anomalies_found']} anomalies,"
        f" {summary['counts']['acked_writes_checked']} acked writes checked,"
        f" {summary['counts']['faults_injected']} faults; availability during faults"
        f" {_pct(summary['availability_during_faults'])} (partitions led by the victim"
        f" {_pct(summary['availability_during_faults_victim_led'])}, others"
        f" {_pct(summary['availability_during_faults_others'])}); report in {cfg.report_dir}")
    return summary


def _create_topics(cluster: ChaosCluster, topics: dict[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    spec = cluster.spec
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futs = admin.create_topics(
        [NewTopic(t, n, spec.replication_factor,
                  config=cluster.topic_config(t, tiered=t == QUEUE_TOPIC))
         for t, n in topics.items()], request_timeout=30)
    for t, f in futs.items():
        try:
            f.result(60)
        except Exception as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise RuntimeError(f"creating topic {t}: {e}") from None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every partition has a leader
        if all(len(ls) == topics[t] and all(v >= 0 for v in ls.values())
               for t in topics for ls in [cluster.leaders(t)]):
            return
        time.sleep(0.3)
    raise RuntimeError("topics have no leaders after 60 s")


def _run_workloads(cfg: ChaosConfig, cluster: ChaosCluster, say: _Progress,
                   errors: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    started: list[TxnWorkload | ShareWorkload] = []
    try:
        return _phases(cfg, cluster, say, errors, started)
    except BaseException:
        for w in started:  # its producers are processes: never leave them behind
            with contextlib.suppress(Exception):
                if isinstance(w, ShareWorkload):
                    w.stop_members.set()  # threads, but they would spin on a stopped cluster
                else:
                    w.stop_producers()
        raise


def _phases(cfg: ChaosConfig, cluster: ChaosCluster, say: _Progress, errors: list[str],
            started: list[TxnWorkload | ShareWorkload],
            ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rec = Recorder()
    bootstrap = cluster.bootstrap
    topics = {QUEUE_TOPIC: cfg.partitions}
    if "pipeline" in cfg.workloads:
        topics[EOS_TOPIC] = cfg.partitions
    if "share" in cfg.workloads:
        topics[SHARE_TOPIC] = topics[SHARE_DLQ] = cfg.partitions
    _create_topics(cluster, topics)
    stop_producers = threading.Event()
    stop_consumers = threading.Event()
    stop_pipeline = threading.Event()
    producers: list[QueueProducer] = []
    consumers: list[QueueConsumer] = []
    pipelines: list[Pipeline] = []
    if "queue" in cfg.workloads or "pipeline" in cfg.workloads:
        for i in range(cfg.producers):
            producers.append(QueueProducer(
                f"q{i}", rec, stop_producers, bootstrap=bootstrap, topic=QUEUE_TOPIC,
                partitions=cfg.partitions, rate=cfg.rate, seed=cfg.seed * 1000 + i))
    if "queue" in cfg.workloads:
        specs = [("ca-rc", ConsumerSpec("assign", READ_COMMITTED)),
                 ("ca-ru", ConsumerSpec("assign", READ_UNCOMMITTED)),
                 ("cs-rc-0", ConsumerSpec("subscribe", READ_COMMITTED, "chaos-group-rc")),
                 ("cs-rc-1", ConsumerSpec("subscribe", READ_COMMITTED, "chaos-group-rc")),
                 ("cs-ru-0", ConsumerSpec("subscribe", READ_UNCOMMITTED, "chaos-group-ru"))]
        for name, spec in specs:
            consumers.append(QueueConsumer(name, rec, stop_consumers, bootstrap=bootstrap,
                                           topic=QUEUE_TOPIC, partitions=cfg.partitions,
                                           spec=spec))
    if "pipeline" in cfg.workloads:
        pipelines.append(Pipeline("e0", rec, stop_pipeline, bootstrap=bootstrap,
                                  input_topic=QUEUE_TOPIC, output_topic=EOS_TOPIC,
                                  output_partitions=cfg.partitions, seed=cfg.seed))
    txn: TxnWorkload | None = None
    if "txn" in cfg.workloads:
        txn = TxnWorkload(WorkloadConfig(
            bootstrap, topic=TXN_TOPIC, partitions=cfg.partitions, producers=cfg.txn_producers,
            consumers=1, seconds=cfg.duration_s, kill_every_s=cfg.txn_kill_every_s,
            seed=cfg.seed, work_dir=str(cfg.report_dir / "txn-logs"),
            txn_interval_s=cfg.txn_interval_s,
            replication_factor=cluster.spec.replication_factor,
            topic_config={"min.insync.replicas": str(cluster.spec.min_insync_replicas)}))
    share = None
    if "share" in cfg.workloads:
        share = ShareWorkload(rec, stop_producers, bootstrap=bootstrap, topic=SHARE_TOPIC,
                              dlq=SHARE_DLQ, partitions=cfg.partitions,
                              members=cfg.share_members, rate=cfg.share_rate, seed=cfg.seed)
        share.configure()
        producers.append(share.producer)
        started.append(share)
    clients = [*producers, *consumers, *pipelines, *(share.members if share else [])]
    say(f"workloads: {len(producers)} producers, {len(consumers)} consumers,"
        f" {len(pipelines)} pipeline(s)" + (f", {cfg.txn_producers} transactional producers"
                                            if txn else "")
        + (f", share group: 1 producer, {cfg.share_members} members" if share else ""))
    for c in clients:
        c.start()
    txn_stop = threading.Event()
    txn_thread = None
    if txn is not None:
        started.append(txn)
        txn.start()

        def tick() -> None:
            while not txn_stop.wait(0.1):
                try:
                    txn.tick(rec.now())
                except Exception as e:  # keep ticking: a restart can fail mid-fault
                    log.warning("txn workload tick: %s", e)

        txn_thread = threading.Thread(target=tick, name="chaos-txn-tick", daemon=True)
        txn_thread.start()

    plan = FaultPlan(cfg.faults, seed=cfg.seed, interval=cfg.interval, hold=cfg.hold,
                     schedule=cfg.schedule,
                     topic=SHARE_TOPIC if cfg.workloads == ("share",) else QUEUE_TOPIC)
    nemesis = Nemesis(cluster, rec, plan, progress=say)
    for f, why in nemesis.skipped.items():
        say(f"fault {f} skipped: {why}")
    crash_stop = threading.Event()
    crash_thread = threading.Thread(target=_watch_crashes,
                                    args=(cluster, rec, nemesis, crash_stop, errors),
                                    name="chaos-crash-watch", daemon=True)
    crash_thread.start()
    try:
        _sleep_until(rec, cfg.warmup_s)
        if nemesis.usable or cfg.schedule:
            say(f"nemesis: {', '.join(nemesis.usable)} (seed {cfg.seed})")
            nemesis.start()
        end_faults = max(cfg.warmup_s, cfg.duration_s - cfg.cooldown_s)
        while rec.now() < end_faults:
            time.sleep(min(5.0, max(0.05, end_faults - rec.now())))
        nemesis.stop()
        if nemesis.ident is not None:
            nemesis.join(180)
        if nemesis.is_alive():
            errors.append("the nemesis did not finish undoing its fault within 180 s")
        say(f"faults over ({len(nemesis.injected)} injected); waiting for recovery")
        _sleep_until(rec, cfg.duration_s)
        recovered_at = _wait_writable(rec, producers, cfg.recover_timeout_s)
        if recovered_at is None:
            errors.append(f"writes did not resume on every partition within"
                          f" {cfg.recover_timeout_s:g} s after the faults")
    finally:
        nemesis.stop()
        stop_producers.set()
        crash_stop.set()
    duration = rec.now()
    for p in producers:
        p.join(90)
    say("producers stopped; draining")
    if txn is not None:
        txn_stop.set()
        if txn_thread is not None:
            txn_thread.join(10)
        txn.stop_producers()
    drained_parts: list[str] = []
    if pipelines:
        if _wait_pipeline_drained(cluster, cfg.partitions, timeout_s=120):
            drained_parts = [partition_name(QUEUE_TOPIC, p) for p in range(cfg.partitions)]
        else:
            errors.append("the exactly-once pipeline did not drain its input within 120 s"
                          + "".join(f"; {p.client_name} was at: {_where(p)}"
                                    for p in pipelines))
        stop_pipeline.set()
        for p in pipelines:
            p.join(60)
        if drained_parts:
            rec.add({"op": "drained", "process": "e0", "partitions": drained_parts})
    txn_ops: list[dict[str, Any]] = []
    if txn is not None:
        try:
            txn_ops = txn.finish()
        except Exception as e:
            errors.append(f"transactional workload could not finish: {e}")
    if share is not None:
        say("draining the share group")
        share.finish(errors)
    stop_consumers.set()
    for c in consumers:
        c.join(30)
    say("final reads")
    read_topics = {QUEUE_TOPIC: cfg.partitions}
    if pipelines:
        read_topics[EOS_TOPIC] = cfg.partitions
    if share is not None:
        read_topics[SHARE_TOPIC] = cfg.partitions
    try:
        rec.extend(final_reads(bootstrap, read_topics, rec.now, process="final-q"))
    except Exception as e:
        errors.append(f"final reads failed: {e}")
    for op in txn_ops:  # the transactional workload's own log, on the run's clock
        mono = op.pop("mono", None)
        if mono is not None:
            op["time"] = round(rec.rel(mono), 4)
    rec.extend(txn_ops)
    replicas = None
    if cfg.brokers > 1:
        compare = dict(read_topics)
        if txn is not None:
            compare[TXN_TOPIC] = cfg.partitions
        if share is not None:
            compare[SHARE_DLQ] = cfg.partitions
        say("comparing replicas")
        replicas = _compare_replicas(cluster, compare, errors)
    for c in clients:
        if c.crash:
            errors.append(f"client {c.client_name} crashed: {c.crash}")
    ops = sorted(rec.snapshot(), key=_order_key)
    client_errors: dict[str, int] = {}
    for c in clients:
        for k, v in c.errors.items():
            client_errors[k] = client_errors.get(k, 0) + v
    extra = {
        "duration_s": round(duration, 2),
        # the wall clock at the history's time 0: lines the brokers' logs up with it
        "t0_wall": round(time.time() - rec.now(), 3),
        "skipped_faults": nemesis.skipped,
        "faults_not_started": nemesis.not_started,
        "client_errors": client_errors,
        "pipeline": {"commits": sum(p.commits for p in pipelines),
                     "aborts": sum(p.aborts for p in pipelines)} if pipelines else None,
        "txn_producer_kills": txn.kills if txn else 0,
        "share": share.stats() if share else None,
        "replicas": replicas,
    }
    errors.extend(nemesis.errors)  # a fault that could not be injected or undone
    return ops, extra


def _compare_replicas(cluster: ChaosCluster, topics: dict[str, int], errors: list[str],
                      timeout_s: float = 60.0) -> dict[str, Any]:
    """Once healed, every replica of a partition must hold the same bytes below the high
    watermark (followers copy batches byte for byte and truncate what the leader does not
    have): a difference is a replication bug even if no client noticed it. A follower may
    still be catching up when the final reads end, so differences are retried until
    `timeout_s`; what still differs then is an error of the run.

    The replicas compared are each partition's replica set at the end, from Metadata, not
    the brokers that happen to have its directory: the elastic nemeses (nemeses.py) move
    partitions, and a replica removed while its broker was down keeps its directory until
    that broker deletes it. Such leftovers are listed as `stray`, not compared. A
    partition still moving (more replicas than the replication factor) is waited for."""
    from confluent_kafka import Consumer, TopicPartition

    from yak.chaos.replicas import ReplicaComparison, compare_replicas
    from yak.client.reassign_wire import ReassignClient

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "chaos-replicas",
                  "log_level": 0})
    results: dict[tuple[str, int], ReplicaComparison | str] = {}
    pending = [(t, p) for t, n in topics.items() for p in range(n)]
    stray: dict[str, list[int]] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while pending:
            sets: dict[tuple[str, int], tuple[int, ...]] = {}
            try:
                meta = ReassignClient(cluster.bootstrap, 10.0, None)
                try:
                    sets = {tp: s.replicas for tp, s in meta.cluster().partitions.items()}
                finally:
                    meta.close()
            except Exception as e:  # retried below, partition by partition
                log.info("replica sets unknown: %s", e)
            for t, p in pending:
                try:
                    hw = c.get_watermark_offsets(TopicPartition(t, p), 10)[1]
                    replicas = sets.get((t, p))
                    if replicas is None:
                        raise RuntimeError("its replica set is unknown (Metadata)")
                    if len(replicas) != cluster.spec.replication_factor:
                        raise RuntimeError(f"still moving: replicas {list(replicas)}")
                    present = {n for n in cluster.node_ids
                               if (cluster.data_dir(n) / f"{t}-{p}").is_dir()}
                    stray[f"{t}-{p}"] = sorted(present - set(replicas))
                    dirs = {n: cluster.data_dir(n) for n in replicas}
                    results[(t, p)] = compare_replicas(dirs, t, p, hw,
                                                       common_start=t in cluster.tiered_topics)
                except Exception as e:  # e.g. no leader yet: retried until the deadline
                    results[(t, p)] = f"{t}-{p}: not compared: {e}"
            pending = [k for k, r in results.items()
                       if isinstance(r, str) or not r.identical
                       or len(r.digests) < cluster.spec.replication_factor]
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(2.0)
    finally:
        c.close()
    bad = []
    for key in pending:
        r = results[key]
        if isinstance(r, str):
            bad.append(r)
        elif not r.identical:
            bad.append(r.describe())
        else:
            bad.append(f"{r.describe()}: only {len(r.digests)} replicas on disk")
    errors.extend(f"replicas differ after healing: {b}" for b in bad[:10])
    if len(bad) > 10:
        errors.append(f"replicas differ after healing: {len(bad) - 10} more partitions")
    done = [r for r in results.values() if isinstance(r, ReplicaComparison)]
    return {"partitions": len(results),
            "identical": len(results) - len(pending),
            "replicas": sum(len(r.digests) for r in done),
            "committed_bytes": sum(max((d[1] for d in r.digests.values()), default=0)
                                   for r in done),
            "differ": bad,
            "stray": {k: v for k, v in sorted(stray.items()) if v}}


def _where(th: threading.Thread) -> str:
    """The innermost frames of a thread that seems stuck (for the report's error line)."""
    import sys
    import traceback

    frame = sys._current_frames().get(th.ident or -1)
    if frame is None:
        return "(not running)"
    stack = traceback.extract_stack(frame)[-3:]
    return " < ".join(f"{Path(f.filename).name}:{f.lineno} {f.line}" for f in reversed(stack))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _order_key(op: dict[str, Any]) -> float:
    t = op.get("time")
    return float(t) if t is not None else float("inf")


def _sleep_until(rec: Recorder, t: float) -> None:
    while (left := t - rec.now()) > 0:
        time.sleep(min(left, 1.0))


def _wait_writable(rec: Recorder, producers: list[QueueProducer],
                   timeout_s: float) -> float | None:
    """Until every partition the producers write has acked a write made after now (None
    on timeout)."""
    if not producers:
        return rec.now()
    want = {partition_name(p.topic, i) for p in producers for i in range(p.partitions)}
    t0 = rec.now()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = set()
        for op in reversed(rec.snapshot()):
            t = op.get("time", 0)
            if t < t0:
                break
            if op.get("op") == "send" and op.get("status") == "ok" and "sent" in op \
                    and op["sent"] >= t0:
                seen.add(op["partition"])
        if seen >= want:
            return rec.now()
        time.sleep(0.5)
    return None


def _wait_pipeline_drained(cluster: ChaosCluster, partitions: int, timeout_s: float) -> bool:
    """The pipeline's group committed offsets reached the input's end on every partition."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "chaos-eos",
                  "isolation.level": READ_COMMITTED, "enable.auto.commit": False,
                  "log_level": 0})
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                tps = [TopicPartition(QUEUE_TOPIC, p) for p in range(partitions)]
                committed = {tp.partition: tp.offset for tp in c.committed(tps, 10)}
                ends = {p: c.get_watermark_offsets(TopicPartition(QUEUE_TOPIC, p), 10)[1]
                        for p in range(partitions)}
                if all(committed.get(p, -1) >= ends[p] for p in range(partitions)):
                    return True
            time.sleep(1.0)
        return False
    finally:
        c.close()


def _watch_crashes(cluster: ChaosCluster, rec: Recorder, nemesis: Nemesis,
                   stop: threading.Event, errors: list[str]) -> None:
    """A broker that died without the nemesis killing it is a finding: log and restart."""
    while not stop.wait(1.0):
        for n in cluster.node_ids:
            proc = cluster.brokers[n]
            if proc.is_alive() or nemesis.active:
                continue
            time.sleep(0.5)
            if proc.is_alive() or nemesis.active or stop.is_set():
                continue
            tail = proc.log_tail(5).replace("\n", " | ")[-600:]
            msg = f"broker{n} exited on its own (rc={proc.returncode()}): {tail}"
            errors.append(msg)
            rec.add({"op": "nemesis", "fault": "crash", "phase": "info",
                     "target": f"broker{n}", "detail": msg})
            with contextlib.suppress(Exception):
                cluster.start_broker(n)


def write_config(path: Path, cfg: ChaosConfig) -> None:
    path.write_text(json.dumps({k: (str(v) if isinstance(v, Path) else v)
                                for k, v in asdict(cfg).items()}, indent=2))
