"""`InterBrokerClient` (markers and KIP-890 verification between brokers) against a real
broker: a request abandoned before its response was read must not leave that response
for the next request on the connection (issue 16's CI chaos run: a verification cancelled
with its Produce left every later WriteTxnMarkers to that broker off by one correlation
id, so a transaction never completed and its producer's InitProducerId waited forever)."""

from __future__ import annotations

import asyncio
import datetime

from confluent_kafka.admin import AdminClient, NewTopic

from tests.waiting import await_until
from yak.cluster.inter_broker import InterBrokerClient
from yak.protocol import kio_compat


def _fetch(topic: str, wait_ms: int) -> object:
    mod = kio_compat.schema_module("fetch", 12, "request")
    part = kio_compat.build(mod.FetchPartition, partition=0, fetch_offset=0,
                            partition_max_bytes=1 << 20, current_leader_epoch=-1,
                            log_start_offset=-1, last_fetched_epoch=-1)
    return kio_compat.build(
        mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=wait_ms),
        min_bytes=1 if wait_ms else 0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1,
        topics=(kio_compat.build(mod.FetchTopic, topic=topic, partitions=(part,)),),
        forgotten_topics_data=(), rack_id="")


def test_a_cancelled_request_does_not_shift_the_next_responses(broker) -> None:
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_topics([NewTopic("ib", 1, 1)])["ib"].result(30)

    async def body() -> None:
        client = InterBrokerClient(9, lambda node: ("127.0.0.1", broker.port), timeout_s=10)
        try:
            # The broker holds this one (an empty partition, min_bytes 1) for 3 s.
            held = asyncio.ensure_future(client.request(1, _fetch("ib", 3000)))
            await await_until(lambda: 1 in client._conns and client._conns[1].in_flight == 1,
                              10, "the held fetch written")
            held.cancel()
            await asyncio.gather(held, return_exceptions=True)
            loop = asyncio.get_running_loop()
            for _ in range(3):
                start = loop.time()
                r = await client.request(1, _fetch("ib", 0))
                assert int(r.responses[0].partitions[0].error_code) == 0
                assert loop.time() - start < 2.0  # its own answer, not the held one's
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(body(), 30))


def test_requests_to_one_broker_are_pipelined_on_one_connection(broker) -> None:
    """Markers to several partitions of one leader, a verification behind a held request:
    they share the broker's one connection, in flight together, each with its own answer."""
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_topics([NewTopic("ib-pipe", 1, 1)])["ib-pipe"].result(30)

    async def body() -> None:
        client = InterBrokerClient(9, lambda node: ("127.0.0.1", broker.port), timeout_s=10)
        try:
            await client.request(1, _fetch("ib-pipe", 0))  # opened
            conn = client._conns[1]
            held = asyncio.ensure_future(client.request(1, _fetch("ib-pipe", 1000)))
            quick = [asyncio.ensure_future(client.request(1, _fetch("ib-pipe", 0)))
                     for _ in range(5)]
            # all written, none answered before the held one
            await await_until(lambda: conn.in_flight == 6, 10, "six requests in flight")
            rs = await asyncio.gather(held, *quick)
            assert all(int(r.responses[0].partitions[0].error_code) == 0 for r in rs)
            assert client._conns[1] is conn and conn.is_open  # one connection throughout
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(body(), 30))
