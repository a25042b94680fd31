"""Deleting a share group on a 3-broker cluster (etcd), through confluent-kafka's
AdminClient: its share partitions are led by three brokers and their state is
coordinated by whichever brokers lead their `__share_group_state` partitions. After the
delete every share coordinator has forgotten the group (ReadShareGroupState answers
Kafka's INVALID_REQUEST: no state) and so has every share-partition leader: the group
created again with the same id consumes from `share.auto.offset.reset` (earliest: every
record again, at delivery count 1), not from the deleted group's start (the log end,
where a leader's kept window would leave it).

The member that makes the group non-empty is closed only once librdkafka's own statistics
say its join was answered and its assignment applied: librdkafka (2.16) sends no leave
for a join whose answer it has not read (the group then stays non-empty for the whole
share session), and a close while that answer's assignment is being applied never
returns (it waits for partitions assigned after the close began). A leave can still be
lost (one answered NOT_COORDINATOR is not retried), and Kafka's answer to that is the
session timeout: the brokers give share groups a 6 s session (1 s heartbeats) instead
of 45 s, and the delete is retried past it."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from confluent_kafka import KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 (fixtures)
from tests.cluster.test_cluster_metadata import _metadata
from tests.share.test_share_cluster import _topic_id
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.share.records import SHARE_STATE_TOPIC, ShareKey, partition_for

T = 20
N = 10  # records per partition
# a short share session (Kafka's settings, bounds lowered to allow it): a member whose
# leave was lost is gone within ~7 s (the session and the 1 s expiry sweep), under T
SHORT_SESSION = {"group.share.session.timeout.ms": "6000",
                 "group.share.min.session.timeout.ms": "6000",
                 "group.share.heartbeat.interval.ms": "1000",
                 "group.share.min.heartbeat.interval.ms": "1000"}


def _earliest(admin: AdminClient, group: str) -> None:
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(T)


def _delete_group(admin: AdminClient, group: str) -> str | None:
    """The error's name, None when deleted."""
    try:
        admin.delete_consumer_groups([group], request_timeout=T)[group].result(T + 5)
    except KafkaException as e:
        return e.args[0].name()
    return None


def _state(c: Any, group: str, tid: uuid.UUID, partition: int) -> tuple[int, int]:
    """(error code, start offset) of ReadShareGroupState (no leader epoch) at the share
    coordinator of the key, as a share-partition leader elsewhere would ask it."""
    mod = kio_compat.schema_module("read_share_group_state", 0, "request")
    req = kio_compat.build(mod.ReadShareGroupStateRequest, group_id=group, topics=(
        kio_compat.build(mod.ReadStateData, topic_id=tid, partitions=(
            kio_compat.build(mod.PartitionData, partition=partition, leader_epoch=-1),)),))
    end = time.monotonic() + T
    while True:
        state = _metadata(c[1].bootstrap, SHARE_STATE_TOPIC)[2]
        node = state[partition_for(ShareKey(group, tid, partition), len(state))][1]
        if node > 0:
            with RawClient(c[node].bootstrap) as raw:
                (t,) = raw.request(req).results
            (p,) = t.partitions
            if p.error_code not in (ErrorCode.not_coordinator,
                                    ErrorCode.coordinator_load_in_progress):
                return p.error_code, p.start_offset
        assert time.monotonic() < end, "no share coordinator answered"
        time.sleep(0.3)


def _group_state(c: Any, group: str) -> str | None:
    """The share group's state as its coordinator lists it (ListGroups v5 on every
    broker: only the coordinator keeps a share group)."""
    mod = kio_compat.schema_module("list_groups", 5, "request")
    for b in c.brokers.values():
        with RawClient(b.bootstrap) as raw:
            r = raw.request(mod.ListGroupsRequest(states_filter=(), types_filter=("share",)))
        for g in r.groups:
            if g.group_id == group:
                return g.group_state
    return None


