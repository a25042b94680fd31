"""A KIP-848 consumer group's own `consumer.heartbeat.interval.ms` and
`consumer.session.timeout.ms` (GROUP resource, issue 24) are in effect on a real `yak
serve`: the ConsumerGroupHeartbeat response carries the group's interval (raw kio
requests), a silent member is dropped after the group's session timeout, and
confluent-kafka's consumer (group.protocol=consumer) gets the partitions of a member
that went silent within that timeout, not the broker's 45 s."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.broker.rawclient import RawClient
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

pytestmark = pytest.mark.timeout(120)

T = 15
WAIT = (ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress)


@pytest.fixture
def cg_broker(broker_factory: Callable[..., Any]) -> Any:
    # bounds low enough for a test's timeouts; the broker's own values stay Kafka's
    return broker_factory(**{"group.consumer.min.heartbeat.interval.ms": "500",
                             "group.consumer.min.session.timeout.ms": "1000"})


def set_group(bs: str, group: str, **configs: str) -> None:
    a = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    a.incremental_alter_configs([res])[res].result(T)


def topic(bs: str, name: str, partitions: int) -> None:
    a = AdminClient({"bootstrap.servers": bs})  # kept alive until the result
    a.create_topics([NewTopic(name, partitions, 1)])[name].result(T)


def heartbeat(c: RawClient, group: str, member_id: str, epoch: int,
              topics: tuple[str, ...] | None = None) -> Any:
    mod = kio_compat.schema_module("consumer_group_heartbeat", 0, "request")
    return c.request(kio_compat.build(
        mod.ConsumerGroupHeartbeatRequest, group_id=group, member_id=member_id,
        member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=topics,
        server_assignor=None, topic_partitions=() if epoch == 0 else None))


def join(c: RawClient, group: str, name: str) -> tuple[str, Any]:
    member = str(uuid.uuid4())
    mod = kio_compat.schema_module("find_coordinator", 4, "request")
    c.request(kio_compat.build(mod.FindCoordinatorRequest, key_type=0,
                               coordinator_keys=(group,)))  # creates __consumer_offsets
    deadline = time.monotonic() + T
    r = heartbeat(c, group, member, 0, (name,))
    while r.error_code in WAIT and time.monotonic() < deadline:  # __consumer_offsets loading
        time.sleep(0.2)
        r = heartbeat(c, group, member, 0, (name,))
    assert r.error_code is ErrorCode.none, r
    return r.member_id or member, r


def ms(td: datetime.timedelta) -> int:
    return int(td.total_seconds() * 1000)


def test_heartbeat_interval_is_the_groups(cg_broker) -> None:
    bs = cg_broker.bootstrap
    topic(bs, "hb", 2)
    set_group(bs, "cg-fast", consumer_heartbeat_interval_ms="1000")
    with RawClient(bs) as c:
        _, fast = join(c, "cg-fast", "hb")
        member, plain = join(c, "cg-plain", "hb")
        assert ms(fast.heartbeat_interval) == 1000
        assert ms(plain.heartbeat_interval) == 5000  # the broker's default
        # a change applies at the member's next heartbeat
        set_group(bs, "cg-plain", consumer_heartbeat_interval_ms="2000")
        again = heartbeat(c, "cg-plain", member, plain.member_epoch)
        assert again.error_code is ErrorCode.none, again
        assert ms(again.heartbeat_interval) == 2000


def test_silent_member_expires_after_the_groups_session_timeout(cg_broker) -> None:
    bs = cg_broker.bootstrap
    topic(bs, "st", 2)
    set_group(bs, "cg-short", consumer_session_timeout_ms="2000",
              consumer_heartbeat_interval_ms="500")
    with RawClient(bs) as c:
        short, r1 = join(c, "cg-short", "st")
        long_, r2 = join(c, "cg-long", "st")
        time.sleep(4.0)  # silent: past 2 s, far below the broker's 45 s
        gone = heartbeat(c, "cg-short", short, r1.member_epoch)
        kept = heartbeat(c, "cg-long", long_, r2.member_epoch)
    assert gone.error_code is ErrorCode.unknown_member_id
    assert kept.error_code is ErrorCode.none


def test_librdkafka_consumer_takes_over_within_the_groups_session_timeout(cg_broker) -> None:
    bs = cg_broker.bootstrap
    topic(bs, "to", 3)
    p = Producer({"bootstrap.servers": bs})
    for i in range(30):
        p.produce("to", b"%d" % i, partition=i % 3)
    assert p.flush(T) == 0
    set_group(bs, "cg-to", consumer_session_timeout_ms="2000",
              consumer_heartbeat_interval_ms="1000")
    with RawClient(bs) as raw:
        join(raw, "cg-to", "to")  # holds all 3 partitions, then never heartbeats again
        started = time.monotonic()
        c = Consumer({"bootstrap.servers": bs, "group.id": "cg-to",
                      "group.protocol": "consumer", "auto.offset.reset": "earliest"})
        try:
            c.subscribe(["to"])
            got: set[bytes] = set()
            while len(got) < 30 and time.monotonic() - started < 30:
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    got.add(m.value())
            took = time.monotonic() - started
        finally:
            c.close()
    assert got == {b"%d" % i for i in range(30)}
    # the silent member's partitions came free after the group's 2 s session timeout
    assert took < 15, took
