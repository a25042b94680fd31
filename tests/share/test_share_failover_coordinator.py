"""A broker that was a share group's coordinator once, and leads one of its share
partitions again, serves the group's members (issue 24, docs/reliability.md finding 2).

Membership is in memory on the group's coordinator. The share chaos run that found the
stuck share partitions had paused broker 1, the group's coordinator then, past its
session: the coordinator moved to broker 2 and the members joined there; 10 s later
broker 1 took over two share partitions from a killed broker and handed out none of
their records. Broker 1 still held the group with the members it had known. Once they
went silent there it removed them, closing their share sessions, and refused the
ShareFetch opening a new one (UNKNOWN_MEMBER_ID). Here the same moves are made with raw
requests, so each step is certain: the member heartbeats the coordinator, the coordinator
is paused past its broker session, the member joins the new coordinator, the old one
leads the share partition again (a preferred-leader election) and must hand its records
to the member; a heartbeat to it is NOT_COORDINATOR."""

from __future__ import annotations

import datetime
import os
import signal
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, ResourceType

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 (fixtures)
from tests.cluster.test_cluster_groups import _coordinator
from tests.cluster.test_cluster_metadata import _metadata
from tests.share.test_share_cluster import _set, _topic_id
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

T = 20
SESSION_MS = 6000
MEMBER = str(uuid.uuid4())


def _wait(cond: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if cond():
                return
        except (OSError, ConnectionError):
            pass
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _hb(bootstrap: str, epoch: int) -> Any:
    mod = kio_compat.schema_module("share_group_heartbeat", 1, "request")
    with RawClient(bootstrap) as c:
        return c.request(mod.ShareGroupHeartbeatRequest(
            group_id="g", member_id=MEMBER, member_epoch=epoch,
            subscribed_topic_names=("q",) if epoch == 0 else None))


def _fetch(c: RawClient, epoch: int, topic_id: uuid.UUID) -> Any:
    mod = kio_compat.schema_module("share_fetch", 1, "request")
    return c.request(mod.ShareFetchRequest(
        group_id="g", member_id=MEMBER, share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=200), min_bytes=1, max_bytes=1 << 20,
        max_records=100, batch_size=100, forgotten_topics_data=(),
        topics=(mod.FetchTopic(topic_id=topic_id, partitions=(mod.FetchPartition(
            partition_index=0, acknowledgement_batches=()),)),)))


@pytest.mark.slow
def test_a_former_group_coordinator_serves_the_members_that_moved_on(
        cluster_factory) -> None:  # noqa: F811 (the fixture imported above)
    c = cluster_factory(3, **{
        "auto.leader.rebalance.enable": "false",
        "group.share.session.timeout.ms": str(SESSION_MS),
        "group.share.min.session.timeout.ms": str(SESSION_MS),
        "group.share.heartbeat.interval.ms": "1000",
        "group.share.min.heartbeat.interval.ms": "1000"})
    found: list[tuple[int, int]] = []
    _wait(lambda: found.append(_coordinator(c[1].bootstrap, "g")) or found[-1][0] == 0, T,
          "the group's coordinator")
    old = found[-1][1]
    others = [b for b in c.brokers if b != old]
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    # the coordinator is q-0's preferred leader
    a.create_topics([NewTopic("q", 3, replica_assignment=[
        [old, *others], [others[0], others[1], old], [others[1], old, others[0]]],
        config={"min.insync.replicas": "2"})])["q"].result(T)
    _wait(lambda: _metadata(c[1].bootstrap, "q")[2][0][1] == old, T, "q-0 led by " + str(old))
    _set(a, ResourceType.GROUP, "g", **{"share.auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(30):
        p.produce("q", b"v%d" % i, partition=0)
    assert p.flush(T) == 0
    tid = _topic_id(c[1].bootstrap, "q")

    joined = _hb(c[old].bootstrap, 0)  # the member joins at the coordinator
    assert joined.error_code == ErrorCode.none, joined
    # paused past its broker session: its leadership moves, the member joins elsewhere
    os.kill(c[old].pid, signal.SIGSTOP)
    try:
        _wait(lambda: _coordinator(c[others[0]].bootstrap, "g")[1] not in (old, -1), T,
              "a new coordinator")
    finally:
        os.kill(c[old].pid, signal.SIGCONT)
    new = _coordinator(c[others[0]].bootstrap, "g")[1]
    epoch = _hb(c[new].bootstrap, 0).member_epoch
    _wait(lambda: old in _metadata(c[new].bootstrap, "q")[2][0][4], 40,
          "the old coordinator back in q-0's ISR")
    tp = TopicPartition("q", 0)
    assert a.elect_leaders(ElectionType.PREFERRED, [tp]).result(T)[tp] is None
    _wait(lambda: _metadata(c[old].bootstrap, "q")[2][0][1] == old, T, "q-0 led by the old")
    # the member heartbeats its coordinator for longer than the session timeout, silent
    # at the old one
    end = time.monotonic() + SESSION_MS / 1000 + 3
    while time.monotonic() < end:
        hb = _hb(c[new].bootstrap, epoch)
        assert hb.error_code == ErrorCode.none, hb
        epoch = hb.member_epoch
        time.sleep(1)
    # the old coordinator, q-0's leader, hands q-0's records to the member
    got: list[tuple[int, int]] = []
    with RawClient(c[old].bootstrap) as raw:
        session = 0
        end = time.monotonic() + T
        while not got and time.monotonic() < end:
            r = _fetch(raw, session, tid)
            assert r.error_code == ErrorCode.none, r
            session += 1
            got = [(x.first_offset, x.last_offset) for t in r.responses
                   for part in t.partitions for x in part.acquired_records]
    assert got and got[0][0] == 0, got
    # and it keeps no group it does not coordinate: a heartbeat there is refused
    stale = _hb(c[old].bootstrap, 0)
    assert stale.error_code == ErrorCode.not_coordinator, stale