def _consume(bs: str, group: str, want: int, timeout: float = 40) -> dict[str, list[int]]:
    """{"partition:offset": delivery counts} from a new consumer, until `want` records
    came and then nothing more for 2 s; acknowledged (implicit) and closed."""
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    seen: dict[str, list[int]] = {}
    try:
        c.subscribe(["q"])
        end = time.monotonic() + timeout
        quiet = None
        while time.monotonic() < end:
            got = c.poll(0.2)
            for m in got:
                assert m.error() is None, m.error()
                seen.setdefault(f"{m.partition()}:{m.offset()}", []).append(
                    m.delivery_count())
            if len(seen) >= want:
                quiet = quiet or time.monotonic()
                if got:
                    quiet = time.monotonic()
                if time.monotonic() - quiet > 2:
                    break
        c.commit_sync()
    finally:
        c.close()
    return seen


def test_a_deleted_share_group_is_forgotten_by_every_leader_and_coordinator(
        cluster_factory) -> None:  # noqa: F811 (the fixture imported above)
    c = cluster_factory(3, **SHORT_SESSION)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("q", 3, 3)])["q"].result(T)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(3 * N):
        p.produce("q", b"v%d" % i, partition=i % 3)
    assert p.flush(T) == 0
    leaders = {leader for _, leader, *_ in _metadata(c[1].bootstrap, "q")[2]}
    assert len(leaders) >= 2, leaders  # so some leader is not the group's coordinator
    tid = _topic_id(c[1].bootstrap, "q")
    _earliest(admin, "g")
    every = {f"{part}:{o}" for part in range(3) for o in range(N)}
    first = _consume(c.bootstrap, "g", 3 * N)
    assert set(first) == every, first
    # accepted: every share partition's state starts at the log end, at its coordinator
    assert [_state(c, "g", tid, part) for part in range(3)] == [(ErrorCode.none, N)] * 3

    # a member in the group: Kafka's NON_EMPTY_GROUP (GROUP_NOT_EMPTY), nothing deleted
    cgrp: list[dict[str, Any]] = []  # librdkafka's statistics of the member's group
    member = ShareConsumer({
        "bootstrap.servers": c.bootstrap, "group.id": "g", "statistics.interval.ms": 100,
        "stats_cb": lambda s: cgrp.append(json.loads(s).get("cgrp") or {})})
    try:
        member.subscribe(["q"])
        end = time.monotonic() + T
        # joined as the client sees it (the join's answer read, its 3 partitions applied;
        # see the module's docstring): only then does its close send a leave, and return
        while not (cgrp and cgrp[-1].get("join_state") == "steady"
                   and cgrp[-1].get("assignment_size") == 3):
            assert time.monotonic() < end, f"the member never joined: {cgrp[-1:]}"
            member.poll(0.2)
        assert _group_state(c, "g") == "Stable"
        assert _delete_group(admin, "g") == "NON_EMPTY_GROUP"
    finally:
        member.close()
    assert [_state(c, "g", tid, part)[0] for part in range(3)] == [ErrorCode.none] * 3
    end = time.monotonic() + T
    # its leave on the way (or, were it lost, its 6 s session running out)
    while (err := _delete_group(admin, "g")) == "NON_EMPTY_GROUP":
        assert time.monotonic() < end
        time.sleep(0.3)
    assert err is None, err
    assert _delete_group(admin, "g") == "GROUP_ID_NOT_FOUND"
    # every share coordinator forgot it: no state (Kafka 4.1+'s INVALID_REQUEST)
    assert [_state(c, "g", tid, part) for part in range(3)] == [
        (ErrorCode.invalid_request, -1)] * 3

    # the same group id again: every record from the start, each at its first delivery
    # (the configs went with the group: earliest set again)
    _earliest(admin, "g")
    again = _consume(c.bootstrap, "g", 3 * N)
    assert set(again) == every, sorted(every - set(again))
    assert all(counts == [1] for counts in again.values()), again
    assert [_state(c, "g", tid, part) for part in range(3)] == [(ErrorCode.none, N)] * 3
