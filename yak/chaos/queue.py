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
- `Pipeline`: consume-transform-produce with a transactional producer and
  `send_offsets_to_transaction`: each output value names its input (`source`) and is
  unique per attempt, so the checker can count how many committed outputs each input got.
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
    "Pipeline",
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
    """librdkafka debug logging for a queue producer, when YAK_CHAOS_CLIENT_DEBUG names
    contexts (e.g. "eos,msg") and YAK_CHAOS_CLIENT_LOG_DIR a directory: one log file per
    producer incarnation. For diagnosing a finding (why the client bumped its epoch, what
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


class _Stuck(Exception):
    """A client call that did not return long after its own timeout."""


def _bounded(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Run a blocking client call in a daemon thread and give up on it after `timeout_s`.

    Why: librdkafka 2.16's `send_offsets_to_transaction` can block far past its timeout
    when the group coordinator moves (confluentinc/librdkafka #5456, #5511; the 30-minute
    run's pipeline stayed inside it to the end). An application replaces such a worker;
    so does the pipeline: the stuck call keeps its (daemon) thread and its producer, which
    the next incarnation's InitProducerId fences."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=run, name=f"chaos-call-{what}", daemon=True).start()
    if not done.wait(timeout_s):
        raise _Stuck(f"{what} still blocked after {timeout_s:.0f} s")
    if "error" in box:
        raise box["error"]
    return box.get("result")


# A transactional call's own timeout is 30 s; one still blocked this long is stuck.
STUCK_AFTER_S = 90.0


class Pipeline(_Client):
    """Consume-transform-produce, exactly once: read `input_topic` (read_committed, in a
    group), write each value transformed to `output_topic` in a transaction that also
    commits the consumed offsets (KIP-98/KIP-447 `send_offsets_to_transaction`)."""

    def __init__(self, name: str, rec: Recorder, stop: threading.Event, *, bootstrap: str,
                 input_topic: str, output_topic: str, output_partitions: int,
                 group: str = "chaos-eos", transaction_timeout_ms: int = 20_000,
                 abort_ratio: float = 0.1, seed: int = 1) -> None:
        super().__init__(name, rec, stop)
        self.bootstrap = bootstrap
        self.input_topic = input_topic
        self.output_topic = output_topic
        self.output_partitions = output_partitions
        self.group = group
        self.transaction_timeout_ms = transaction_timeout_ms
        self.abort_ratio = abort_ratio
        self.rng = random.Random(seed)
        self.commits = 0
        self.aborts = 0
        self.incarnation = 0
        self.txn_seq = 0

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        p = Producer(_client_conf(self.bootstrap, {
            "transactional.id": f"{self.group}-{self.client_name}",
            "transaction.timeout.ms": self.transaction_timeout_ms,
            "linger.ms": 5,
            "error_cb": self.count_error,
        }))
        p.init_transactions(60)
        return p

    def body(self) -> None:
        from confluent_kafka import Consumer

        name = self.client_name
        c = Consumer(_client_conf(self.bootstrap, {
            "group.id": self.group,
            "isolation.level": READ_COMMITTED,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 2000,
            "error_cb": self.count_error,
        }))
        topic = self.input_topic

        def moved(_c: Any, parts: list[Any]) -> None:
            self.rec.add({"op": "reset", "process": name,
                          "partitions": [partition_name(topic, tp.partition) for tp in parts]})

        try:
            c.subscribe([topic], on_assign=moved, on_revoke=moved, on_lost=moved)
            p = None
            while not self.stop_event.is_set():
                if p is None:
                    try:
                        p = self._producer()
                    except Exception as e:
                        self.count_error(e)
                        time.sleep(1.0)
                        continue
                msgs = [m for m in c.consume(200, 0.5) if m.error() is None]
                if not msgs:
                    continue
                ok = self._transaction(c, p, msgs)
                if ok is None:  # the producer is unusable: a new incarnation fences it
                    with contextlib.suppress(Exception):
                        p.flush(1)
                    p = None
                    self.incarnation += 1
                    # Fence before the rewind: the new incarnation's InitProducerId makes
                    # the coordinator abort the old one's open transaction, which settles
                    # its pending TxnOffsetCommit. Until then OffsetFetch (require_stable)
                    # answers UNSTABLE_OFFSET_COMMIT, and the rewind below would wait for
                    # the coordinator's own timeout abort (run E: about 3.5 minutes).
                    try:
                        p = self._producer()
                    except Exception as e:
                        self.count_error(e)
                if not ok:
                    self._rewind(c)
        finally:
            c.close()

    def _transaction(self, c: Any, p: Any, msgs: list[Any]) -> bool | None:
        """True committed; False aborted (rewind); None: the producer must be replaced."""
        from confluent_kafka import KafkaException

        name = f"{self.client_name}.{self.incarnation}"
        self.txn_seq += 1
        key = f"{name}-t{self.txn_seq}"
        rec = self.rec
        delivered: list[dict[str, Any]] = []
        try:
            p.begin_transaction()
            rec.add({"op": "txn", "process": name, "txn": key, "action": "begin",
                     "status": "ok"})
            rec.add({"op": "poll", "process": self.client_name, "isolation": READ_COMMITTED,
                     "txn": key,
                     "records": [[partition_name(self.input_topic, m.partition()), m.offset(),
                                  m.value().decode()] for m in msgs]})
            for m in msgs:
                src = m.value().decode()
                out = f"{src}>{key}"
                at = [partition_name(self.input_topic, m.partition()), m.offset()]

                def cb(err: Any, msg: Any, src: str = src, out: str = out,
                       at: list[Any] = at) -> None:
                    if err is None:
                        delivered.append({
                            "op": "send", "process": name, "txn": key, "source": src,
                            "source_at": at,
                            "partition": partition_name(self.output_topic, msg.partition()),
                            "value": out, "status": "ok", "offset": msg.offset()})

                p.produce(self.output_topic, value=out.encode(),
                          partition=m.partition() % self.output_partitions, on_delivery=cb)
            p.flush(30)
            for op in delivered:
                rec.add(op)
            positions = c.position(c.assignment())
            group = c.consumer_group_metadata()
            _bounded(lambda: p.send_offsets_to_transaction(positions, group, 30),
                     STUCK_AFTER_S, "send_offsets_to_transaction")
            if self.rng.random() < self.abort_ratio:
                _bounded(lambda: p.abort_transaction(30), STUCK_AFTER_S, "abort_transaction")
                self.aborts += 1
                rec.add({"op": "txn", "process": name, "txn": key, "action": "abort",
                         "status": "ok"})
                return False
            rec.add({"op": "txn", "process": name, "txn": key, "action": "commit",
                     "status": "info"})
            _bounded(lambda: p.commit_transaction(30), STUCK_AFTER_S, "commit_transaction")
            self.commits += 1
            rec.add({"op": "txn", "process": name, "txn": key, "action": "commit",
                     "status": "ok"})
            return True
        except _Stuck as e:
            # Replace the producer (the next incarnation fences this one); the report
            # names the call, and an unknown commit is decided by what readers saw.
            self.count_error(e)
            rec.add({"op": "nemesis", "process": name, "fault": "client", "phase": "info",
                     "detail": f"pipeline producer replaced: {e} (librdkafka #5456/#5511)"})
            return None
        except KafkaException as e:
            err = e.args[0]
            self.count_error(err)
            if err.txn_requires_abort():
                try:
                    p.abort_transaction(30)
                    rec.add({"op": "txn", "process": name, "txn": key, "action": "abort",
                             "status": "ok"})
                    return False
                except KafkaException as e2:
                    self.count_error(e2.args[0])
                    return None
            # Fenced, fatal, or a commit whose outcome is unknown: the next incarnation's
            # InitProducerId finishes or aborts what is open, and the checker decides an
            # unknown commit by what readers saw.
            return None

    def _diagnose_committed(self, assignment: list[Any], failures: int) -> None:
        """Record what the coordinator answers an OffsetFetch with require_stable, error
        codes included: librdkafka's `committed()` retries UNSTABLE_OFFSET_COMMIT and
        coordinator errors internally and reports only "Timed out", so run E could not
        tell why the pipeline's rewind failed 27 times in a row for 14 minutes (the
        transaction in the way had been aborted after the first 3.5 of them)."""
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka.admin import AdminClient

        detail: dict[str, Any] = {"failures": failures}
        try:
            admin = AdminClient(_client_conf(self.bootstrap))
            request = ConsumerGroupTopicPartitions(self.group, list(assignment))
            fut = admin.list_consumer_group_offsets([request], require_stable=True,
                                                    request_timeout=10)[self.group]
            answer = fut.result(timeout=15)
            detail["partitions"] = {
                f"{tp.topic}-{tp.partition}": (tp.error.name() if tp.error else tp.offset)
                for tp in answer.topic_partitions}
        except Exception as e:  # noqa: BLE001 - the answer is what we record
            err = e.args[0] if e.args else e
            detail["error"] = err.name() if hasattr(err, "name") else f"{type(e).__name__}: {e}"
        self.rec.add({"op": "nemesis", "process": self.client_name, "fault": "client",
                      "phase": "info", "detail": f"rewind blocked: {detail}"})

    def _rewind(self, c: Any) -> None:
        """After an abort, or a producer given up, the consumed offsets were not
        committed: go back to the group's committed positions (Kafka's EOS loop does the
        same) before consuming again.

        Why it retries: reading the committed offsets fails while the group's coordinator
        moves (NOT_COORDINATOR from librdkafka's `committed()`), and consuming on from the
        current position would skip the inputs of the transaction that did not commit.
        The 30-minute run of 2026-11-26 did exactly that once (58 inputs without output).
        A partition answered with an error counts as a failure too: its offset is not the
        group's."""
        from confluent_kafka import OFFSET_INVALID, TopicPartition

        failures = 0
        while True:
            assignment = c.assignment()
            if not assignment:
                return  # nothing is owned: the next assignment starts at the group's offsets
            try:
                committed = c.committed(assignment, 30)
                failed = [tp.error for tp in committed if tp.error is not None]
                if failed:
                    raise RuntimeError(f"committed offsets: {failed[0]}")
                for tp in committed:
                    off = tp.offset if tp.offset != OFFSET_INVALID else 0
                    c.seek(TopicPartition(tp.topic, tp.partition, off))
                break
            except Exception as e:
                self.count_error(e)
                if self.stop_event.is_set():
                    return  # stopping: nothing more is consumed from the stale position
                time.sleep(REWIND_RETRY_S)
                failures += 1
                if failures % REWIND_DIAGNOSE_EVERY == 0:
                    self._diagnose_committed(assignment, failures)
        self.rec.add({"op": "reset", "process": self.client_name,
                      "partitions": [partition_name(tp.topic, tp.partition)
                                     for tp in committed]})


# Pause between attempts to read the group's committed offsets for a rewind.
REWIND_RETRY_S = 1.0
# After this many failed attempts in a row, ask the group's coordinator directly why.
REWIND_DIAGNOSE_EVERY = 3


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
