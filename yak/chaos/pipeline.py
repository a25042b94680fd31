"""The exactly-once pipeline of a chaos run: consume-transform-produce with a
transactional producer and `send_offsets_to_transaction` (KIP-98/KIP-447). Each output
value names its input (`source`) and is unique per attempt, so the checker can count how
many committed outputs each input got.

Most of this module is the workarounds a long run needs around librdkafka's transactional
and group calls, each bounded so that the pipeline never waits for ever: transactional
calls run in a daemon thread (`_bounded`), a stuck producer is replaced (its successor's
InitProducerId fences it), and a rewind that cannot read the group's committed offsets
replaces the consumer. Each replacement is recorded in the history (`fault: client`).
Split from yak/chaos/queue.py (the queue workload and its consumers), which it builds on.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from yak.chaos.history import Recorder
from yak.chaos.queue import READ_COMMITTED, _Client, _client_conf, _debug_conf, partition_name

__all__ = ["Pipeline"]


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
        self.consumers = 0  # consumers made so far (a stuck one is replaced)

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

    def _consumer(self) -> Any:
        """A new member of the pipeline's group, subscribed to the input: whatever it is
        assigned starts at the group's committed offsets (read_committed: require_stable)."""
        from confluent_kafka import Consumer

        name = self.client_name
        self.consumers += 1
        c = Consumer(_client_conf(self.bootstrap, {
            **_debug_conf(f"{name}-consumer{self.consumers}"),  # why a rewind stuck
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

        c.subscribe([topic], on_assign=moved, on_revoke=moved, on_lost=moved)
        return c

    def _replace_consumer(self, c: Any, failures: int) -> Any:
        """Give up on a consumer whose rewind could not read the committed offsets
        `failures` times in a row, and join the group with a new one.

        Why: in runs E and F the rewind's `committed()` timed out for the rest of the run
        (14 and 23 minutes) while the group's coordinator had loaded its partition again
        and again from a log with no transaction open, so a fresh OffsetFetch had nothing
        to wait for: the stuck side was, most likely (inferred, docs/reliability.md), this
        librdkafka consumer, whose member had also expired and never joined again. A new member's
        assignment starts at the group's committed offsets, which is what the rewind was
        for; if the coordinator itself would not answer, the new member waits the same way
        and the run still reports the undrained input. The old consumer is closed in a
        daemon thread, bounded: its close can block on the same coordinator."""
        self.count_error(RuntimeError("pipeline consumer replaced"))
        self.rec.add({"op": "nemesis", "process": self.client_name, "fault": "client",
                      "phase": "info",
                      "detail": f"pipeline consumer replaced: committed() failed {failures}"
                                " times in a row while rewinding"})
        with contextlib.suppress(Exception):
            _bounded(c.close, CLOSE_BOUND_S, "consumer close")
        return self._consumer()

    def body(self) -> None:
        c = self._consumer()
        try:
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
                if not ok and not self._rewind(c):
                    c = self._replace_consumer(c, REWIND_REPLACE_AFTER)
        finally:
            with contextlib.suppress(Exception):
                _bounded(c.close, CLOSE_BOUND_S, "consumer close")

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
                at = [partition_name(self.input_topic, m.partition()), m.offset()]
                out = output_value(src, at, key)

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
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        from confluent_kafka.admin import AdminClient

        detail: dict[str, Any] = {"failures": failures}
        try:
            admin = AdminClient(_client_conf(self.bootstrap))
            # without offsets: the admin client refuses a partition that has one (runs E
            # and F recorded only "must not have 'offset' value" because of that)
            request = ConsumerGroupTopicPartitions(
                self.group, [TopicPartition(tp.topic, tp.partition) for tp in assignment])
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

    def _rewind(self, c: Any) -> bool:
        """After an abort, or a producer given up, the consumed offsets were not
        committed: go back to the group's committed positions (Kafka's EOS loop does the
        same) before consuming again. False: `REWIND_REPLACE_AFTER` attempts in a row
        failed, and the caller replaces the consumer (it must not consume on from here).

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
                return True  # nothing owned: the next assignment starts at the group's offsets
            try:
                committed = c.committed(assignment, REWIND_COMMITTED_TIMEOUT_S)
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
                    return True  # stopping: nothing more is consumed from the stale position
                time.sleep(REWIND_RETRY_S)
                failures += 1
                if failures % REWIND_DIAGNOSE_EVERY == 0:
                    self._diagnose_committed(assignment, failures)
                if failures >= REWIND_REPLACE_AFTER:
                    return False
        self.rec.add({"op": "reset", "process": self.client_name,
                      "partitions": [partition_name(tp.topic, tp.partition)
                                     for tp in committed]})
        return True


def output_value(source: str, at: list[Any], txn: str) -> str:
    """The value a pipeline transaction `txn` writes for the input `source` read at `at`
    (partition, offset). The input's position is part of it: the input topic may hold one
    value twice (an idempotent producer resends what it still holds after a message timed
    out in flight: `duplicate_after_client_timeout`, checker_reads.py), and one transaction
    may copy both, while every value
    the history records as sent must be unique (a saturated no-fault run's checker stopped
    on "sent twice", 2026-11-27)."""
    return f"{source}@{at[0]}:{at[1]}>{txn}"


# One attempt to read the group's committed offsets for a rewind (librdkafka's timeout):
# far above a coordinator's move (a 6 s broker session, then a load), and short enough
# that a consumer stuck late in a run is replaced within the runner's 120 s drain.
REWIND_COMMITTED_TIMEOUT_S = 15.0
# Pause between attempts to read the group's committed offsets for a rewind.
REWIND_RETRY_S = 1.0
# After this many failed attempts in a row, ask the group's coordinator directly why.
REWIND_DIAGNOSE_EVERY = 3
# After this many (each up to REWIND_COMMITTED_TIMEOUT_S), replace the consumer: a new member's assignment
# starts at the committed offsets (`Pipeline._replace_consumer` says why).
REWIND_REPLACE_AFTER = 3
# The bound on closing a consumer (its close can wait on an unreachable coordinator).
CLOSE_BOUND_S = 30.0
