"""The in-flight state per batch seen through the wire (a real broker, raw ShareFetch and
ShareAcknowledge): an acknowledgement with a type per offset splits an acquired batch
(the released records alone come back, with delivery count 2), and a ShareFetch response
carries the request quota's throttle_time_ms (it is encoded by hand, before the
connection knows the throttle)."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

from tests.broker.rawclient import RawClient
from yak.client import KafkaClient
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

ACCEPT, RELEASE, REJECT = 1, 2, 3


def _join(c: RawClient, topic: str) -> uuid.UUID:
    mod = kio_compat.schema_module("share_group_heartbeat", 1, "request")
    r = c.request(mod.ShareGroupHeartbeatRequest(
        group_id="g", member_id="m1", member_epoch=0, subscribed_topic_names=(topic,)))
    assert r.error_code == ErrorCode.none, r
    (tp,) = r.assignment.topic_partitions
    return tp.topic_id


def _fetch(c: RawClient, epoch: int, tid: uuid.UUID) -> Any:
    mod = kio_compat.schema_module("share_fetch", 1, "request")
    topic = mod.FetchTopic(topic_id=tid, partitions=(mod.FetchPartition(
        partition_index=0, acknowledgement_batches=()),))
    r = c.request(mod.ShareFetchRequest(
        group_id="g", member_id="m1", share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, max_bytes=1 << 20,
        max_records=100, batch_size=100, topics=(topic,), forgotten_topics_data=()))
    assert r.error_code == ErrorCode.none, r
    return r


def _acquired(resp: Any) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in resp.responses for p in t.partitions for a in p.acquired_records]


def _ack(c: RawClient, epoch: int, tid: uuid.UUID, first: int, types: list[int]) -> list[int]:
    mod = kio_compat.schema_module("share_acknowledge", 1, "request")
    r = c.request(mod.ShareAcknowledgeRequest(
        group_id="g", member_id="m1", share_session_epoch=epoch, topics=(
            mod.AcknowledgeTopic(topic_id=tid, partitions=(mod.AcknowledgePartition(
                partition_index=0, acknowledgement_batches=(mod.AcknowledgementBatch(
                    first_offset=first, last_offset=first + len(types) - 1,
                    acknowledge_types=tuple(types)),)),)),)))
    assert r.error_code == ErrorCode.none, r
    return [p.error_code for t in r.responses for p in t.partitions]


def test_types_per_offset_split_an_acquired_batch(broker) -> None:
    with RawClient(broker.bootstrap) as c:
        c.create_topic("iw", 1)
        tid = _join(c, "iw")
        assert _acquired(_fetch(c, 0, tid)) == []  # the session opens at the log end
        batch = build_batch([Record(key=None, value=b"v%d" % i) for i in range(10)])
        assert c.produce_one("iw", 0, batch)[0] == ErrorCode.none
        assert _acquired(_fetch(c, 1, tid)) == [(0, 9, 1)]
        types = [ACCEPT] * 3 + [RELEASE] * 2 + [ACCEPT] * 2 + [REJECT] + [ACCEPT] * 2
        assert _ack(c, 2, tid, 0, types) == [ErrorCode.none]
        again = _fetch(c, 3, tid)
        assert _acquired(again) == [(3, 4, 2)]  # the released two alone, delivered again
        assert again.responses[0].partitions[0].records  # in their whole batch
        assert _ack(c, 4, tid, 2, [ACCEPT]) == [ErrorCode.invalid_record_state]  # done
        assert _ack(c, 5, tid, 3, [ACCEPT, ACCEPT]) == [ErrorCode.none]
        assert _acquired(_fetch(c, 6, tid)) == []


def test_a_share_fetch_carries_the_request_quota_throttle(broker) -> None:
    with RawClient(broker.bootstrap) as c:  # client id "yak"
        c.create_topic("iq", 1)
        tid = _join(c, "iq")
        first = _fetch(c, 0, tid)
        assert first.throttle_time == datetime.timedelta(0)
        with KafkaClient(broker.bootstrap) as admin:  # another client id
            res = admin.alter_client_quotas([({"client-id": "yak"},
                                              {"request_percentage": 1e-6})])
            assert [code for _, code, _ in res] == [0]
        epoch = 1
        deadline = time.monotonic() + 15
        while True:  # until the quota reaches the broker
            r = _fetch(c, epoch, tid)
            if r.throttle_time > datetime.timedelta(0):
                break
            assert time.monotonic() < deadline, "no ShareFetch was throttled"
            epoch += 1
            time.sleep(0.1)
