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
