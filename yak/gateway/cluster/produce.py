"""Produce through one shared confluent-kafka producer, with delivery reports handed to
the event loop in batches (one loop wake-up per producer poll, never per record).

With `load_aware` set (the gateway's `partitioner=load_aware`, issue 23), records with
neither key nor partition get theirs from `yak.client.load_aware.LoadAwarePartitioner`,
over the leaders of the topic's cached metadata; each one's acknowledgement (or error)
is told back to it, with librdkafka's own measure of the record's latency."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from yak.client.load_aware import LoadAwarePartitioner
from yak.gateway.cluster.base import ClientBase
from yak.gateway.cluster.model import ClusterError, Produced, cluster_error


class ProduceCalls(ClientBase):
    """The producer (built on first use, with its delivery-report poller) and `produce_many`."""

    # Set by the gateway core for partitioner=load_aware; None: librdkafka's partitioner.
    load_aware: LoadAwarePartitioner | None = None

    @property
    def producer(self) -> Producer:
        with self._lock:
            if self._producer is None:
                conf = self._common() | {
                    "linger.ms": 2,
                    "message.timeout.ms": int(self.timeout_s * 1000),
                    # Matches Java's partitioner, so keyed REST records land where Java's would.
                    "partitioner": "murmur2_random",
                    "enable.idempotence": False,
                }
                self._producer = Producer(conf)
                self._poller = threading.Thread(
                    target=self._poll_loop, args=(self._producer,), daemon=True,
                    name="yak-gateway-producer",
                )
                self._poller.start()
            return self._producer

    def _poll_loop(self, producer: Producer) -> None:
        """Delivery reports are collected here, off the event loop, and handed over in
        one `call_soon_threadsafe` per poll: one loop wake-up per batch, not per record."""
        while not self._closing.is_set():
            producer.poll(0.1)
            if self._reports:
                reports, self._reports = self._reports, []
                reports[0][0].loop.call_soon_threadsafe(_settle_all, reports)

    def _report(self, delivery: Delivery, index: int, err: KafkaError | None,
                msg: Any) -> None:
        self._reports.append((delivery, index, err, msg))

    def _report_placed(self, delivery: Delivery, index: int, leader: int,
                       err: KafkaError | None, msg: Any) -> None:
        """A load-aware record's report: its leader hears how it went, then as `_report`."""
        la = self.load_aware
        if la is not None:
            if err is None:
                la.acked(leader, msg.latency() or 0.0)
            else:
                la.failed(leader)
        self._reports.append((delivery, index, err, msg))

    def _leaders(self, topic: str) -> dict[int, int] | None:
        """partition -> leader from the topic's cached metadata (the core resolved the
        topic just before), or None when it is not cached."""
        cached = self._topic_cache.get(topic)
        if cached is None or not cached[1].partitions:
            return None
        return {p: pm.leader for p, pm in cached[1].partitions.items()}

    def produce_many(self, topic: str,
                     records: Sequence[tuple[bytes | None, bytes | None, int | None,
                                             Sequence[tuple[str, bytes]] | None, int | None]],
                     ) -> Delivery:
        """Hand (key, value, partition, headers, timestamp_ms) records to the producer now,
        in order; `Delivery.future` settles once every record has its delivery report.

        Synchronous on purpose: records handed over in a given order are appended in that
        order (per partition), whatever the callers await afterwards. One future per call,
        not per record: reports reach the loop once per producer poll, in a batch.
        """
        loop = asyncio.get_running_loop()
        delivery = Delivery(loop, len(records))
        produce = self.producer.produce
        report = self._report
        la = self.load_aware
        leaders = self._leaders(topic) if la is not None else None
        for i, (key, value, partition, headers, timestamp_ms) in enumerate(records):
            kwargs: dict[str, Any] = {"value": value, "key": key,
                                      "on_delivery": functools.partial(report, delivery, i)}
            placed = -2  # the leader a load-aware record was counted against
            if partition is None and key is None and leaders:
                partition = la.partition(topic, leaders, len(value or b""))  # type: ignore[union-attr]
                placed = leaders[partition]
                kwargs["on_delivery"] = functools.partial(
                    self._report_placed, delivery, i, placed)
            if partition is not None:
                kwargs["partition"] = partition
            if headers:
                kwargs["headers"] = list(headers)
            if timestamp_ms is not None:
                kwargs["timestamp"] = timestamp_ms
            try:
                produce(topic, **kwargs)
            except BufferError:
                delivery.fail(i, ClusterError("producer queue is full, retry later", -184,
                                              "_QUEUE_FULL"))
                if placed != -2:
                    la.failed(placed)  # type: ignore[union-attr]
            except KafkaException as e:
                delivery.fail(i, cluster_error(e))
                if placed != -2:
                    la.failed(placed)  # type: ignore[union-attr]
        return delivery


class Delivery:
    """The delivery reports of records handed to the producer together."""

    __slots__ = ("future", "loop", "pending", "results")

    def __init__(self, loop: asyncio.AbstractEventLoop, n: int) -> None:
        self.loop = loop
        self.future: asyncio.Future[list[Produced | ClusterError]] = loop.create_future()
        self.results: list[Produced | ClusterError | None] = [None] * n
        self.pending = n
        if not n:
            self.future.set_result([])

    def fail(self, index: int, error: ClusterError) -> None:
        self._settle(index, error)

    def _settle(self, index: int, result: Produced | ClusterError) -> None:
        if self.results[index] is not None:
            return
        self.results[index] = result
        self.pending -= 1
        if not self.pending and not self.future.done():
            self.future.set_result(self.results)  # type: ignore[arg-type]


def _settle_all(reports: list[tuple[Delivery, int, KafkaError | None, Any]]) -> None:
    """On the loop: one call per producer poll that had reports."""
    for delivery, index, err, msg in reports:
        if err is not None:
            delivery._settle(index, ClusterError(err.str(), err.code(), err.name()))
        else:
            delivery._settle(index, Produced(msg.topic(), msg.partition(), msg.offset(),
                                             msg.timestamp()[1]))
