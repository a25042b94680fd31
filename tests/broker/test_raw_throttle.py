"""The request quota's throttle (KIP-124 `request_percentage`) reaches the hand-encoded
Produce and Fetch responses too. It is known only after the handler, so the connection
writes it into the encoded body (`RawResponse.throttle_offset`); before, those responses
carried 0 while the connection was muted, and a client could not tell why it waited."""

from __future__ import annotations

import datetime
import time

import pytest

from yak.client import KafkaClient
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

from .rawclient import RawClient


@pytest.mark.parametrize("produce_version", [3, 8, 9])
def test_produce_and_fetch_carry_the_request_quota_throttle(broker, produce_version) -> None:
    topic = f"raw-throttle-{produce_version}"
    with RawClient(broker.bootstrap) as c:  # client id "yak"
        c.create_topic(topic, 1)
        batch = build_batch([Record(b"k", b"v" * 100)])
        first = c.produce(topic, {0: batch}, version=produce_version)
        assert first.throttle_time == datetime.timedelta(0)
        with KafkaClient(broker.bootstrap) as admin:  # another client id
            res = admin.alter_client_quotas([({"client-id": "yak"},
                                              {"request_percentage": 1e-6})])
            assert [code for _, code, _ in res] == [0]
        deadline = time.monotonic() + 15
        while True:  # until the quota reaches the broker
            r = c.produce(topic, {0: batch}, version=produce_version)
            p = r.responses[0].partition_responses[0]
            assert p.error_code == ErrorCode.none
            if r.throttle_time > datetime.timedelta(0):
                break
            assert time.monotonic() < deadline, "no Produce was throttled"
            time.sleep(0.1)
        f = c.fetch(topic, 0, 0)
        assert f.throttle_time > datetime.timedelta(0)
        assert f.responses[0].partitions[0].error_code == ErrorCode.none
