"""The pipeline's rewind after a transaction that did not commit (aborted, or its producer
given up): it must land on the group's committed offsets before consuming again. In the
30-minute run of 2026-11-26 librdkafka's `committed()` failed once with NOT_COORDINATOR
(the group's coordinator was being bounced), the rewind gave up, and the pipeline consumed
on from its position: 58 inputs were never transformed (`lost_write` in the checker).

Unit tests of the workload's own retry logic: the consumer is a stand-in that fails the
way librdkafka did (once, or for good: then the consumer is replaced). The diagnosis of a
blocked rewind is tested over the wire against a real broker."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from yak.chaos import pipeline as queue
from yak.chaos.history import Recorder
from yak.chaos.pipeline import Pipeline


class FlakyCommittedConsumer:
    """Owns two partitions; `committed()` fails `failures` times, then answers."""

    def __init__(self, failures: list[Any]) -> None:
        self.failures = list(failures)
        self.committed_offsets = {0: 40916, 1: 40917}
        self.position = {0: 40932, 1: 40933}  # past the inputs of the failed transaction
        self.calls = 0

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition("chaos-queue", p) for p in self.committed_offsets]

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.calls += 1
        if self.failures:
            failure = self.failures.pop(0)
            if isinstance(failure, Exception):
                raise failure
            return failure
        return [TopicPartition(tp.topic, tp.partition, self.committed_offsets[tp.partition])
                for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        self.position[tp.partition] = tp.offset


def _pipeline(stop: threading.Event | None = None) -> tuple[Pipeline, Recorder]:
    rec = Recorder()
    p = Pipeline("e0", rec, stop or threading.Event(), bootstrap="127.0.0.1:1",
                 input_topic="chaos-queue", output_topic="chaos-eos-out",
                 output_partitions=2)
    return p, rec


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue, "REWIND_RETRY_S", 0.01)


def _not_coordinator() -> KafkaException:
    return KafkaException(KafkaError(KafkaError.NOT_COORDINATOR,
                                     "Failed to get committed offsets: Broker: Not coordinator"))


def test_a_failed_read_of_the_committed_offsets_is_retried_until_the_rewind_lands() -> None:
    pipeline, rec = _pipeline()
    c = FlakyCommittedConsumer([_not_coordinator(), _not_coordinator()])
    pipeline._rewind(c)
    assert c.position == {0: 40916, 1: 40917}
    assert c.calls == 3
    assert sum(pipeline.errors.values()) == 2
    assert all("NOT_COORDINATOR" in key for key in pipeline.errors)
    assert [op["op"] for op in rec.snapshot()] == ["reset"]


def test_a_partition_answered_with_an_error_is_not_taken_as_its_offset() -> None:
    pipeline, _ = _pipeline()
    # librdkafka's answer for a partition whose offset it could not fetch
    bad = SimpleNamespace(topic="chaos-queue", partition=0, offset=-1001,
                          error=KafkaError(KafkaError.NOT_COORDINATOR))
    good = SimpleNamespace(topic="chaos-queue", partition=1, offset=40917, error=None)
    c = FlakyCommittedConsumer([[bad, good]])
    pipeline._rewind(c)
    assert c.position == {0: 40916, 1: 40917}  # not 0 (OFFSET_INVALID) for partition 0
    assert c.calls == 2


def test_a_stopping_pipeline_gives_up_without_consuming_from_the_stale_position() -> None:
    stop = threading.Event()
    stop.set()
    pipeline, rec = _pipeline(stop)
    c = FlakyCommittedConsumer([_not_coordinator()])
    pipeline._rewind(c)
    assert c.position == {0: 40932, 1: 40933}
    assert rec.snapshot() == []


class StuckCommittedConsumer(FlakyCommittedConsumer):
    """`committed()` times out every time, as the pipeline's consumer did in runs E and F
    (for 14 and 23 minutes); `close()` is recorded."""

    def __init__(self) -> None:
        super().__init__([])
        self.closed = False

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.calls += 1
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                        "Failed to get committed offsets: Local: Timed out"))

    def close(self) -> None:
        self.closed = True


def test_a_rewind_that_never_reads_the_committed_offsets_gives_the_consumer_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline, rec = _pipeline()
    diagnosed: list[int] = []
    monkeypatch.setattr(pipeline, "_diagnose_committed",
                        lambda _assignment, failures: diagnosed.append(failures))
    c = StuckCommittedConsumer()
    assert pipeline._rewind(c) is False
    assert c.calls == queue.REWIND_REPLACE_AFTER  # bounded, not for the rest of the run
    assert diagnosed == [queue.REWIND_DIAGNOSE_EVERY]  # the coordinator's answer first
    assert c.position == {0: 40932, 1: 40933}  # never consumed on from the stale position
    assert rec.snapshot() == []  # no "reset": it did not land


def test_a_given_up_consumer_is_closed_and_a_new_member_joins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline, rec = _pipeline()
    fresh = object()
    monkeypatch.setattr(pipeline, "_consumer", lambda: fresh)
    old = StuckCommittedConsumer()
    assert pipeline._replace_consumer(old, 3) is fresh
    assert old.closed
    [op] = rec.snapshot()
    assert op["fault"] == "client" and "pipeline consumer replaced" in op["detail"]


def test_the_diagnosis_reads_the_coordinator_answer_for_an_assignment_with_offsets(
        broker: Any) -> None:
    """The diagnosis asks the group's coordinator (OffsetFetch, require_stable) over the
    wire. It is given the consumer's assignment, whose partitions carry offsets; in runs E
    and F the admin client refused those ("must not have 'offset' value"), so 45 diagnoses
    recorded nothing about the coordinator."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # held until it answers
    admin.create_topics([NewTopic("chaos-queue", 2, 1)])["chaos-queue"].result(15)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "chaos-eos",
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("chaos-queue", 0, 7)], asynchronous=False)
    finally:
        c.close()
    rec = Recorder()
    pipeline = Pipeline("e0", rec, threading.Event(), bootstrap=broker.bootstrap,
                        input_topic="chaos-queue", output_topic="chaos-eos-out",
                        output_partitions=2)
    assignment = [TopicPartition("chaos-queue", 0, -1001), TopicPartition("chaos-queue", 1, 5)]
    pipeline._diagnose_committed(assignment, 3)
    [op] = rec.snapshot()
    assert "'partitions': {'chaos-queue-0': 7, 'chaos-queue-1': -1001}" in op["detail"], op


