"""Share-group APIs with raw kio requests against a real broker: the session epoch rules,
INVALID_RECORD_STATE, UNKNOWN_MEMBER_ID, topics repeated in one request merged by id,
piggy-backed and standalone acknowledgements, ShareGroupDescribe."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from tests.broker.rawclient import RawClient
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

ACCEPT, RELEASE = 1, 2


def _hb(c: RawClient, member: str, epoch: int, topics: tuple[str, ...] | None) -> Any:
    mod = kio_compat.schema_module("share_group_heartbeat", 1, "request")
    return c.request(mod.ShareGroupHeartbeatRequest(
        group_id="g", member_id=member, member_epoch=epoch, subscribed_topic_names=topics))


def _fetch(c: RawClient, member: str, epoch: int, topic_id: uuid.UUID,
           acks: list[tuple[int, int, int]] = (), repeat: bool = False) -> Any:
    mod = kio_compat.schema_module("share_fetch", 1, "request")
    batches = tuple(mod.AcknowledgementBatch(first_offset=f, last_offset=last,
                                             acknowledge_types=(t,)) for f, last, t in acks)
    topic = mod.FetchTopic(topic_id=topic_id, partitions=(mod.FetchPartition(
        partition_index=0, acknowledgement_batches=batches),))
    extra = (mod.FetchTopic(topic_id=topic_id, partitions=(mod.FetchPartition(
        partition_index=0, acknowledgement_batches=()),)),) if repeat else ()
    return c.request(mod.ShareFetchRequest(
        group_id="g", member_id=member, share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, max_bytes=1 << 20,
        max_records=100, batch_size=100, topics=(topic, *extra), forgotten_topics_data=()))


def _ack(c: RawClient, member: str, epoch: int, topic_id: uuid.UUID,
         acks: list[tuple[int, int, int]]) -> Any:
    mod = kio_compat.schema_module("share_acknowledge", 1, "request")
    # one topic entry per batch: the broker merges them by id
    topics = tuple(mod.AcknowledgeTopic(topic_id=topic_id, partitions=(mod.AcknowledgePartition(
        partition_index=0, acknowledgement_batches=(mod.AcknowledgementBatch(
            first_offset=f, last_offset=last, acknowledge_types=(t,)),)),))
        for f, last, t in acks)
    return c.request(mod.ShareAcknowledgeRequest(
        group_id="g", member_id=member, share_session_epoch=epoch, topics=topics))


def _acquired(resp: Any) -> list[tuple[int, int, int]]:
    assert resp.error_code == ErrorCode.none, resp
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in resp.responses for p in t.partitions for a in p.acquired_records]


def test_share_apis_on_the_wire(broker) -> None:
    with RawClient(broker.bootstrap) as c:
        c.create_topic("w", 1)
        joined = _hb(c, "m1", 0, ("w",))
        assert joined.error_code == ErrorCode.none and joined.member_epoch == 1
        (tp,) = joined.assignment.topic_partitions
        tid = tp.topic_id
        assert tuple(tp.partitions) == (0,)
        assert _acquired(_fetch(c, "m1", 0, tid)) == []  # opens the session at the log end
        records = [Record(key=None, value=b"v%d" % i) for i in range(3)]
        assert c.produce_one("w", 0, build_batch(records))[0] == ErrorCode.none
        got = _fetch(c, "m1", 1, tid, repeat=True)
        assert len(got.responses) == 1 and len(got.responses[0].partitions) == 1
        assert _acquired(got) == [(0, 2, 1)]
        assert len(got.responses[0].partitions[0].records) > 0
        assert _fetch(c, "m1", 1, tid).error_code == ErrorCode.invalid_share_session_epoch
        r = _ack(c, "m1", 2, tid, [(0, 0, ACCEPT), (1, 1, RELEASE)])
        assert r.error_code == ErrorCode.none
        assert [p.error_code for t in r.responses for p in t.partitions] == [ErrorCode.none]
        r = _ack(c, "m1", 3, tid, [(0, 0, ACCEPT)])  # already acknowledged
        assert [p.error_code for t in r.responses for p in t.partitions] == [
            ErrorCode.invalid_record_state]
        # the released record comes again; the piggy-backed ack of offset 2 is applied first
        again = _fetch(c, "m1", 4, tid, acks=[(2, 2, ACCEPT)])
        assert _acquired(again) == [(1, 1, 2)]
        assert again.responses[0].partitions[0].acknowledge_error_code == 0
        assert _fetch(c, "nobody", 0, tid).error_code == ErrorCode.unknown_member_id
        assert _ack(c, "m1", 0, tid, []).error_code == ErrorCode.invalid_share_session_epoch
        assert _hb(c, "m2", 0, ("w",)).error_code == ErrorCode.none
        assert _fetch(c, "m2", 1, tid).error_code == ErrorCode.share_session_not_found

        mod = kio_compat.schema_module("share_group_describe", 1, "request")
        d = c.request(mod.ShareGroupDescribeRequest(group_ids=("g", "none"),
                                                    include_authorized_operations=False))
        g, missing = d.groups
        assert g.error_code == ErrorCode.none and g.group_state == "Stable"
        assert sorted(m.member_id for m in g.members) == ["m1", "m2"]
        assert missing.error_code == ErrorCode.group_id_not_found

        r = _ack(c, "m1", -1, tid, [(1, 1, ACCEPT)])  # the final request closes the session
        assert [p.error_code for t in r.responses for p in t.partitions] == [ErrorCode.none]
        assert _fetch(c, "m1", 5, tid).error_code == ErrorCode.share_session_not_found
        left = _hb(c, "m1", -1, None)
        assert left.error_code == ErrorCode.none and left.member_epoch == -1


def test_share_state_rpcs_on_the_wire(broker) -> None:
    """The share coordinator's RPCs (83-87), as another broker's share-partition leader
    sends them: initialize, write updates over it, read the merged state, the summary,
    a deposed leader fenced, delete."""
    tid = uuid.uuid4()

    def req(api: str, cls: str, data: str, parts: tuple[Any, ...], version: int = 0) -> Any:
        mod = kio_compat.schema_module(api, version, "request")
        return getattr(mod, cls)(group_id="sg", topics=(getattr(mod, data)(
            topic_id=tid, partitions=parts),))

    def one(resp: Any) -> Any:
        (t,) = resp.results
        assert t.topic_id == tid
        (p,) = t.partitions
        return p

    w = kio_compat.schema_module("write_share_group_state", 0, "request")
    r = kio_compat.schema_module("read_share_group_state", 0, "request")

    def write(leader_epoch: int, start: int, batches: list[tuple[int, int, int, int]]) -> Any:
        return one(c.request(req("write_share_group_state", "WriteShareGroupStateRequest",
                                 "WriteStateData", (w.PartitionData(
                                     partition=3, state_epoch=0, leader_epoch=leader_epoch,
                                     start_offset=start, state_batches=tuple(w.StateBatch(
                                         first_offset=a, last_offset=b, delivery_state=s,
                                         delivery_count=n) for a, b, s, n in batches)),))))

    def read(leader_epoch: int) -> Any:
        return one(c.request(req("read_share_group_state", "ReadShareGroupStateRequest",
                                 "ReadStateData", (r.PartitionData(
                                     partition=3, leader_epoch=leader_epoch),))))

    with RawClient(broker.bootstrap) as c:
        fresh = read(0)  # no state: Kafka 4.1+'s INVALID_REQUEST
        assert fresh.error_code == ErrorCode.invalid_request and fresh.start_offset == -1
        i = kio_compat.schema_module("initialize_share_group_state", 0, "request")
        init = c.request(req("initialize_share_group_state",
                             "InitializeShareGroupStateRequest", "InitializeStateData",
                             (i.PartitionData(partition=3, state_epoch=0, start_offset=10),)))
        assert one(init).error_code == ErrorCode.none
        # acquired 10..19 (count 1), then 10..14 accepted, 15 released twice (count 2)
        assert write(5, 10, [(10, 19, 0, 1)]).error_code == ErrorCode.none
        assert write(5, 15, [(10, 14, 2, 0), (15, 15, 0, 2)]).error_code == ErrorCode.none
        got = read(5)
        assert got.error_code == ErrorCode.none and got.start_offset == 15
        assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                for b in got.state_batches] == [(15, 15, 0, 2), (16, 19, 0, 1)]
        assert write(4, 15, []).error_code == ErrorCode.fenced_leader_epoch
        assert read(4).error_code == ErrorCode.fenced_leader_epoch
        s = kio_compat.schema_module("read_share_group_state_summary", 0, "request")
        summary = one(c.request(req(
            "read_share_group_state_summary", "ReadShareGroupStateSummaryRequest",
            "ReadStateSummaryData", (s.PartitionData(partition=3, leader_epoch=5),))))
        assert (summary.error_code, summary.start_offset, summary.leader_epoch) == (
            ErrorCode.none, 15, 5)
        d = kio_compat.schema_module("delete_share_group_state", 0, "request")
        gone = c.request(req("delete_share_group_state", "DeleteShareGroupStateRequest",
                             "DeleteStateData", (d.PartitionData(partition=3),)))
        assert one(gone).error_code == ErrorCode.none
        assert read(5).error_code == ErrorCode.invalid_request  # no state again


def test_share_groups_in_list_groups_describe_groups_and_find_coordinator(broker) -> None:
    """ListGroups shows share groups (type "share", and only them with that filter),
    DescribeGroups describes one, FindCoordinator key type 2 finds the coordinator of a
    share partition's state (this broker, which creates __share_group_state for it)."""
    import base64

    with RawClient(broker.bootstrap) as c:
        c.create_topic("w", 1)
        joined = _hb(c, "m1", 0, ("w",))
        assert joined.error_code == ErrorCode.none
        tid = joined.assignment.topic_partitions[0].topic_id
        lg = kio_compat.schema_module("list_groups", 5, "request")

        def listed(types: tuple[str, ...], states: tuple[str, ...] = ()) -> list[tuple]:
            r = c.request(lg.ListGroupsRequest(states_filter=states, types_filter=types))
            assert r.error_code == ErrorCode.none
            return sorted((g.group_id, g.group_type, g.group_state, g.protocol_type)
                          for g in r.groups)

        assert ("g", "share", "Stable", "share") in listed(())
        assert listed(("share",)) == [("g", "share", "Stable", "share")]
        assert listed(("classic",)) == []
        assert listed(("share",), ("Empty",)) == []
        dg = kio_compat.schema_module("describe_groups", 5, "request")
        (d,) = c.request(dg.DescribeGroupsRequest(
            groups=("g",), include_authorized_operations=False)).groups
        assert (d.error_code, d.group_state, d.protocol_type) == (ErrorCode.none, "Stable",
                                                                   "share")
        assert [m.member_id for m in d.members] == ["m1"]

        fc = kio_compat.schema_module("find_coordinator", 6, "request")
        tid_text = base64.urlsafe_b64encode(tid.bytes).rstrip(b"=").decode()
        key = f"g:{tid_text}:0"
        (found,) = c.request(fc.FindCoordinatorRequest(
            key_type=2, coordinator_keys=(key,))).coordinators
        assert (found.error_code, found.key) == (ErrorCode.none, key)
        assert found.port == int(broker.bootstrap.rsplit(":", 1)[1])
        (bad,) = c.request(fc.FindCoordinatorRequest(
            key_type=2, coordinator_keys=("no-partition",))).coordinators
        assert bad.error_code == ErrorCode.invalid_request


