"""Run one benchmark (produce, consume or e2e) and turn worker reports into a result.

The measured window opens when every worker is connected and ready and closes when the
last one finishes, so throughput is messages over the time the broker was actually busy
with them; broker CPU (when the broker runs on this machine) is read over the same window.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from yak.bench import workers
from yak.bench.meter import ProcessGroup, Window, bootstrap_port, cpu_count, find_listener_pid
from yak.bench.meter import is_local_host as _is_local
from yak.bench.spec import BenchResult, BenchSpec, BrokerUsage, Latency

Progress = Callable[[int, int], None]  # (done, total or 0 when bounded by time)
E2E_GRACE_S = 5.0  # after the last ack, how long consumers may take to see the rest


class BenchError(Exception):
    """The run could not be measured (broker unreachable, topic missing, workers died)."""


def ensure_topic(spec: BenchSpec, create: bool) -> int:
    """The topic's partition count, creating it with `spec.partitions` if asked and absent."""
    admin = AdminClient({"bootstrap.servers": spec.bootstrap, "log_level": 3})
    try:
        md = admin.list_topics(timeout=15)
    except KafkaException as e:
        raise BenchError(f"broker {spec.bootstrap} unreachable: {e}") from e
    t = md.topics.get(spec.topic)
    if t is not None and t.error is None:
        return len(t.partitions)
    if not create:
        raise BenchError(f"topic {spec.topic!r} does not exist")
    fut = admin.create_topics(
        [
            NewTopic(
                spec.topic, spec.partitions, spec.replication_factor, config=dict(spec.topic_config)
            )
        ],
        operation_timeout=30,
    )[spec.topic]
    try:
        fut.result(60)
    except KafkaException as e:
        if "UNSUPPORTED_FEATURE" in str(e):  # no CreateTopics (e.g. nafka): auto-create
            return _auto_create(spec)
        if "TOPIC_ALREADY_EXISTS" not in str(e):
            raise BenchError(f"cannot create topic {spec.topic!r}: {e}") from e
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # metadata can lag a fresh CreateTopics
        t = admin.list_topics(spec.topic, timeout=5).topics.get(spec.topic)
        if t is not None and t.error is None and len(t.partitions) == spec.partitions:
            return spec.partitions
        time.sleep(0.1)
    raise BenchError(f"topic {spec.topic!r} not visible after creation")


def _auto_create(spec: BenchSpec) -> int:
    """A producer's Metadata request for the topic creates it on auto-creating brokers."""
    p = Producer({"bootstrap.servers": spec.bootstrap, "log_level": 3})
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        t = p.list_topics(spec.topic, timeout=5).topics.get(spec.topic)
        if t is not None and t.error is None and t.partitions:
            return len(t.partitions)
        time.sleep(0.2)
    raise BenchError(f"broker has no CreateTopics and did not auto-create {spec.topic!r}")


def locate_broker(spec: BenchSpec, broker_pid: int | None) -> ProcessGroup | None:
    """The broker process to meter: the given pid, else whoever listens on the port here."""
    if broker_pid:
        return ProcessGroup(broker_pid)
    host, port = bootstrap_port(spec.bootstrap)
    if not _is_local(host):
        return None
    pid = find_listener_pid(port)
    return ProcessGroup(pid) if pid else None


def _start(procs: list[Any], ready: Any, n: int, timeout: float) -> None:
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    got = 0
    while got < n:
        try:
            ready.get(timeout=max(0.1, deadline - time.monotonic()))
            got += 1
        except queue.Empty:
            if time.monotonic() > deadline or any(p.exitcode not in (None, 0) for p in procs):
                _kill(procs)
                raise BenchError("benchmark workers failed to connect") from None