def test_a_replaced_consumer_starts_at_the_committed_offsets_once_they_are_stable(
        broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the wire: a transaction of another producer holds the group's offset of
    chaos-queue-0 pending, so the rewind's `committed()` (require_stable) times out. The
    diagnosis records the coordinator's UNSTABLE_OFFSET_COMMIT; after
    REWIND_REPLACE_AFTER attempts the pipeline gives the consumer up. Once that
    transaction is aborted, the new member reads chaos-queue-0 from the start: the offset
    staged in the aborted transaction never counts."""
    import time

    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    monkeypatch.setattr(queue, "REWIND_COMMITTED_TIMEOUT_S", 1.0)
    monkeypatch.setattr(queue, "REWIND_RETRY_S", 0.1)
    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})  # held until it answers
    for f in admin.create_topics([NewTopic("chaos-queue", 2, 1),
                                  NewTopic("chaos-eos-out", 2, 1)]).values():
        f.result(15)
    p = Producer({"bootstrap.servers": bs})
    for i in range(10):
        p.produce("chaos-queue", value=f"v{i}".encode(), partition=0)
    p.flush(15)

    blocker = Producer({"bootstrap.servers": bs, "transactional.id": "blocker",
                        "transaction.timeout.ms": 60_000})
    blocker.init_transactions(30)
    blocker.begin_transaction()
    blocker.produce("chaos-eos-out", value=b"x", partition=0)
    group = Consumer({"bootstrap.servers": bs, "group.id": "chaos-eos"})
    blocker.send_offsets_to_transaction([TopicPartition("chaos-queue", 0, 5)],
                                        group.consumer_group_metadata(), 30)
    group.close()

    rec = Recorder()
    pipeline = Pipeline("e0", rec, threading.Event(), bootstrap=bs,
                        input_topic="chaos-queue", output_topic="chaos-eos-out",
                        output_partitions=2)
    c = pipeline._consumer()
    deadline = time.monotonic() + 30
    while not c.assignment() and time.monotonic() < deadline:
        c.consume(10, 0.2)
    assert c.assignment()
    assert pipeline._rewind(c) is False
    [diagnosis] = [op for op in rec.snapshot() if op["op"] == "nemesis"]
    assert "'chaos-queue-0': 'UNSTABLE_OFFSET_COMMIT'" in diagnosis["detail"], diagnosis

    c = pipeline._replace_consumer(c, queue.REWIND_REPLACE_AFTER)
    blocker.abort_transaction(30)
    read: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    try:
        while len(read) < 10 and time.monotonic() < deadline:
            read += [(m.partition(), m.offset()) for m in c.consume(10, 0.5)
                     if m.error() is None]
    finally:
        c.close()
    assert read == [(0, o) for o in range(10)]
    assert any("pipeline consumer replaced" in op.get("detail", "") for op in rec.snapshot())


def test_output_values_name_their_input_position() -> None:
    """An input value that is in the input topic twice (an idempotent producer's resend
    after a client timeout) gives two distinct output values, even in one transaction: the
    history's values must be unique (a no-fault run's checker stopped on "sent twice")."""
    from yak.chaos.pipeline import output_value

    a = output_value("q1.0-38029", ["chaos-queue-1", 100], "e0.2-t1030")
    b = output_value("q1.0-38029", ["chaos-queue-1", 101], "e0.2-t1030")
    assert a != b
    assert a.startswith("q1.0-38029") and a.endswith(">e0.2-t1030")
