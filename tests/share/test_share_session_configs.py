"""A share group's own `share.heartbeat.interval.ms` and `share.session.timeout.ms`
(GROUP resource, issue 24) in effect on a real `yak serve`, with raw ShareGroupHeartbeat
requests: the response carries the group's interval, and a silent member is gone after
the group's session timeout while a plain group's member (the broker's 45 s) is kept."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import ResourceType as RT

from tests.broker.rawclient import RawClient
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def sg_broker(broker_factory: Callable[..., Any]) -> Any:
    return broker_factory(**{"group.share.min.session.timeout.ms": "1000",
                             "group.share.min.heartbeat.interval.ms": "500"})


def hb(c: RawClient, group: str, member: str, epoch: int,
       topics: tuple[str, ...] | None = None) -> Any:
    mod = kio_compat.schema_module("share_group_heartbeat", 1, "request")
    return c.request(mod.ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
        subscribed_topic_names=topics))


def ms(r: Any) -> int:
    return int(r.heartbeat_interval.total_seconds() * 1000)


def test_share_session_and_heartbeat_are_the_groups(sg_broker) -> None:
    bs = sg_broker.bootstrap
    a = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(RT.GROUP, "sg-short", incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in (("share.session.timeout.ms", "2000"),
                     ("share.heartbeat.interval.ms", "700"))])
    a.incremental_alter_configs([res])[res].result(15)
    with RawClient(bs) as c:
        c.create_topic("ss", 1)
        short = hb(c, "sg-short", str(uuid.uuid4()), 0, ("ss",))
        plain = hb(c, "sg-plain", str(uuid.uuid4()), 0, ("ss",))
        assert short.error_code is ErrorCode.none and plain.error_code is ErrorCode.none
        assert (ms(short), ms(plain)) == (700, 5000)
        time.sleep(4.0)  # silent past the group's 2 s, far below the broker's 45 s
        gone = hb(c, "sg-short", short.member_id, short.member_epoch)
        kept = hb(c, "sg-plain", plain.member_id, plain.member_epoch)
    assert gone.error_code is ErrorCode.unknown_member_id
    assert kept.error_code is ErrorCode.none
