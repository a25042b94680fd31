"""yak.broker.metrics: record counting from batch headers, per-topic and per-API counters."""

from __future__ import annotations

import time
from types import SimpleNamespace

from yak.broker import metrics as bm
from yak.protocol.records import Record, build_batch


def _value(metric: object, **labels: str) -> float:
    for fam in metric.collect():  # type: ignore[attr-defined]
        for s in fam.samples:
            if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def batch(n: int, base: int = 0) -> bytes:
    return build_batch([Record(key=None, value=b"v%d" % i) for i in range(n)], base_offset=base)


def test_count_records_walks_batch_headers_across_buffers() -> None:
    two = batch(3) + batch(5, base=3)
    assert bm.count_records([two]) == 8
    assert bm.count_records([memoryview(batch(2)), bytearray(batch(4))]) == 6
    assert bm.count_records([b""]) == 0
    assert bm.count_records([batch(2)[:30]]) == 0  # a truncated header counts nothing
    assert bm.count_records([object()]) == 0  # file regions are not read


def test_produce_and_fetch_counters_per_topic() -> None:
    data = batch(7)
    req = SimpleNamespace(topics=[SimpleNamespace(name="bm-t", topic_id=None,
                                                  partitions=[(0, memoryview(data)), (1, None)])])
    before = _value(bm.MESSAGES_IN, topic="bm-t"), _value(bm.BYTES_IN, topic="bm-t")
    bm.record_request(0, time.perf_counter(), req)
    assert _value(bm.MESSAGES_IN, topic="bm-t") - before[0] == 7
    assert _value(bm.BYTES_IN, topic="bm-t") - before[1] == len(data)
    assert _value(bm.REQUESTS, api="produce") >= 1

    part = SimpleNamespace(records=[data], records_size=len(data))
    empty = SimpleNamespace(records=None, records_size=0)
    bm.record_fetch([SimpleNamespace(name="bm-t", partitions=[part, empty])])
    assert _value(bm.MESSAGES_OUT, topic="bm-t") == 7
    assert _value(bm.BYTES_OUT, topic="bm-t") == len(data)


def test_hook_cost_per_request_is_small() -> None:
    """The connection calls this on every request: keep it to a few microseconds."""
    req = SimpleNamespace(topics=[SimpleNamespace(name="bm-cost", topic_id=None,
                                                  partitions=[(0, memoryview(batch(10)))])])
    n = 20_000
    t0 = time.process_time()
    for _ in range(n):
        bm.record_request(0, time.perf_counter(), req)
    per_call_us = (time.process_time() - t0) / n * 1e6
    print(f"record_request(produce) costs {per_call_us:.1f} us CPU per call")
    assert per_call_us < 50  # generous: the machine is shared
