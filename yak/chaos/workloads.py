"""Randomized transactional workloads against a real cluster, checked by `yak.chaos.checker`.

`TxnWorkload` runs several transactional producers, each in its own process so it can be
killed with SIGKILL mid-transaction, and several read_committed consumers, for a while,
under faults; then it makes sure every transaction is decided (a new instance of every
transactional id initialises, which aborts whatever a killed one left open), reads every
partition to its end, and returns the history in the checker's format.

Every operation is logged by the process that did it, one JSON line at a time, before the
process can be killed for it:

- a producer logs `begin`; after `flush()` the delivered sends (status ok, with their
  offsets; undelivered ones are never owed); then a commit *intent* (status info) before
  `commit_transaction()` and `ok` after it. A producer killed before its intent never
  committed (its transaction is aborted at the next InitProducerId); one killed between
  the intent and the ok committed or not, and the checker decides by what readers saw.
  About `abort_ratio` of the transactions are aborted on purpose (after their data is
  flushed, so aborted data is in the log for readers to wrongly see).
- consumers log each poll with the (partition, offset, value) of every record.

Values are unique strings `<process>-<n>`, processes are named `p<i>.<incarnation>`, so a
restarted producer never reuses a value. Faults are pluggable: the built-in one kills a
random producer every `kill_every_s` and restarts it with the same transactional id; the
reliability tool (issue 16) drives the phases itself (`start`, `tick`, `stop_producers`,
`finish`) while its nemesis injects broker faults, and reuses the rest unchanged. Every
logged operation carries `mono`, the machine's monotonic clock, for its timeline.

    python -m yak.chaos.workloads --bootstrap 127.0.0.1:9092 --seconds 60
    (prints the checker's verdict as JSON; exit 1 if it found anomalies)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yak.chaos.checker import CheckResult, check

__all__ = ["TxnWorkload", "WorkloadConfig", "producer_main"]


@dataclass
class WorkloadConfig:
    bootstrap: str
    topic: str = "chaos-txn"
    partitions: int = 4
    producers: int = 3
    consumers: int = 2
    seconds: float = 60.0
    kill_every_s: float = 4.0  # 0: no producer kills
    txn_size: tuple[int, int] = (1, 8)  # records per transaction, inclusive
    abort_ratio: float = 0.2
    transaction_timeout_ms: int = 10_000
    seed: int = 1
    work_dir: str | None = None  # where the per-process logs go (a temp dir if None)
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    txn_interval_s: float = 0.0  # pause between a producer's transactions (0: none)
    topic_config: dict[str, str] | None = None  # e.g. min.insync.replicas on a cluster


@dataclass
class _Producer:
    index: int
    incarnation: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def name(self) -> str:
        return f"p{self.index}.{self.incarnation}"


@dataclass
class RunReport:
    history: list[dict[str, Any]]
    result: CheckResult
    kills: int
    elapsed_s: float
    logs: list[str] = field(default_factory=list)


class TxnWorkload:
    def __init__(self, config: WorkloadConfig,
                 faults: Callable[[TxnWorkload, float], None] | None = None) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.faults = faults
        self.work_dir = Path(config.work_dir or tempfile.mkdtemp(prefix="yak-chaos-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.producers: list[_Producer] = []
        self.kills = 0
        self._logs: list[Path] = []
        self._stop = threading.Event()
        self._consumer_logs: list[list[dict[str, Any]]] = []

    # ------------------------------------------------------------------ processes

    def txn_id(self, index: int) -> str:
        return f"{self.config.topic}-tx-{index}"

    def _start_producer(self, index: int, incarnation: int) -> _Producer:
        cfg = self.config
        name = f"p{index}.{incarnation}"
        log_path = self.work_dir / f"{name}.jsonl"
        self._logs.append(log_path)
        cmd = [
            sys.executable, "-m", "yak.chaos.workloads", "producer",
            "--bootstrap", cfg.bootstrap, "--topic", cfg.topic,
            "--partitions", str(cfg.partitions), "--txn-id", self.txn_id(index),
            "--name", name, "--log", str(log_path),
            "--txn-min", str(cfg.txn_size[0]), "--txn-max", str(cfg.txn_size[1]),
            "--abort-ratio", str(cfg.abort_ratio),
            "--transaction-timeout-ms", str(cfg.transaction_timeout_ms),
            "--txn-interval", str(cfg.txn_interval_s),
            "--seed", str(self.rng.randrange(1 << 30)),
        ]
        err = open(self.work_dir / f"{name}.stderr", "wb")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        err.close()
        return _Producer(index, incarnation, proc, log_path)

    def kill_random_producer(self) -> str:
        """SIGKILL one producer and start its next incarnation (same transactional id)."""
        victim = self.rng.choice(self.producers)
        with contextlib.suppress(ProcessLookupError):
            victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        self.kills += 1
        self.producers[self.producers.index(victim)] = self._start_producer(
            victim.index, victim.incarnation + 1)
        return victim.name

    def _consume(self, name: str, sink: list[dict[str, Any]]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        cfg = self.config
        c = Consumer({"bootstrap.servers": cfg.bootstrap, "group.id": f"chaos-{name}",
                      "isolation.level": "read_committed", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        try:
            c.assign([TopicPartition(cfg.topic, p, 0) for p in range(cfg.partitions)])
            sink.append({"op": "reset", "process": name})
            while not self._stop.is_set():
                msgs = c.consume(500, 0.5)
                records = [{"partition": f"{cfg.topic}-{m.partition()}", "offset": m.offset(),
                            "value": m.value().decode()}
                           for m in msgs if not m.error()]
                if records:
                    sink.append({"op": "poll", "process": name, "mono": time.monotonic(),
                                 "isolation": "read_committed", "records": records})
        finally:
            c.close()

    # ------------------------------------------------------------------ the run

    def run(self) -> RunReport:
        t0 = self.start()
        try:
            while (now := time.monotonic()) - t0 < self.config.seconds:
                self.tick(now - t0)
                time.sleep(0.1)
        finally:
            self.stop_producers()
        history = self.finish()
        return RunReport(history, check(history, final_reads=True), self.kills,
                         time.monotonic() - t0, [str(p) for p in self._logs])

    def start(self) -> float:
        """Create the topic, start the consumers and producers; returns the start time."""
        from confluent_kafka.admin import AdminClient, NewTopic

        cfg = self.config
        admin = AdminClient({"bootstrap.servers": cfg.bootstrap})
        fut = admin.create_topics([NewTopic(cfg.topic, cfg.partitions, cfg.replication_factor,
                                            config=dict(cfg.topic_config or {}))])[cfg.topic]
        with contextlib.suppress(Exception):  # it may exist from an earlier run
            fut.result(30)
        self._t0 = time.monotonic()
        self._threads = []
        for i in range(cfg.consumers):
            sink: list[dict[str, Any]] = []
            self._consumer_logs.append(sink)
            th = threading.Thread(target=self._consume, args=(f"c{i}", sink), daemon=True)
            th.start()
            self._threads.append(th)
        self.producers = [self._start_producer(i, 0) for i in range(cfg.producers)]
        self._next_kill = (self._t0 + cfg.kill_every_s if cfg.kill_every_s > 0
                           else float("inf"))
        return self._t0

    def tick(self, elapsed: float) -> None:
        """Call often (every ~0.1 s): producer kills on schedule, the faults callback,
        and a restart for any producer that exited on its own."""
        now = time.monotonic()
        if now >= self._next_kill:
            self.kill_random_producer()
            self._next_kill = now + self.config.kill_every_s * (0.5 + self.rng.random())
        if self.faults is not None:
            self.faults(self, elapsed)
        for p in self.producers:
            if p.proc.poll() is not None:
                self.producers[self.producers.index(p)] = self._start_producer(
                    p.index, p.incarnation + 1)

    def stop_producers(self) -> None:
        for p in self.producers:
            with contextlib.suppress(ProcessLookupError):
                p.proc.send_signal(signal.SIGKILL)
            p.proc.wait(10)

    def finish(self) -> list[dict[str, Any]]:
        """Decide every transaction, stop the consumers, read everything: the history."""
        self._decide_all()
        self._stop.set()
        for th in self._threads:
            th.join(30)
        return self._history(self._final_reads())

    def _decide_all(self) -> None:
        """A new instance of every transactional id: InitProducerId aborts what a killed
        instance left open, so every transaction is decided before the final reads."""
        from confluent_kafka import Producer

        for i in range(self.config.producers):
            p = Producer({"bootstrap.servers": self.config.bootstrap,
                          "transactional.id": self.txn_id(i)})
            p.init_transactions(60)
            p.flush(10)

    def _final_reads(self) -> list[dict[str, Any]]:
        from confluent_kafka import Consumer, TopicPartition

        cfg = self.config
        c = Consumer({"bootstrap.servers": cfg.bootstrap, "group.id": "chaos-final",
                      "isolation.level": "read_committed", "enable.partition.eof": True,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        ops: list[dict[str, Any]] = [{"op": "reset", "process": "final", "final": True,
                                      "partitions": [f"{cfg.topic}-{p}"
                                                     for p in range(cfg.partitions)]}]
        try:
            c.assign([TopicPartition(cfg.topic, p, 0) for p in range(cfg.partitions)])
            done: set[int] = set()
            deadline = time.monotonic() + 120
            while len(done) < cfg.partitions:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"final reads did not reach the end of {cfg.topic}")
                records = []
                for m in c.consume(1000, 1.0):
                    if m.error():
                        if m.error().code() == -191:  # _PARTITION_EOF
                            done.add(m.partition())
                        continue
                    done.discard(m.partition())
                    records.append({"partition": f"{cfg.topic}-{m.partition()}",
                                    "offset": m.offset(), "value": m.value().decode()})
                if records:
                    ops.append({"op": "poll", "process": "final", "mono": time.monotonic(),
                                "final": True, "isolation": "read_committed",
                                "records": records})
        finally:
            c.close()
        return ops

    def _history(self, final: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ops: list[dict[str, Any]] = []
        for path in self._logs:
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                try:
                    ops.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a line torn by the kill: nothing after it was logged
        for sink in self._consumer_logs:
            ops.extend(sink)
        ops.extend(final)
        return ops


# ---------------------------------------------------------------------- producer process


def producer_main(args: argparse.Namespace) -> None:
    """One transactional producer incarnation: transactions until it is killed."""
    from confluent_kafka import KafkaException, Producer

    rng = random.Random(args.seed)
    out = open(args.log, "a", buffering=1)  # noqa: SIM115 - line-buffered until SIGKILL

    def log(op: dict[str, Any]) -> None:
        op["mono"] = time.monotonic()
        out.write(json.dumps(op) + "\n")

    p = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": args.txn_id,
                  "transaction.timeout.ms": args.transaction_timeout_ms, "linger.ms": 2})
    p.init_transactions(60)
    n = 0
    t = 0
    while True:
        if args.txn_interval > 0:
            time.sleep(args.txn_interval)
        t += 1
        txn = f"{args.name}-t{t}"
        p.begin_transaction()
        log({"op": "txn", "process": args.name, "txn": txn, "action": "begin", "status": "ok"})
        delivered: list[dict[str, Any]] = []

        def on_delivery(err: Any, msg: Any, txn: str = txn,
                        delivered: list[dict[str, Any]] = delivered) -> None:
            if err is None:
                delivered.append({"op": "send", "process": args.name, "txn": txn,
                                  "partition": f"{msg.topic()}-{msg.partition()}",
                                  "value": msg.value().decode(), "status": "ok",
                                  "offset": msg.offset()})

        try:
            for _ in range(rng.randint(args.txn_min, args.txn_max)):
                n += 1
                p.produce(args.topic, value=f"{args.name}-{n}".encode(),
                          partition=rng.randrange(args.partitions), on_delivery=on_delivery)
            p.flush(30)
            for op in delivered:
                log(op)
            if rng.random() < args.abort_ratio:
                log({"op": "txn", "process": args.name, "txn": txn, "action": "abort",
                     "status": "info"})
                p.abort_transaction(30)
                log({"op": "txn", "process": args.name, "txn": txn, "action": "abort",
                     "status": "ok"})
                continue
            log({"op": "txn", "process": args.name, "txn": txn, "action": "commit",
                 "status": "info"})
            p.commit_transaction(30)
            log({"op": "txn", "process": args.name, "txn": txn, "action": "commit",
                 "status": "ok"})
        except KafkaException as e:
            err = e.args[0]
            if not err.txn_requires_abort():
                # fenced, or an outcome the client cannot tell: this incarnation ends and
                # the harness starts the next (whose InitProducerId decides what is open)
                out.close()
                os._exit(3)
            p.abort_transaction(30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m yak.chaos.workloads")
    sub = ap.add_subparsers(dest="cmd")
    pp = sub.add_parser("producer")
    for flag in ("--bootstrap", "--topic", "--txn-id", "--name", "--log"):
        pp.add_argument(flag, required=True)
    pp.add_argument("--partitions", type=int, required=True)
    pp.add_argument("--txn-min", type=int, default=1)
    pp.add_argument("--txn-max", type=int, default=8)
    pp.add_argument("--abort-ratio", type=float, default=0.2)
    pp.add_argument("--transaction-timeout-ms", type=int, default=10_000)
    pp.add_argument("--txn-interval", type=float, default=0.0)
    pp.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="chaos-txn")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--kill-every", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.cmd == "producer":
        producer_main(args)
        return 0
    report = TxnWorkload(WorkloadConfig(
        args.bootstrap, args.topic, args.partitions, args.producers, args.consumers,
        args.seconds, args.kill_every, seed=args.seed)).run()
    print(json.dumps({"kills": report.kills, "elapsed_s": round(report.elapsed_s, 1),
                      **report.result.to_dict()}, indent=2))
    return 0 if not report.result.failures(allowed={"G0"}) else 1


if __name__ == "__main__":
    sys.exit(main())
