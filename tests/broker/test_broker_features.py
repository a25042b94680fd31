"""Broker-level behaviour: auto-creation, topic ids, durability settings, maintenance,
clean shutdown and restart."""

from __future__ import annotations

import contextlib
import datetime
import re
import threading
import time
import urllib.request
import uuid

import pytest

from tests.conftest import free_port
from tests.waiting import wait_until
from yak.protocol import kio_compat, records
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

from .rawclient import RawClient


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _metadata(c: RawClient, topics: list[str] | None, version: int = 12,
              allow_create: bool = True):
    mod = kio_compat.schema_module("metadata", version, "request")
    req_topics = None if topics is None else tuple(
        kio_compat.build(mod.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
    req = kio_compat.build(mod.MetadataRequest, topics=req_topics,
                           allow_auto_topic_creation=allow_create,
                           include_topic_authorized_operations=False,
                           include_cluster_authorized_operations=False)
    return c.request(req)


@pytest.mark.parametrize("version", [0, 1, 4, 5, 9, 10, 12, 13])
def test_metadata_versions_and_auto_create(module_broker, version: int) -> None:
    topic = _topic(f"auto{version}")
    with RawClient(module_broker.bootstrap) as c:
        resp = _metadata(c, [topic], version)
    assert len(resp.brokers) == 1
    assert resp.brokers[0].port == module_broker.port
    t = resp.topics[0]
    assert t.error_code == ErrorCode.none and t.name == topic
    assert [p.partition_index for p in t.partitions] == [0]
    p = t.partitions[0]
    assert p.leader_id == resp.brokers[0].node_id
    assert tuple(p.replica_nodes) == tuple(p.isr_nodes) == (p.leader_id,)
    if version >= 10:
        assert t.topic_id != uuid.UUID(int=0)


def test_metadata_respects_allow_auto_create_false(module_broker) -> None:
    topic = _topic("noauto")
    with RawClient(module_broker.bootstrap) as c:
        t = _metadata(c, [topic], allow_create=False).topics[0]
        assert t.error_code == ErrorCode.unknown_topic_or_partition
        assert all(x.name != topic for x in _metadata(c, None).topics)


def test_auto_create_disabled_by_broker(broker_factory) -> None:
    b = broker_factory(**{"auto.create.topics.enable": "false", "num.partitions": "3"})
    with RawClient(b.bootstrap) as c:
        t = _metadata(c, ["nope"]).topics[0]
        assert t.error_code == ErrorCode.unknown_topic_or_partition
        c.create_topic("yes", partitions=-1)
        assert len(_metadata(c, ["yes"]).topics[0].partitions) == 3


def test_fetch_and_produce_by_topic_id(module_broker) -> None:
    topic = _topic("ids")
    with RawClient(module_broker.bootstrap) as c:
        tid = _metadata(c, [topic]).topics[0].topic_id
        mod = kio_compat.schema_module("produce", 13, "request")
        resp = c.request(mod.ProduceRequest(
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
            topic_data=(mod.TopicProduceData(topic_id=tid, partition_data=(
                mod.PartitionProduceData(index=0, records=build_batch(
                    [Record(None, b"by-id")])),)),)))
        assert resp.responses[0].topic_id == tid
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
        for version in (13, 16):
            fmod = kio_compat.schema_module("fetch", version, "request")
            req = kio_compat.build(
                fmod.FetchRequest, max_wait=datetime.timedelta(0), min_bytes=0,
                max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                topics=(fmod.FetchTopic(topic_id=tid, partitions=(kio_compat.build(
                    fmod.FetchPartition, partition=0, fetch_offset=0,
                    partition_max_bytes=1 << 20),)),
                    fmod.FetchTopic(topic_id=uuid.uuid4(), partitions=(kio_compat.build(
                        fmod.FetchPartition, partition=0, fetch_offset=0,
                        partition_max_bytes=1 << 20),))),
                forgotten_topics_data=(), rack_id="")
            r = c.request(req)
            assert r.session_id == 0
            assert r.responses[0].topic_id == tid
            got = records.decode_records(r.responses[0].partitions[0].records)
            assert [x.value for x in got] == [b"by-id"]
            assert r.responses[1].partitions[0].error_code == ErrorCode.unknown_topic_id


def test_write_caching_false_acks_all(module_broker) -> None:
    topic = _topic("sync")
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic, write_caching="false")
        for acks in (-1, 1, -1):
            code, _ = c.produce_one(topic, 0, build_batch([Record(None, b"d")]), acks=acks)
            assert code == ErrorCode.none
        assert c.list_offset(topic, 0, -1).offset == 3


def test_maintenance_applies_retention(module_broker) -> None:
    """The broker's once-a-second maintenance deletes segments past retention.ms."""
    topic = _topic("ret")
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic, segment_bytes="1000", retention_ms="1000")
        old = int(time.time() * 1000) - 3_600_000
        for i in range(6):
            c.produce_one(topic, 0, build_batch([Record(None, b"x" * 900, timestamp=old + i)]))
        assert c.list_offset(topic, 0, -2).offset == 0
        deadline = time.monotonic() + 10
        while c.list_offset(topic, 0, -2).offset == 0 and time.monotonic() < deadline:
            time.sleep(0.2)  # back-off of this wait-for-retention loop
        start = c.list_offset(topic, 0, -2).offset
        assert start > 0
        assert c.list_offset(topic, 0, -1).offset == 6


