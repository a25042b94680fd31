"""The connection starts a pipelined Produce or Fetch straight from the read that completed
it while its serve loop waits for a frame (issue 28: no wake-up of that loop per request).
That shortcut must never let a request start while the loop is holding the connection back
for an earlier one: a barrier waiting for the requests before it, a full in-flight window.
Over the wire, with a real broker: each request is its own write, a pause apart, so each
arrives in a read of its own while the loop is at a different await."""

from __future__ import annotations

import datetime
import time
import uuid

from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

from .rawclient import RawClient

FETCH = kio_compat.schema_module("fetch", 12, "request")
PRODUCE = kio_compat.schema_module("produce", 9, "request")
LIST_OFFSETS = kio_compat.schema_module("list_offsets", 7, "request")
PARK_S = 2.0  # how long the parked Fetch waits for records that must not come


def _parked_fetch(topic: str) -> object:
    part = kio_compat.build(FETCH.FetchPartition, partition=0, fetch_offset=0,
                            partition_max_bytes=1 << 20, current_leader_epoch=-1,
                            log_start_offset=-1, last_fetched_epoch=-1)
    return kio_compat.build(
        FETCH.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(seconds=PARK_S),
        min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(kio_compat.build(FETCH.FetchTopic, topic=topic, partitions=(part,)),),
        forgotten_topics_data=(), rack_id="")


def _produce(topic: str, value: bytes) -> object:
    return PRODUCE.ProduceRequest(
        transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=10),
        topic_data=(PRODUCE.TopicProduceData(name=topic, partition_data=(
            PRODUCE.PartitionProduceData(index=0, records=build_batch(
                [Record(None, value)])),)),))


def _latest(topic: str) -> object:
    return kio_compat.build(
        LIST_OFFSETS.ListOffsetsRequest, replica_id=-1, isolation_level=0,
        topics=(LIST_OFFSETS.ListOffsetsTopic(name=topic, partitions=(kio_compat.build(
            LIST_OFFSETS.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
            timestamp=-1),)),))


def _read(raw: RawClient, api_key: int, version: int) -> tuple[int, object]:
    return kio_compat.decode_response(api_key, version, raw.recv_frame())


def test_a_produce_arriving_while_a_barrier_waits_starts_after_it(module_broker) -> None:
    """Fetch (parks: nothing to read), then ListOffsets (a barrier: waits for the Fetch to
    answer), then Produce. The Produce must take effect after the ListOffsets: had it
    started on arrival, its record would have woken the Fetch and moved the log end offset
    the ListOffsets reports."""
    topic = f"fast-start-{uuid.uuid4().hex[:8]}"
    with RawClient(module_broker.bootstrap, timeout=30) as raw:
        raw.create_topic(topic, 1)
        started = time.monotonic()
        fetch_cid = raw.send(_parked_fetch(topic))
        time.sleep(0.3)  # the Fetch is parked; the serve loop waits for a frame
        list_cid = raw.send(_latest(topic))
        time.sleep(0.3)  # the ListOffsets waits for the Fetch (a barrier)
        produce_cid = raw.send(_produce(topic, b"late"))

        cid, fetched = _read(raw, 1, 12)
        assert cid == fetch_cid
        p = fetched.responses[0].partitions[0]
        assert p.error_code == ErrorCode.none
        assert not p.records, "the Produce sent after the barrier reached the parked Fetch"
        assert time.monotonic() - started >= PARK_S * 0.9  # it waited its max_wait out
        cid, listed = _read(raw, 2, 7)
        assert cid == list_cid
        assert listed.topics[0].partitions[0].offset == 0  # the Produce had not run yet
        cid, produced = _read(raw, 0, 9)
        assert cid == produce_cid
        answer = produced.responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.none and answer.base_offset == 0


def test_a_fetch_beyond_the_window_waits_and_answers_in_order(module_broker) -> None:
    """Three parked Fetches, each its own read: the window holds two, so the third starts
    only once the first answered; a Produce behind them all wakes the ones in flight, and
    every response comes back in request order."""
    topic = f"fast-window-{uuid.uuid4().hex[:8]}"
    with RawClient(module_broker.bootstrap, timeout=30) as raw:
        raw.create_topic(topic, 1)
        sent = []
        for _ in range(3):
            sent.append((raw.send(_parked_fetch(topic)), 1, 12))
            time.sleep(0.2)
        sent.append((raw.send(_produce(topic, b"wake")), 0, 9))
        got = []
        for _cid, api, version in sent:
            got_cid, resp = _read(raw, api, version)
            got.append(got_cid)
            if api == 0:
                assert resp.responses[0].partition_responses[0].base_offset == 0
        assert got == [cid for cid, _, _ in sent]


def test_a_request_answered_at_once_waits_for_the_parked_one_before_it(module_broker) -> None:
    """A parked Fetch, then in the same write a Produce to another topic (which does not
    wake it): the Produce is handled at once, without a task of its own until it must
    wait, yet its response still waits for the Fetch's; and acks=1 Produces answered at
    once, many in one read, answer and append in request order."""
    topic = f"fast-sync-{uuid.uuid4().hex[:8]}"
    other = f"fast-other-{uuid.uuid4().hex[:8]}"
    with RawClient(module_broker.bootstrap, timeout=30) as raw:
        raw.create_topic(topic, 1)
        raw.create_topic(other, 1)
        fetch_cid = raw._cid + 1
        raw.send_bytes(kio_compat.encode_request(_parked_fetch(topic), fetch_cid)
                       + kio_compat.encode_request(_produce(other, b"first"), fetch_cid + 1))
        raw._cid += 2
        cid, fetched = _read(raw, 1, 12)
        assert cid == fetch_cid  # the Fetch first, though the Produce was done long before
        assert not fetched.responses[0].partitions[0].records
        cid, produced = _read(raw, 0, 9)
        assert cid == fetch_cid + 1
        assert produced.responses[0].partition_responses[0].base_offset == 0

        burst = b"".join(kio_compat.encode_request(_produce(other, b"m%02d" % i), 100 + i)
                         for i in range(30))
        raw.send_bytes(burst)
        for i in range(30):
            cid, produced = _read(raw, 0, 9)
            assert cid == 100 + i
            answer = produced.responses[0].partition_responses[0]
            assert answer.error_code == ErrorCode.none and answer.base_offset == 1 + i


def test_request_context_fields_are_in_the_order_the_connection_passes_them() -> None:
    """The connection builds each request's context positionally (cheaper than keywords):
    a field moved or added in RequestContext must be moved or added there too."""
    import dataclasses

    from yak.broker.context import RequestContext

    assert [f.name for f in dataclasses.fields(RequestContext)] == [
        "broker", "api_key", "api_version", "correlation_id", "client_id", "connection",
        "header_size", "request_size", "extras", "session", "close_connection",
        "throttle_time_ms", "turn"]
