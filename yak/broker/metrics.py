"""Broker-side Prometheus metrics: requests per API, bytes and messages in/out per topic.

The connection and the Produce/Fetch paths call the `record_*` functions below, and
nothing else: they only bump counters that live in this module's own registry, so a
broker without an HTTP listener pays a few hundred nanoseconds per request and never
imports the gateway. The gateway's `/metrics` (when embedded in `yak serve`) renders
`REGISTRY` next to its own.

Label children are cached in dicts because `Counter.labels(...)` costs a lock and a
tuple build per call, which on the Produce path would be as much as the counter itself.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

# Kafka's request latency spans 100 us (ApiVersions) to max.wait of a long-poll Fetch.
_LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
)

REQUESTS = Counter(
    "yak_broker_requests", "Kafka requests handled, by API name.", ["api"], registry=REGISTRY
)
REQUEST_SECONDS = Histogram(
    "yak_broker_request_latency_seconds",
    "Time from a request's frame being taken to its response being written, by API.",
    ["api"], buckets=_LATENCY_BUCKETS, registry=REGISTRY,
)
BYTES_IN = Counter(
    "yak_broker_topic_bytes_in", "Record batch bytes received by Produce, by topic.",
    ["topic"], registry=REGISTRY,
)
MESSAGES_IN = Counter(
    "yak_broker_topic_messages_in", "Records received by Produce, by topic.",
    ["topic"], registry=REGISTRY,
)
BYTES_OUT = Counter(
    "yak_broker_topic_bytes_out", "Record batch bytes sent by Fetch, by topic.",
    ["topic"], registry=REGISTRY,
)
MESSAGES_OUT = Counter(
    "yak_broker_topic_messages_out",
    "Records sent by Fetch, by topic (batches read from memory; file regions not counted).",
    ["topic"], registry=REGISTRY,
)
CONNECTIONS = Gauge(
    "yak_broker_connections", "Open Kafka client connections.", registry=REGISTRY
)

_API_NAMES: dict[int, str] = {}
_req_children: dict[int, tuple[Any, Any]] = {}
_topic_children: dict[tuple[str, str], Any] = {}

# RecordBatch v2: base offset (8) + batch length (4) ... record count is the last int32
# of the 61-byte header.
_BATCH_LEN = struct.Struct(">i")
_COUNT = struct.Struct(">i")
_LEN_AT = 8
_COUNT_AT = 57
_HEADER = 61


def _api_name(api_key: int) -> str:
    name = _API_NAMES.get(api_key)
    if name is None:
        try:
            from yak.protocol import kio_compat

            name = kio_compat.api_name(api_key)
        except Exception:
            name = f"api_{api_key}"
        _API_NAMES[api_key] = name
    return name


PRODUCE_KEY = 0


def record_request(api_key: int, started: float, request: Any = None) -> None:
    """Called by the connection after each response; `started` is a perf_counter().

    A Produce request's records are counted here, from the decoded request, so the
    Produce handler needs no hook of its own.
    """
    if api_key == PRODUCE_KEY and request is not None:
        record_produce(getattr(request, "topics", ()))
    children = _req_children.get(api_key)
    if children is None:
        name = _api_name(api_key)
        children = (REQUESTS.labels(name), REQUEST_SECONDS.labels(name))
        _req_children[api_key] = children
    children[0].inc()
    children[1].observe(time.perf_counter() - started)


def _child(metric: Any, kind: str, topic: str) -> Any:
    key = (kind, topic)
    c = _topic_children.get(key)
    if c is None:
        c = metric.labels(topic)
        _topic_children[key] = c
    return c


def count_records(buffers: Iterable[Any]) -> int:
    """Records in concatenated whole batches, read from the headers only.

    Buffers that are not in memory (file regions sent with sendfile) are skipped:
    counting them would mean reading the disk on the Fetch path.
    """
    total = 0
    for buf in buffers:
        if not isinstance(buf, bytes | bytearray | memoryview):
            continue
        pos = 0
        end = len(buf)
        while pos + _HEADER <= end:
            (length,) = _BATCH_LEN.unpack_from(buf, pos + _LEN_AT)
            (count,) = _COUNT.unpack_from(buf, pos + _COUNT_AT)
            total += max(count, 0)
            pos += 12 + length
    return total


def record_produce(topics: Sequence[Any]) -> None:
    """Count a decoded Produce request (`yak.protocol.produce_codec.ProduceTopic` list)."""
    for t in topics:
        name = t.name or str(t.topic_id)
        size = 0
        msgs = 0
        for _, records in t.partitions:
            if records is not None:
                size += len(records)
                msgs += count_records((records,))
        if size:
            _child(BYTES_IN, "bi", name).inc(size)
            _child(MESSAGES_IN, "mi", name).inc(msgs)


def record_fetch(results: Sequence[Any]) -> None:
    """Count a Fetch response's `FetchTopicResult`s before they are encoded."""
    for t in results:
        size = 0
        msgs = 0
        for p in t.partitions:
            if p.records_size:
                size += p.records_size
                msgs += count_records(p.records or ())
        if size:
            _child(BYTES_OUT, "bo", t.name).inc(size)
            _child(MESSAGES_OUT, "mo", t.name).inc(msgs)


def bind_connections(count: Callable[[], int]) -> None:
    """Let the gauge read the live connection count at scrape time (no per-connect hook)."""
    CONNECTIONS.set_function(count)