def _kill(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(5)


def _collect(
    results: Any,
    n: int,
    procs: list[Any],
    timeout: float,
    tick: Callable[[], object] | None = None,
) -> list[dict[str, Any]]:
    """Read n worker reports; reading as they come keeps big reports from blocking exits."""
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        if tick:
            tick()
        try:
            out.append(results.get(timeout=0.1))
        except queue.Empty:
            dead = sum(1 for p in procs if p.exitcode is not None and p.exitcode != 0)
            if dead or time.monotonic() > deadline:
                _kill(procs)
                raise BenchError(f"{n - len(out)} benchmark workers did not report") from None
    return out


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


def run(
    mode: str,
    spec: BenchSpec,
    broker_pid: int | None = None,
    progress: Progress | None = None,
    create_topic: bool = True,
) -> BenchResult:
    spec.validate(mode)
    partitions = ensure_topic(spec, create=create_topic and mode != "consume")
    if partitions != spec.partitions:
        spec = BenchSpec(**{**spec.__dict__, "partitions": partitions})
    broker = locate_broker(spec, broker_pid)
    ctx = mp.get_context("spawn")
    ready, start, stop, results = ctx.Queue(), ctx.Event(), ctx.Event(), ctx.Queue()
    e2e = mode == "e2e"
    n_prod = spec.producers if mode in ("produce", "e2e") else 0
    n_cons = spec.consumers if mode in ("consume", "e2e") else 0
    counts = ctx.Array("q", n_prod + n_cons, lock=False)
    procs: list[Any] = []
    quotas = _split(spec.count, n_prod) if spec.count else [0] * n_prod
    group = f"yak-bench-{uuid.uuid4().hex[:8]}"
    for i in range(n_cons):  # consumers first: e2e readers must sit at the log end
        procs.append(
            ctx.Process(
                target=workers.consume_worker,
                args=(
                    spec,
                    i,
                    n_cons,
                    group,
                    _Slot(counts, n_prod + i),
                    ready,
                    start,
                    stop,
                    results,
                    e2e,
                ),
                daemon=True,
            )
        )
    for i in range(n_prod):
        procs.append(
            ctx.Process(
                target=workers.produce_worker,
                args=(spec, i, quotas[i], _Slot(counts, i), ready, start, results, e2e),
                daemon=True,
            )
        )
    _start(procs, ready, len(procs), workers.READY_TIMEOUT_S)
    window = Window(broker)
    total = spec.count if spec.count and mode != "e2e" else 0
    window.start()
    t0 = time.monotonic()
    start.set()
    reports: list[dict[str, Any]] = []
    try:
        if e2e:
            reports = _run_e2e(spec, procs, counts, n_prod, n_cons, stop, results, progress)
        else:
            reports = _collect(
                results,
                len(procs),
                procs,
                spec.timeout_s + 30,
                lambda: progress(sum(counts), total) if progress else None,
            )
    finally:
        for p in procs:
            p.join(30)
        _kill(procs)
    window.stop(workers_cpu=sum(r["cpu_s"] for r in reports))
    # e2e runs at a set rate: its throughput is the producers' (consumers idle at the end)
    t_end = max(r["t_end"] for r in reports if not e2e or r["kind"] == "producer")
    seconds = max(1e-6, t_end - t0)
    return _result(mode, spec, reports, seconds, window, broker)


class _Slot:
    """One worker's cell of the shared counters array (picklable for spawn)."""

    def __init__(self, arr: Any, i: int) -> None:
        self.arr, self.i = arr, i

    def __setitem__(self, _idx: int, value: int) -> None:
        self.arr[self.i] = value


def _run_e2e(
    spec: BenchSpec,
    procs: list[Any],
    counts: Any,
    n_prod: int,
    n_cons: int,
    stop: Any,
    results: Any,
    progress: Progress | None,
) -> list[dict[str, Any]]:
    """Producers end by count/duration; consumers stop once they have seen every delivery."""
    reports = _collect(
        results,
        n_prod,
        procs[n_cons:],
        spec.timeout_s + 30,
        lambda: progress(sum(counts[:n_prod]), spec.count) if progress else None,
    )
    delivered = sum(r["delivered"] for r in reports if r["kind"] == "producer")
    deadline = time.monotonic() + E2E_GRACE_S
    # each consumer reads every partition it owns, so all of them together see each message once
    while time.monotonic() < deadline and sum(counts[n_prod:]) < delivered:
        time.sleep(0.01)
    time.sleep(0.1)  # let the last poll() return
    stop.set()
    reports += _collect(results, n_prod + n_cons - len(reports), procs, 30)
    return reports


def _result(
    mode: str,
    spec: BenchSpec,
    reports: list[dict[str, Any]],
    seconds: float,
    window: Window,
    broker: ProcessGroup | None,
) -> BenchResult:
    prods = [r for r in reports if r["kind"] == "producer"]
    cons = [r for r in reports if r["kind"] == "consumer"]
    notes: list[str] = []
    if mode == "produce":
        messages = sum(r["delivered"] for r in prods)
        errors = sum(r["errors"] for r in prods)
        unacked = sum(r["unacked"] for r in prods)
        if unacked:
            notes.append(f"{unacked} messages still unacknowledged at the end")
        lat = Latency.from_ns([x for r in prods for x in r["ack_ns"]])
    elif mode == "consume":
        messages = sum(r["received"] for r in cons)
        errors = sum(r["errors"] for r in cons)
        expected = sum(r["expected"] for r in cons)
        if messages < expected:
            notes.append(f"read {messages} of {expected} messages before the time limit")
        lat = None
    else:
        delivered = sum(r["delivered"] for r in prods)
        messages = sum(r["received"] for r in cons)
        errors = sum(r["errors"] for r in prods) + sum(r["errors"] for r in cons)
        if messages < delivered:
            notes.append(f"consumers saw {messages} of {delivered} delivered messages")
        lat = Latency.from_ns([x for r in cons for x in r["lat_ns"]])
        sent = sum(r["sent"] for r in prods)
        achieved = sent / seconds
        if spec.rate and achieved < 0.9 * spec.rate:
            notes.append(f"producers reached only {achieved:,.0f} of {spec.rate:,} msg/s")
    usage = None
    if broker is not None:
        usage = BrokerUsage(
            pid=broker.pid,
            cpu_s=round(window.broker_cpu, 4),
            cpu_us_per_msg=round(1e6 * window.broker_cpu / messages, 3) if messages else None,
            cpu_pct=round(100 * window.broker_cpu / window.wall, 1) if window.wall else 0.0,
            rss_mb_start=round(window.rss_start, 1),
            rss_mb_end=round(window.rss_end, 1),
        )
    else:
        notes.append("broker not local (or not found): no broker CPU figures")
    return BenchResult(
        mode=mode,
        spec=spec,
        messages=messages,
        bytes=messages * spec.message_size,
        seconds=round(seconds, 4),
        msgs_per_s=round(messages / seconds, 1),
        mb_per_s=round(messages * spec.message_size / seconds / 1e6, 2),
        errors=errors,
        latency_ms=lat,
        client_cpu_s=round(sum(r["cpu_s"] for r in reports), 3),
        broker=usage,
        other_cpu_pct=window.other_pct(),
        cpus=cpu_count(),
        notes=notes,
    )
