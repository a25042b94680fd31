"""Partition state over the wire: Metadata, Fetch and ListOffsets answer from the partition
layer's state (leader, epochs, replicas, ISR), and the epoch is persisted and moves when
leadership does (here: the broker restarted, a new registration the controller elects).
"""

from __future__ import annotations

import datetime
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch, read_header

from .rawclient import RawClient


def _metadata(raw: RawClient, topic: str) -> list[tuple[int, int, int, tuple, tuple]]:
    mod = kio_compat.schema_module("metadata", 9, "request")
    req = kio_compat.build(mod.MetadataRequest,
                           topics=(kio_compat.build(mod.MetadataRequestTopic, name=topic),),
                           allow_auto_topic_creation=False,
                           include_cluster_authorized_operations=False,
                           include_topic_authorized_operations=False)
    t = raw.request(req).topics[0]
    return [(p.partition_index, p.leader_id, p.leader_epoch, tuple(p.replica_nodes),
             tuple(p.isr_nodes)) for p in t.partitions]


def _fetch_epoch_error(raw: RawClient, topic: str, epoch: int) -> int:
    mod = kio_compat.schema_module("fetch", 12, "request")
    part = kio_compat.build(mod.FetchPartition, partition=0, fetch_offset=0,
                            partition_max_bytes=1 << 20, current_leader_epoch=epoch,
                            log_start_offset=-1, last_fetched_epoch=-1)
    req = kio_compat.build(
        mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(kio_compat.build(mod.FetchTopic, topic=topic, partitions=(part,)),),
        forgotten_topics_data=(), rack_id="",
    )
    return int(raw.request(req).responses[0].partitions[0].error_code)


def _batch_epochs(raw: RawClient, topic: str) -> list[int]:
    p = raw.fetch(topic, 0, 0).responses[0].partitions[0]
    data = bytes(p.records or b"")
    out, pos = [], 0
    while pos + 61 <= len(data):
        h = read_header(data, pos)
        out.append(h.partition_leader_epoch)
        pos += 12 + h.batch_length
    return out


def test_leader_epoch_is_persisted_and_moves_with_leadership(broker_factory) -> None:
    b = broker_factory(**{"node.id": "1"})
    with RawClient(b.bootstrap) as raw:
        raw.create_topic("ps", 2)
        assert _metadata(raw, "ps") == [(0, 1, 0, (1,), (1,)), (1, 1, 0, (1,), (1,))]
        assert raw.produce_one("ps", 0, build_batch([Record(None, b"a")]))[0] == ErrorCode.none

    # A restart is a new registration of the broker: the controller elects it again, so
    # the leader epoch moves on (persisted, as every leader change), as in KRaft.
    b.restart()
    with RawClient(b.bootstrap) as raw:
        assert _metadata(raw, "ps") == [(0, 1, 1, (1,), (1,)), (1, 1, 1, (1,), (1,))]
        assert raw.produce_one("ps", 0, build_batch([Record(None, b"b")]))[0] == ErrorCode.none
        # Each batch carries the epoch of the leader that appended it.
        assert _batch_epochs(raw, "ps") == [0, 1]
        assert _fetch_epoch_error(raw, "ps", 0) == ErrorCode.fenced_leader_epoch
        assert _fetch_epoch_error(raw, "ps", 2) == ErrorCode.unknown_leader_epoch
        assert _fetch_epoch_error(raw, "ps", 1) == ErrorCode.none
        latest = raw.list_offset("ps", 0, -1)
        earliest = raw.list_offset("ps", 0, -2)
        assert (latest.offset, latest.leader_epoch) == (2, 1)
        assert (earliest.offset, earliest.leader_epoch) == (0, 0)

    b.restart()
    with RawClient(b.bootstrap) as raw:
        assert _metadata(raw, "ps")[1] == (1, 1, 2, (1,), (1,))

    # The data directory belongs to node 1 (meta.properties): another node.id is refused
    # with one line, as Kafka refuses it.
    b.stop()
    b.settings["node.id"] = "2"
    try:
        b.start()
        raise AssertionError("started under another node.id")
    except RuntimeError as e:
        assert "meta.properties" in str(e) and "node" in str(e)
    b.settings["node.id"] = "1"
    b.start()

    # A real client follows: it reads both records, committed offsets carry the epoch.
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "ps-g",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("ps", 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 2 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
            last = m
    assert got == [b"a", b"b"]
    assert last.leader_epoch() == 1  # "b", appended under epoch 1
    c.close()
    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce("ps", b"c", partition=1)
    assert p.flush(10) == 0
