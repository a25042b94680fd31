"""A compacted topic refuses records without a key at produce time, as Kafka does:
INVALID_RECORD for that partition's batch only, with KIP-467 `record_errors` and
`error_message` in Produce v8+; seen by confluent-kafka and on the raw protocol."""

from __future__ import annotations

import pytest
from broker.rawclient import RawClient
from confluent_kafka import KafkaError, Producer

from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

MSG = "Compacted topic cannot accept message without key in topic partition {}."


@pytest.mark.parametrize("version", [7, 8, 9, 11])
def test_raw_produce_record_errors(module_broker, version: int) -> None:
    topic = f"keyless-raw-v{version}"
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic, partitions=2, cleanup_policy="compact")
        bad = build_batch([Record(b"k", b"1"), Record(None, b"2"), Record(None, b"3")])
        good = build_batch([Record(b"k", b"1"), Record(b"k2", None)])
        resp = c.produce(topic, {0: bad, 1: good}, version=version)
        p0, p1 = resp.responses[0].partition_responses
        assert p0.error_code == ErrorCode.invalid_record
        assert p1.error_code == ErrorCode.none and p1.base_offset == 0
        if version >= 8:
            msg = MSG.format(f"{topic}-0")
            assert [(e.batch_index, e.batch_index_error_message) for e in p0.record_errors] == [
                (1, msg), (2, msg)]
            assert p0.error_message.startswith(
                "One or more records have been rejected due to 2 record errors")
            assert p1.record_errors == () and p1.error_message is None
        # Nothing of the refused batch was written; the partition still takes keyed records.
        code, base = c.produce_one(topic, 0, good, version=version)
        assert (code, base) == (ErrorCode.none, 0)


def test_confluent_producer_gets_invalid_record(module_broker) -> None:
    topic = "keyless-confluent"
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic, partitions=1, cleanup_policy="compact")
    reports: list[tuple[bytes | None, KafkaError | None, int]] = []
    p = Producer({"bootstrap.servers": module_broker.bootstrap, "linger.ms": 0,
                  "message.timeout.ms": 10000, "retries": 0})

    def report(err, msg) -> None:  # type: ignore[no-untyped-def]
        reports.append((msg.key(), err, msg.offset()))

    p.produce(topic, key=b"k", value=b"kept", partition=0, on_delivery=report)
    p.flush(10)
    p.produce(topic, value=b"no key", partition=0, on_delivery=report)
    p.flush(10)
    p.produce(topic, key=b"k2", value=b"kept too", partition=0, on_delivery=report)
    assert p.flush(10) == 0
    assert [(k, e.code() if e else None) for k, e, _o in reports] == [
        (b"k", None), (None, KafkaError.INVALID_RECORD), (b"k2", None)]
    assert [o for k, e, o in reports if e is None] == [0, 1]  # the refused one took no offset
