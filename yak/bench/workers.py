"""Producer and consumer loops, each run in its own worker process.

confluent-kafka's `produce()` and `poll()` hold the GIL, so several clients in one
process would measure the GIL, not the broker: every producer and consumer gets a
process (spawned, so no librdkafka thread state is inherited across fork). A worker
connects first, reports "ready", and waits for the common start signal, so connection
set-up and metadata are outside the measured window.

Workers publish their running count in a shared array slot (for the progress bar and
for e2e's stop condition) and send one summary dict on the result queue when done.
"""

from __future__ import annotations

import os
import random
import struct
import time
from multiprocessing.sharedctypes import SynchronizedArray
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaError, Producer, TopicPartition

from yak.bench.spec import BenchSpec

TS = struct.Struct("<q")  # e2e: first 8 bytes of the value = sender's time.time_ns()
READY_TIMEOUT_S = 30.0


def payload(size: int, seed: int) -> bytes:
    """Random uppercase letters, like kafka-producer-perf-test: compressible but not trivial."""
    rnd = random.Random(seed)
    return bytes(rnd.randrange(65, 91) for _ in range(size))


def producer_config(spec: BenchSpec) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": spec.bootstrap,
        "acks": spec.acks,
        "linger.ms": spec.linger_ms,
        "batch.size": spec.batch_size,
        "batch.num.messages": 100_000,
        "compression.type": spec.compression,
        "enable.idempotence": False,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "message.max.bytes": max(1_000_000, spec.batch_size + 1024),
        "log_level": 3,
    }
    conf.update(spec.client_config)
    return conf


def consumer_config(spec: BenchSpec, group: str) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": spec.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": spec.fetch_wait_ms,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
        # librdkafka's default prefetch (100k messages per partition), stated so it is not
        # mistaken for an oversight: 1M was tried and is slower. A 1M-message queue lets a
        # broker that answers faster than the Python loop drains fill the client with up to
        # 1M queued messages (+50-80 MiB RSS), and first-touch page faults then cost the
        # client ~0.1-0.3 us/msg of kernel CPU (docs/benchmarks/README.md, 2026-11-22)
        "queued.min.messages": 100_000,
        # past 64 MiB queued (6k x 10 KiB) librdkafka pauses fetching for 1 s by default: a
        # client-side stall that showed up as random 4x slower 10 KiB runs
        "queued.max.messages.kbytes": 1_048_576,
        "fetch.queue.backoff.ms": 50,
        "log_level": 3,
    }
    conf.update(spec.client_config)
    return conf


def my_partitions(spec: BenchSpec, idx: int, workers: int) -> list[int]:
    return [p for p in range(spec.partitions) if p % workers == idx]


def _wait_start(ready: Any, start: Any) -> float:
    ready.put(os.getpid())
    if not start.wait(READY_TIMEOUT_S * 2):
        raise TimeoutError("benchmark never started")
    return time.monotonic()


def _cpu() -> float:
    """This worker's CPU so far, librdkafka's threads included (process-wide)."""
    return time.process_time()


