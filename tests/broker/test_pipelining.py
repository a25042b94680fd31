"""Per-connection pipelining of Produce and Fetch on a real broker, over a raw socket that
sends many requests before reading any answer (as librdkafka does with
max.in.flight.requests.per.connection=5):

- responses come back in request order, appends land in request order (offsets and the
  log's content), acks=0 requests in between answer nothing;
- a parked Fetch does not hold up the Produce behind it on the same connection (Kafka's
  muting would): the Produce's records are what wakes the Fetch, so the Fetch can only
  return them if the Produce ran while it waited;
- any other API is a barrier: Metadata between produces answers in its place.
"""

from __future__ import annotations

import datetime

from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch, decode_records, iter_batches

from .rawclient import RawClient


def _produce_req(topic: str, value: bytes, acks: int = -1, partition: int = 0) -> object:
    mod = kio_compat.schema_module("produce", 9, "request")
    return mod.ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=10),
        topic_data=(mod.TopicProduceData(name=topic, partition_data=(
            mod.PartitionProduceData(index=partition,
                                     records=build_batch([Record(b"k", value)])),)),))


def _read(raw: RawClient, api_key: int, version: int) -> tuple[int, object]:
    return kio_compat.decode_response(api_key, version, raw.recv_frame())


def test_pipelined_produces_answer_and_append_in_order(broker) -> None:
    topic = "pipe-order"
    with RawClient(broker.bootstrap, timeout=30) as raw:
        raw.create_topic(topic, 1, **{"write.caching": "false"})
        sent = []
        for i in range(40):
            acks = 0 if i % 10 == 5 else -1
            cid = raw.send(_produce_req(topic, b"m%03d" % i, acks))
            if acks:
                sent.append(cid)
        got = []
        for _ in sent:
            cid, resp = _read(raw, 0, 9)
            p = resp.responses[0].partition_responses[0]
            assert p.error_code == ErrorCode.none
            got.append((cid, p.base_offset))
        assert [c for c, _ in got] == sent  # responses in request order
        offsets = [o for _, o in got]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        r = raw.fetch(topic, 0, 0)
        data = r.responses[0].partitions[0].records
        mv = memoryview(data)
        values = []
        for pos, h in iter_batches(mv):
            values += [rec.value for rec in decode_records(mv[pos:pos + h.size])]
        assert values == [b"m%03d" % i for i in range(40)]  # the log kept request order


def test_a_parked_fetch_does_not_hold_up_the_produce_behind_it(broker) -> None:
    topic = "pipe-overlap"
    with RawClient(broker.bootstrap, timeout=30) as raw:
        raw.create_topic(topic, 1)
        mod = kio_compat.schema_module("fetch", 12, "request")
        part = kio_compat.build(mod.FetchPartition, partition=0, fetch_offset=0,
                                partition_max_bytes=1 << 20, current_leader_epoch=-1,
                                log_start_offset=-1, last_fetched_epoch=-1)
        fetch = kio_compat.build(
            mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(seconds=20),
            min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
            topics=(kio_compat.build(mod.FetchTopic, topic=topic, partitions=(part,)),),
            forgotten_topics_data=(), rack_id="")
        fetch_cid = raw.send(fetch)
        produce_cid = raw.send(_produce_req(topic, b"wake-up", acks=1))
        cid, resp = _read(raw, 1, 12)
        assert cid == fetch_cid  # the Fetch was first, so it answers first...
        p = resp.responses[0].partitions[0]
        # ...with the record of the Produce sent after it: the Produce ran meanwhile.
        assert p.error_code == ErrorCode.none and b"wake-up" in bytes(p.records)
        cid, resp = _read(raw, 0, 9)
        assert cid == produce_cid
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none


def test_other_apis_are_barriers(broker) -> None:
    topic = "pipe-barrier"
    with RawClient(broker.bootstrap, timeout=30) as raw:
        raw.create_topic(topic, 1)
        meta = kio_compat.schema_module("metadata", 12, "request")
        order = [raw.send(_produce_req(topic, b"a")), raw.send(_produce_req(topic, b"b"))]
        order.append(raw.send(kio_compat.build(
            meta.MetadataRequest, topics=(meta.MetadataRequestTopic(name=topic,
                                                                    topic_id=None),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)))
        order.append(raw.send(_produce_req(topic, b"c")))
        answers = []
        for api, version in ((0, 9), (0, 9), (3, 12), (0, 9)):
            cid, resp = _read(raw, api, version)
            answers.append(cid)
            if api == 3:
                assert resp.topics[0].error_code == ErrorCode.none
        assert answers == order