def test_sigterm_is_clean_and_data_survives(broker) -> None:
    topic = "durable"
    with RawClient(broker.bootstrap) as c:
        c.create_topic(topic, partitions=2)
        for i in range(5):
            c.produce_one(topic, i % 2, build_batch([Record(None, b"%d" % i)]))
    t0 = time.monotonic()
    assert broker.stop() == 0
    assert time.monotonic() - t0 < 10
    broker.start()
    with RawClient(broker.bootstrap) as c:
        assert c.list_offset(topic, 0, -1).offset == 3
        assert c.list_offset(topic, 1, -1).offset == 2
        got = records.decode_records(c.fetch(topic, 1, 0).responses[0].partitions[0].records)
        assert got[0].value == b"1"


def test_metadata_by_topic_id(module_broker) -> None:
    topic = _topic("byid")
    with RawClient(module_broker.bootstrap) as c:
        tid = _metadata(c, [topic]).topics[0].topic_id
        mod = kio_compat.schema_module("metadata", 12, "request")
        req = mod.MetadataRequest(
            topics=(mod.MetadataRequestTopic(topic_id=tid, name=None),
                    mod.MetadataRequestTopic(topic_id=uuid.uuid4(), name=None)),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        known, unknown = c.request(req).topics
    assert (known.name, known.topic_id, known.error_code) == (topic, tid, ErrorCode.none)
    assert unknown.error_code == ErrorCode.unknown_topic_id


def _parked_fetches(http_port: int) -> float:
    """The broker's count of Fetch long-polls parked in its purgatory, from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=20) as r:
        text = r.read().decode()
    m = re.search(r"^yak_delayed_fetch_requests (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_sigterm_with_a_parked_long_poll_is_prompt(broker_factory) -> None:
    http = free_port()
    broker = broker_factory(http=f"127.0.0.1:{http}")
    with RawClient(broker.bootstrap) as c:
        c.create_topic("parked")
    poller = RawClient(broker.bootstrap, timeout=60)

    def park() -> None:
        with contextlib.suppress(ConnectionError, OSError):
            poller.fetch("parked", 0, 0, max_wait_ms=30_000, min_bytes=1)

    t = threading.Thread(target=park)
    t.start()
    # A first scrape answered slowly under load (once > 10 s in a repeat run) is retried.
    wait_until(lambda: _parked_fetches(http) >= 1, 25, "the long poll parked in the purgatory",
               ignore=(OSError,))
    t0 = time.monotonic()
    assert broker.stop() == 0
    assert time.monotonic() - t0 < 5
    t.join(5)
    poller.close()
