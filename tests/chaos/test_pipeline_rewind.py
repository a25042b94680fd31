"""The pipeline's rewind after a transaction that did not commit (aborted, or its producer
given up): it must land on the group's committed offsets before consuming again. In the
30-minute run of 2026-11-26 librdkafka's `committed()` failed once with NOT_COORDINATOR
(the group's coordinator was being bounced), the rewind gave up, and the pipeline consumed
on from its position: 58 inputs were never transformed (`lost_write` in the checker).

A unit test of the workload's own retry logic: the consumer is a stand-in that fails the
way librdkafka did; the broker is not involved."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from yak.chaos import queue
from yak.chaos.history import Recorder
from yak.chaos.queue import Pipeline


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