def produce_worker(
    spec: BenchSpec, idx: int, quota: int, counts: SynchronizedArray, ready: Any, start: Any,
    results: Any, timestamped: bool,
) -> None:
    """Send `quota` messages (0: until the duration ends), round-robin over partitions.

    With `spec.rate` > 0 the sends are paced in 1 ms ticks at rate/producers msg/s, so
    an e2e run measures latency at a known load instead of at saturation.
    """
    p = Producer(producer_config(spec))
    p.list_topics(spec.topic, timeout=READY_TIMEOUT_S)
    body = payload(spec.message_size, idx)
    pad = body[TS.size:]
    delivered = errors = 0
    acked_ns: list[int] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        nonlocal delivered, errors
        if err is None:
            delivered += 1
            lat = msg.latency()
            if lat is not None:
                acked_ns.append(int(lat * 1e9))
        else:
            errors += 1

    t0 = _wait_start(ready, start)
    cpu0 = _cpu()
    deadline = t0 + (spec.duration_s or spec.timeout_s)
    hard_stop = t0 + spec.timeout_s
    rate = spec.rate / spec.producers if spec.rate else 0.0
    per_tick = max(1, int(rate // 1000)) if rate else 0
    tick_s = per_tick / rate if rate else 0.0
    parts = spec.partitions
    sent = 0
    next_tick = t0
    topic = spec.topic
    produce = p.produce
    while (quota == 0 or sent < quota) and time.monotonic() < deadline:
        n = 10_000 if not rate else per_tick
        if quota:
            n = min(n, quota - sent)
        if rate:
            delay = next_tick - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            next_tick += tick_s
        for _ in range(n):
            value = TS.pack(time.time_ns()) + pad if timestamped else body
            while True:
                try:
                    produce(topic, value, partition=(sent + idx) % parts, on_delivery=on_delivery)
                    break
                except BufferError:  # local queue full: let librdkafka drain it
                    p.poll(0.005)
            sent += 1
        p.poll(0)
        counts[idx] = delivered
    left = p.flush(max(1.0, hard_stop - time.monotonic()))
    counts[idx] = delivered
    results.put({
        "kind": "producer", "idx": idx, "sent": sent, "delivered": delivered,
        "errors": errors, "unacked": left, "t_end": time.monotonic(), "ack_ns": acked_ns,
        "cpu_s": _cpu() - cpu0,
    })


def consume_worker(
    spec: BenchSpec, idx: int, workers: int, group: str, counts: SynchronizedArray, ready: Any,
    start: Any, stop: Any, results: Any, timestamped: bool,
) -> None:
    """Read this worker's share of partitions.

    Throughput runs (`timestamped` False) start at each partition's log start and end at
    the log end offset seen before the start signal, so a run reads exactly what was
    there; e2e runs start at the log end and read until told to stop, recording
    now - sender's timestamp for every message.
    """
    c = Consumer(consumer_config(spec, group))
    parts = my_partitions(spec, idx, workers)
    ends: dict[int, int] = {}
    expected = 0
    assign = []
    for pid in parts:
        low, high = c.get_watermark_offsets(
            TopicPartition(spec.topic, pid), timeout=READY_TIMEOUT_S, cached=False
        )
        if timestamped:
            assign.append(TopicPartition(spec.topic, pid, OFFSET_END))
        elif high > low:
            assign.append(TopicPartition(spec.topic, pid, low))
            ends[pid] = high
            expected += high - low
    if spec.count and not timestamped:
        expected = min(expected, spec.count // workers + (idx < spec.count % workers))
    c.assign(assign)
    if timestamped:  # resolve the OFFSET_END fetch position before the producers start
        c.poll(0.5)
    lat_ns: list[int] = []
    got = errors = 0
    t0 = _wait_start(ready, start)
    cpu0 = _cpu()
    t_last = t0
    if timestamped:
        hard_stop = t0 + spec.timeout_s
        # one message per poll(): consume(num_messages=N) would wait to fill N (latency)
        while not stop.is_set() and time.monotonic() < hard_stop:
            m = c.poll(0.05)
            if m is None:
                continue
            if m.error() is not None:
                errors += m.error().code() != KafkaError._PARTITION_EOF
                continue
            lat_ns.append(time.time_ns() - TS.unpack_from(m.value())[0])
            got += 1
            counts[idx] = got  # every message: the runner stops consumers on this count
        t_last = time.monotonic()
    else:
        deadline = t0 + (spec.duration_s or spec.timeout_s)
        while got < expected and ends and time.monotonic() < deadline:
            # ask for no more than is left, so the last call returns as soon as it is full
            batch = c.consume(num_messages=min(10_000, expected - got), timeout=0.05)
            for m in batch:
                if m.error() is not None:
                    errors += m.error().code() != KafkaError._PARTITION_EOF
                    continue
                got += 1
                end = ends.get(m.partition())
                if end is not None and m.offset() + 1 >= end:
                    del ends[m.partition()]
            if batch:
                t_last = time.monotonic()
                counts[idx] = got
    counts[idx] = got
    cpu_s = _cpu() - cpu0
    c.close()
    results.put({
        "kind": "consumer", "idx": idx, "received": got, "errors": errors,
        "expected": expected, "t_end": t_last, "lat_ns": lat_ns, "cpu_s": cpu_s,
    })
