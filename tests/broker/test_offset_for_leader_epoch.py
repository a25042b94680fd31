"""OffsetForLeaderEpoch (API 23) on a real broker over the wire, every version (2-4): the
end offset of an epoch (the log end for the current one), (-1, -1) for an epoch older than
the log's, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for the client's current epoch, and
UNKNOWN_TOPIC_OR_PARTITION for what the broker does not host. A follower's replica id gets
the same answer, and ListOffsets with a replica id answers the log end."""

from __future__ import annotations

import pytest

from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

from .rawclient import RawClient


def _ask(raw: RawClient, version: int, topic: str, partition: int, epoch: int,
         current: int = -1, replica_id: int = -1) -> tuple[ErrorCode, int, int]:
    mod = kio_compat.schema_module("offset_for_leader_epoch", version, "request")
    req = kio_compat.build(
        mod.OffsetForLeaderEpochRequest, replica_id=replica_id,
        topics=(mod.OffsetForLeaderTopic(topic=topic, partitions=(mod.OffsetForLeaderPartition(
            partition=partition, current_leader_epoch=current, leader_epoch=epoch),)),))
    p = raw.request(req).topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch(module_broker, version: int) -> None:
    topic = f"ofle-{version}"
    with RawClient(module_broker.bootstrap) as raw:
        raw.create_topic(topic, 2)
        for i in range(3):
            code, _ = raw.produce_one(topic, 0, build_batch([Record(b"k", b"v%d" % i)] * 2))
            assert code == ErrorCode.none
        # A new topic is led at epoch 0: epoch 0 ends at the log end (6 records).
        assert _ask(raw, version, topic, 0, 0) == (ErrorCode.none, 0, 6)
        assert _ask(raw, version, topic, 0, 5) == (ErrorCode.none, 0, 6)
        assert _ask(raw, version, topic, 1, 0) == (ErrorCode.none, -1, -1)  # empty log
        assert _ask(raw, version, topic, 0, 0, current=0) == (ErrorCode.none, 0, 6)
        assert _ask(raw, version, topic, 0, 0, current=7)[0] == ErrorCode.unknown_leader_epoch
        assert _ask(raw, version, topic, 9, 0)[0] == ErrorCode.unknown_topic_or_partition
        if version >= 3:
            assert _ask(raw, version, topic, 0, 0, replica_id=2) == (ErrorCode.none, 0, 6)
        p = raw.list_offset(topic, 0, -1)
        assert (p.error_code, p.offset) == (ErrorCode.none, 6)


def test_list_offsets_from_a_replica_answers_the_log_end(module_broker) -> None:
    topic = "ofle-replica-list"
    with RawClient(module_broker.bootstrap) as raw:
        raw.create_topic(topic, 1)
        raw.produce_one(topic, 0, build_batch([Record(b"k", b"v")] * 4))
        mod = kio_compat.schema_module("list_offsets", 7, "request")
        req = kio_compat.build(
            mod.ListOffsetsRequest, replica_id=3, isolation_level=0,
            topics=(mod.ListOffsetsTopic(name=topic, partitions=(kio_compat.build(
                mod.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
                timestamp=-1),)),))
        p = raw.request(req).topics[0].partitions[0]
        assert (p.error_code, p.offset, p.leader_epoch) == (ErrorCode.none, 4, 0)
