"""yak.broker.metrics: an object with its own registry, counting what was appended and read.

The unit part checks the counting rules on real append results; the end-to-end part runs a
real broker with the embedded gateway and real clients, and reads `/metrics` over HTTP.
"""

from __future__ import annotations

import time
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import free_port
from prometheus_client import generate_latest

from yak.broker.metrics import BrokerMetrics, count_records
from yak.partition import LogAppendInfo, PartitionAppendResult
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

from .rawclient import RawClient


def _value(metrics: BrokerMetrics, name: str, **labels: str) -> float:
    v = metrics.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


def batch(n: int, base: int = 0) -> bytes:
    return build_batch([Record(key=None, value=b"v%d" % i) for i in range(n)], base_offset=base)


def test_count_records_walks_batch_headers_across_buffers() -> None:
    two = batch(3) + batch(5, base=3)
    assert count_records([two]) == 8
    assert count_records([memoryview(batch(2)), bytearray(batch(4))]) == 6
    assert count_records([b""]) == 0
    assert count_records([batch(2)[:30]]) == 0  # a truncated header counts nothing


def test_counts_come_from_append_results_not_requests() -> None:
    m = BrokerMetrics()
    appended = PartitionAppendResult("a", 0, info=LogAppendInfo(0, 6, -1, 0, 7, 500))
    duplicate = PartitionAppendResult("a", 1, info=LogAppendInfo(3, 4, -1, 0, 0, 0))
    refused = PartitionAppendResult("a", 2, error=2, error_message="corrupt")
    unknown = PartitionAppendResult("no-such-topic", 0, error=3)
    m.record_appended([appended, duplicate, refused, unknown])
    assert _value(m, "yak_broker_topic_messages_in_total", topic="a") == 7
    assert _value(m, "yak_broker_topic_bytes_in_total", topic="a") == 500
    text = generate_latest(m.registry).decode()
    assert "no-such-topic" not in text  # client-chosen names never become labels
    m.record_fetched("a", [batch(2)], len(batch(2)))
    assert _value(m, "yak_broker_topic_messages_out_total", topic="a") == 2
    m.forget_topic("a")
    assert "topic=\"a\"" not in generate_latest(m.registry).decode()


def test_two_brokers_never_share_counters() -> None:
    a, b = BrokerMetrics(), BrokerMetrics()
    a.record_request(0, time.perf_counter())
    assert _value(a, "yak_broker_requests_total", api="produce") == 1
    assert _value(b, "yak_broker_requests_total", api="produce") == 0


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def _metric(text: str, name: str, topic: str) -> float:
    prefix = f'{name}{{topic="{topic}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    return 0.0


def test_metrics_over_http_count_appends_acks0_and_skip_unknown_topics(broker_factory) -> None:
    http = free_port()
    b = broker_factory(http=f"127.0.0.1:{http}", **{"auto.create.topics.enable": "false"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("m-ok", 1, config={"max.message.bytes": "2000"})])[
        "m-ok"].result(10)

    # acks=0: nothing comes back, and the 20 records still count.
    p0 = Producer({"bootstrap.servers": b.bootstrap, "acks": 0, "linger.ms": 0})
    for i in range(20):
        p0.produce("m-ok", b"x%d" % i)
    assert p0.flush(10) == 0

    # A batch over max.message.bytes is refused: not counted. The producer sends it alone.
    p1 = Producer({"bootstrap.servers": b.bootstrap, "acks": 1, "linger.ms": 0,
                   "message.max.bytes": 100000, "compression.type": "none"})
    errors: list[object] = []
    p1.produce("m-ok", b"y" * 5000, on_delivery=lambda e, m: errors.append(e))
    p1.flush(15)
    assert len(errors) == 1 and errors[0] is not None, errors
    # A Produce to a topic that does not exist (clients only send that when asked to by
    # hand): the client's name must never become a label.
    with RawClient(b.bootstrap) as raw:
        code, _ = raw.produce_one("m-unknown-topic", 0, batch(3))
        assert code == ErrorCode.unknown_topic_or_partition
        assert raw.produce_one("m-ok", 0, batch(3), acks=1)[0] == ErrorCode.none

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "m-g",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("m-ok", 0, 0)])
    got = 0
    deadline = time.monotonic() + 20
    while got < 23 and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
    c.close()
    assert got == 23

    deadline = time.monotonic() + 20
    while True:  # acks=0 counts land when the broker handled the request: poll for them
        text = _scrape(http)
        if _metric(text, "yak_broker_topic_messages_in_total", "m-ok") >= 23 or \
                time.monotonic() > deadline:
            break
        time.sleep(0.2)  # back-off of this wait-for-counts loop
    assert _metric(text, "yak_broker_topic_messages_in_total", "m-ok") == 23
    assert _metric(text, "yak_broker_topic_messages_out_total", "m-ok") == 23
    assert "m-unknown-topic" not in text
    assert 'yak_broker_requests_total{api="produce"}' in text

    # A deleted topic's series go away with it (label cardinality follows live topics).
    admin.delete_topics(["m-ok"])["m-ok"].result(10)
    assert not [line for line in _scrape(http).splitlines()
                if line.startswith("yak_broker_") and 'topic="m-ok"' in line]


def test_no_metrics_module_globals() -> None:
    import yak.broker.metrics as mod

    registries = [v for v in vars(mod).values() if type(v).__name__ == "CollectorRegistry"]
    assert registries == []

