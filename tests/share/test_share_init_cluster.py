"""The group coordinator's InitializeShareGroupState on a 3-broker cluster (etcd): a
member's join (a raw ShareGroupHeartbeat to the group's coordinator, no fetch at all)
makes every assigned share partition's state exist at its share coordinator, wherever
that is (in process or RPC 83 to another broker), with Kafka's uninitialized start (-1);
before any join the coordinators answer INVALID_REQUEST (no state). The leaders then
choose the start by `share.auto.offset.reset` on their first read (earliest: every
record), and a second member's join leaves the states as they are."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 (fixtures)
from tests.cluster.test_cluster_metadata import _metadata
from tests.share.test_share_cluster import _topic_id
from tests.share.test_share_delete_cluster import _consume, _earliest, _state
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.share.records import SHARE_STATE_TOPIC

T = 20
N = 5


def _join(c: Any, group: str, member: str) -> Any:
    """ShareGroupHeartbeat epoch 0 at the group's coordinator (the broker that does not
    answer NOT_COORDINATOR); the answer."""
    mod = kio_compat.schema_module("share_group_heartbeat", 1, "request")
    req = mod.ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=0,
                                         subscribed_topic_names=("q",))
    end = time.monotonic() + T
    while True:
        for b in c.brokers.values():
            with RawClient(b.bootstrap) as raw:
                r = raw.request(req)
            if r.error_code not in (ErrorCode.not_coordinator,
                                    ErrorCode.coordinator_not_available,
                                    ErrorCode.coordinator_load_in_progress):
                return r
        assert time.monotonic() < end, "no group coordinator answered"
        time.sleep(0.3)


def test_a_join_initializes_every_assigned_share_partition_at_its_coordinator(
        cluster_factory) -> None:  # noqa: F811 (the fixture imported above)
    c = cluster_factory(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("q", 3, 3)])["q"].result(T)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(3 * N):
        p.produce("q", b"v%d" % i, partition=i % 3)
    assert p.flush(T) == 0
    tid = _topic_id(c[1].bootstrap, "q")
    _earliest(admin, "g")
    joined = _join(c, "g", "m1")
    assert joined.error_code == ErrorCode.none
    assert [(t.topic_id, sorted(t.partitions))
            for t in joined.assignment.topic_partitions] == [(tid, [0, 1, 2])]
    # the states exist (start -1: no start chosen yet) at their coordinators, which are
    # not all the group's coordinator (one __share_group_state leader per broker)
    assert [_state(c, "g", tid, part) for part in range(3)] == [(ErrorCode.none, -1)] * 3
    state_leaders = {leader for _, leader, *_ in _metadata(c[1].bootstrap,
                                                           SHARE_STATE_TOPIC)[2]}
    assert len(state_leaders) >= 2, state_leaders
    # never-joined groups have none: Kafka 4.1+'s answer to a read of no state
    assert _state(c, "other", tid, 0) == (ErrorCode.invalid_request, -1)
    # the leaders choose the start (earliest) on their first read; a consumer gets all
    seen = _consume(c.bootstrap, "g", 3 * N)
    assert set(seen) == {f"{part}:{o}" for part in range(3) for o in range(N)}, seen
    assert all(counts == [1] for counts in seen.values()), seen
    assert [_state(c, "g", tid, part) for part in range(3)] == [(ErrorCode.none, N)] * 3
    # another member's join initializes again: the states are left as they are
    assert _join(c, "g", "m2").error_code == ErrorCode.none
    assert [_state(c, "g", tid, part) for part in range(3)] == [(ErrorCode.none, N)] * 3