def test_describe_share_group_offsets(broker) -> None:
    """DescribeShareGroupOffsets (90): the start offset from the share coordinator and the
    lag (high watermark - start - records done above it); -1 for a share partition never
    initialized; UNKNOWN_TOPIC_OR_PARTITION for a missing topic; null topics = the
    members' subscriptions."""
    with RawClient(broker.bootstrap) as c:
        c.create_topic("w", 2)
        joined = _hb(c, "m1", 0, ("w",))
        tid = joined.assignment.topic_partitions[0].topic_id
        assert _acquired(_fetch(c, "m1", 0, tid)) == []  # partition 0 at the log end
        records = [Record(key=None, value=b"v%d" % i) for i in range(4)]
        assert c.produce_one("w", 0, build_batch(records))[0] == ErrorCode.none
        assert _acquired(_fetch(c, "m1", 1, tid)) == [(0, 3, 1)]
        r = _ack(c, "m1", 2, tid, [(0, 0, ACCEPT), (2, 2, ACCEPT)])
        assert [p.error_code for t in r.responses for p in t.partitions] == [ErrorCode.none]
        mod = kio_compat.schema_module("describe_share_group_offsets", 1, "request")

        def describe(topics: Any) -> Any:
            (g,) = c.request(mod.DescribeShareGroupOffsetsRequest(groups=(
                mod.DescribeShareGroupOffsetsRequestGroup(group_id="g", topics=topics),))
            ).groups
            assert g.error_code == ErrorCode.none
            return {(t.topic_name, p.partition_index): (p.error_code, p.start_offset, p.lag)
                    for t in g.topics for p in t.partitions}

        got = describe((mod.DescribeShareGroupOffsetsRequestTopic(
            topic_name="w", partitions=(0, 1)),
            mod.DescribeShareGroupOffsetsRequestTopic(topic_name="nope", partitions=(0,))))
        assert got == {("w", 0): (ErrorCode.none, 1, 2),  # 1 and 3 left of 0..3
                       ("w", 1): (ErrorCode.none, -1, -1),  # never fetched
                       ("nope", 0): (ErrorCode.unknown_topic_or_partition, -1, -1)}
        assert describe(None) == {("w", 0): (ErrorCode.none, 1, 2),
                                  ("w", 1): (ErrorCode.none, -1, -1)}


