"""Jepsen's Kafka "queue" workload, its consumers, and an exactly-once pipeline.

Each client is a thread of the chaos run with its own librdkafka instance, logging to the
run's `Recorder` in the checker's format (yak/chaos/checker.py):

- `QueueProducer`: an idempotent (enable.idempotence, acks=all) producer sending unique
  values `<name>-<n>` at a steady rate, round robin over the partitions. Each delivery
  report becomes a `send` with the acked offset, the send time (`sent`) and the ack time;
  an error is status `info` (a timed-out idempotent send may still be in the log, so it is
  not owed, but it may be read). A fatal idempotence error ends the incarnation; the next
  is a new producer id and a new process name, so order checks never span the two.
- `QueueConsumer`: `assign` (every partition from the beginning, no group) or `subscribe`
  (a consumer group with automatic commits; each assignment and revocation is a `reset`,
  since the position moves to the group's committed offset), read_committed or
  read_uncommitted.
- `Pipeline` (yak/chaos/pipeline.py): the exactly-once consume-transform-produce loop.
- `final_reads`: after the faults stopped, one consumer reads every partition to its end.

Rates are low on purpose (Jepsen's queue workload is about correctness, not load): the
history of a 30-minute run must fit in memory and in a checker run of seconds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from yak.chaos.history import Recorder

__all__ = [
    "ConsumerSpec",
    "QueueConsumer",
    "QueueProducer",
    "final_reads",
    "partition_name",
]

log = logging.getLogger(__name__)

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


def partition_name(topic: str, partition: int) -> str:
    """How partitions are named in the history (Jepsen's style: topic-partition)."""
    return f"{topic}-{partition}"


def _client_conf(bootstrap: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        # Faults make brokers vanish and return on the same address: reconnect quickly,
        # and refresh metadata soon after a leader moves.
        "reconnect.backoff.max.ms": 1000,
        "topic.metadata.refresh.interval.ms": 5000,
        "log_level": 3,  # errors only: a chaos run makes librdkafka very talkative
    }
    conf.update(extra or {})
    return conf


def _debug_conf(process: str) -> dict[str, Any]:
    """librdkafka debug logging for a queue producer or the pipeline's consumer, when
    YAK_CHAOS_CLIENT_DEBUG names contexts (e.g. "eos,msg"; "cgrp" for the consumer's
    group protocol) and YAK_CHAOS_CLIENT_LOG_DIR a directory: one log file per producer
    incarnation or consumer. For diagnosing a finding (why the client bumped its epoch, what
    each Produce answered); off by default, as it is very talkative."""
    contexts = os.environ.get("YAK_CHAOS_CLIENT_DEBUG")
    directory = os.environ.get("YAK_CHAOS_CLIENT_LOG_DIR")
    if not contexts or not directory:
        return {}
    logger = logging.getLogger(f"yak.chaos.client.{process}")
    logger.propagate = False
    if not logger.handlers:
        handler = logging.FileHandler(os.path.join(directory, f"{process}.log"))
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    return {"debug": contexts, "log_level": 7, "logger": logger}


class _Client(threading.Thread):
    def __init__(self, name: str, rec: Recorder, stop: threading.Event) -> None:
        super().__init__(name=f"chaos-{name}", daemon=True)
        self.client_name = name
        self.rec = rec
        self.stop_event = stop
        self.errors: dict[str, int] = {}
        self.crash: str | None = None  # an unexpected exception ends the thread: reported

    def count_error(self, err: Any) -> None:
        key = err.name() if hasattr(err, "name") else str(err)
        self.errors[key] = self.errors.get(key, 0) + 1

    def run(self) -> None:
        try:
            self.body()
        except Exception as e:  # the run reports it; a silent dead client would hide faults
            log.exception("chaos client %s crashed", self.client_name)
            self.crash = f"{type(e).__name__}: {e}"

    def body(self) -> None:
        raise NotImplementedError


class QueueProducer(_Client):
    """Unique values at `rate` per second, acks=all with idempotence."""

    def __init__(self, name: str, rec: Recorder, stop: threading.Event, *, bootstrap: str,
                 topic: str, partitions: int, rate: float, seed: int,
                 message_timeout_ms: int = 120_000, drain_s: float = 60.0) -> None:
        super().__init__(name, rec, stop)
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.rng = random.Random(seed)
        self.message_timeout_ms = message_timeout_ms
        self.drain_s = drain_s
        self.incarnation = 0
        self.sent = 0
        self.acked = 0
        self.pending = 0

    def body(self) -> None:
        while not self.stop_event.is_set():
            self._incarnation()
            self.incarnation += 1

    def _incarnation(self) -> None:
        from confluent_kafka import KafkaException, Producer

        process = f"{self.client_name}.{self.incarnation}"
        fatal: list[Any] = []

        def on_error(err: Any) -> None:
            self.count_error(err)
            if err.fatal():
                fatal.append(err)

        p = Producer(_client_conf(self.bootstrap, {
            **_debug_conf(process),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": self.message_timeout_ms,
            "request.timeout.ms": 10_000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "error_cb": on_error,
        }))
        try:
            self._loop(p, process, fatal)
        except KafkaException as e:  # poll() raises a fatal error (e.g. after an unclean
            fatal.append(e.args[0])  # election the leader lacks the producer's sequences)
        if fatal:
            # A fatal idempotence error (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER) is a finding
            # worth a line in the report; the next incarnation carries on.
            self.rec.add({"op": "nemesis", "process": process, "fault": "client",
                          "phase": "info", "detail": f"producer fatal error: {fatal[0]}"})
            with contextlib.suppress(KafkaException):
                p.purge()
                p.flush(5)
            return
        with contextlib.suppress(KafkaException):
            if p.flush(self.drain_s):
                p.purge()  # never acknowledged: their delivery reports say so (status info)
                p.flush(5)

    def _loop(self, p: Any, process: str, fatal: list[Any]) -> None:
        from confluent_kafka import KafkaException

        interval = 1.0 / self.rate
        next_at = time.monotonic()
        n = 0
        part = self.rng.randrange(self.partitions)
        while not self.stop_event.is_set() and not fatal:
            now = time.monotonic()
            if now < next_at:
                p.poll(min(0.05, next_at - now))
                continue
            next_at = max(next_at + interval, now - 1.0)  # no burst after a long stall
            value = f"{process}-{n}"
            try:
                p.produce(self.topic, value=value.encode(), partition=part,
                          on_delivery=self._on_delivery(process, value, self.rec.now()))
            except BufferError:  # the local queue is full (a long outage): wait
                p.poll(0.1)
                continue
            except KafkaException as e:  # the producer is in a fatal state
                fatal.append(e.args[0])
                break
            n += 1
            self.sent += 1
            self.pending += 1
            part = (part + 1) % self.partitions
            p.poll(0)

    def _on_delivery(self, process: str, value: str, sent: float) -> Callable[[Any, Any], None]:
        rec = self.rec
        topic = self.topic

        def cb(err: Any, msg: Any) -> None:
            self.pending -= 1
            op: dict[str, Any] = {"op": "send", "process": process,
                                  "partition": partition_name(topic, msg.partition()),
                                  "value": value, "sent": round(sent, 4)}
            if err is None:
                self.acked += 1
                op["status"] = "ok"
                op["offset"] = msg.offset()
            else:
                self.count_error(err)
                op["status"] = "info"
                op["error"] = err.name()
            rec.add(op)

        return cb


@dataclass(frozen=True)
class ConsumerSpec:
    mode: str  # "assign" | "subscribe"
    isolation: str = READ_COMMITTED
    group: str | None = None  # subscribe: the group (members of one group share it)

    def __post_init__(self) -> None:
        if self.mode not in ("assign", "subscribe"):
            raise ValueError(f"consumer mode {self.mode!r} (assign or subscribe)")
        if self.isolation not in (READ_COMMITTED, READ_UNCOMMITTED):
            raise ValueError(f"isolation {self.isolation!r}")


class QueueConsumer(_Client):
    """Reads the topic for the whole run, logging every poll."""

    def __init__(self, name: str, rec: Recorder, stop: threading.Event, *, bootstrap: str,
                 topic: str, partitions: int, spec: ConsumerSpec,
                 session_timeout_ms: int = 10_000) -> None:
        super().__init__(name, rec, stop)
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.spec = spec
        self.session_timeout_ms = session_timeout_ms
        self.records = 0

    def body(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        spec = self.spec
        name = self.client_name
        group = spec.group or f"chaos-{name}"
        c = Consumer(_client_conf(self.bootstrap, {
            "group.id": group,
            "isolation.level": spec.isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": spec.mode == "subscribe",
            "auto.commit.interval.ms": 1000,
            "session.timeout.ms": self.session_timeout_ms,
            "heartbeat.interval.ms": max(1000, self.session_timeout_ms // 5),
            "error_cb": self.count_error,
        }))
        topic = self.topic

        def moved(_c: Any, parts: list[Any]) -> None:
            self.rec.add({"op": "reset", "process": name,
                          "partitions": [partition_name(topic, tp.partition) for tp in parts]})

        try:
            if spec.mode == "assign":
                c.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                          for p in range(self.partitions)])
                self.rec.add({"op": "reset", "process": name})
            else:
                c.subscribe([topic], on_assign=moved, on_revoke=moved, on_lost=moved)
            while not self.stop_event.is_set():
                msgs = c.consume(500, 0.5)
                records = []
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        self.count_error(err)
                        continue
                    records.append([partition_name(topic, m.partition()), m.offset(),
                                    m.value().decode()])
                if records:
                    self.records += len(records)
                    self.rec.add({"op": "poll", "process": name,
                                  "isolation": spec.isolation, "records": records})
        finally:
            c.close()


def final_reads(bootstrap: str, topics: dict[str, int], clock: Callable[[], float], *,
                process: str = "final", isolation: str = READ_COMMITTED,
                timeout_s: float = 180.0) -> list[dict[str, Any]]:
    """Read every partition of `topics` ({name: partitions}) from the beginning to its
    end (the high watermark, or the last stable offset read_committed); returns the ops.
    Raises TimeoutError if the end is not reached in time (the run reports that)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(_client_conf(bootstrap, {
        "group.id": f"chaos-{process}", "isolation.level": isolation,
        "enable.partition.eof": True, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "fetch.max.bytes": 8 << 20,
    }))
    tps = [TopicPartition(t, p, OFFSET_BEGINNING) for t, n in topics.items() for p in range(n)]
    # "final": the checker holds every acked value of these partitions to these reads
    ops: list[dict[str, Any]] = [{"op": "reset", "process": process, "time": clock(),
                                  "final": True, "partitions": [
                                      partition_name(tp.topic, tp.partition) for tp in tps]}]
    try:
        c.assign(tps)
        pending = {(tp.topic, tp.partition) for tp in tps}
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError("final reads did not reach the end of "
                                   + ", ".join(f"{t}-{p}" for t, p in sorted(pending)))
            records = []
            for m in c.consume(2000, 1.0):
                err = m.error()
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF
                        pending.discard((m.topic(), m.partition()))
                    continue
                pending.add((m.topic(), m.partition()))
                records.append([partition_name(m.topic(), m.partition()), m.offset(),
                                m.value().decode()])
            if records:
                ops.append({"op": "poll", "process": process, "isolation": isolation,
                            "final": True, "records": records, "time": clock()})
    finally:
        c.close()
    return ops