def test_alter_share_group_offsets_resets_the_start(broker) -> None:
    """AlterShareGroupOffsets (91): refused while the group has members; once it is empty,
    the share partition starts again where asked, nothing in flight, delivery counts
    from 1."""
    with RawClient(broker.bootstrap) as c:
        c.create_topic("w", 1)
        joined = _hb(c, "m1", 0, ("w",))
        tid = joined.assignment.topic_partitions[0].topic_id
        assert _acquired(_fetch(c, "m1", 0, tid)) == []
        records = [Record(key=None, value=b"v%d" % i) for i in range(4)]
        assert c.produce_one("w", 0, build_batch(records))[0] == ErrorCode.none
        assert _acquired(_fetch(c, "m1", 1, tid)) == [(0, 3, 1)]
        mod = kio_compat.schema_module("alter_share_group_offsets", 0, "request")

        def reset(start: int, partition: int = 0) -> list[int]:
            r = c.request(mod.AlterShareGroupOffsetsRequest(group_id="g", topics=(
                mod.AlterShareGroupOffsetsRequestTopic(topic_name="w", partitions=(
                    mod.AlterShareGroupOffsetsRequestPartition(
                        partition_index=partition, start_offset=start),)),)))
            assert r.error_code == ErrorCode.none
            return [p.error_code for t in r.responses for p in t.partitions]

        assert reset(1) == [ErrorCode.non_empty_group]
        r = _ack(c, "m1", -1, tid, [(0, 3, ACCEPT)])  # all done, session closed
        assert [p.error_code for t in r.responses for p in t.partitions] == [ErrorCode.none]
        assert _hb(c, "m1", -1, None).error_code == ErrorCode.none
        assert reset(1, partition=5) == [ErrorCode.unknown_topic_or_partition]
        assert reset(1) == [ErrorCode.none]
        assert _hb(c, "m2", 0, ("w",)).error_code == ErrorCode.none
        assert _acquired(_fetch(c, "m2", 0, tid)) == [(1, 3, 1)]  # again, from 1
