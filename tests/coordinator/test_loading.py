"""A big coordinator shard loads without stalling the broker (issue 22).

A real broker (production's `start_broker`, real files and sockets) with one
`__consumer_offsets` partition holding 200,000 committed offsets, restarted; then its
shard is loaded again by a leadership change (resign, elect). While it replays, in chunks
that yield to the event loop, unmodified aiokafka clients get their Metadata and Produce
answered, and an OffsetFetch for the loading group is answered
COORDINATOR_LOAD_IN_PROGRESS (Kafka's code: the client retries); once loaded, every
offset is there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.commit import OffsetFetchRequest

from yak.broker.server import RunningBroker, start_broker
from yak.config import BrokerConfig
from yak.errors import ErrorCode
from yak.group.coordinator import OffsetToCommit

pytestmark = pytest.mark.timeout(240)

GROUP = "big"
PER_COMMIT = 1000
COMMITS = 200  # 200,000 offsets: a few MiB of __consumer_offsets, dozens of load chunks


def run_broker(data_dir: Path, body: Callable[[RunningBroker], Awaitable[None]]) -> None:
    async def main() -> None:
        cfg = BrokerConfig.from_settings({
            "log.dirs": str(data_dir), "listeners": "PLAINTEXT://127.0.0.1:0",
            "offsets.topic.num.partitions": "1"})
        running = await start_broker(cfg)
        try:
            await body(running)
        finally:
            await running.stop()

    asyncio.run(main())


def test_requests_are_served_while_a_big_offsets_shard_loads(tmp_path: Path) -> None:
    async def write(running: RunningBroker) -> None:
        coord = running.broker.group_coordinator
        for c in range(COMMITS):
            offsets = [OffsetToCommit("t", c * PER_COMMIT + i, i) for i in range(PER_COMMIT)]
            codes = await coord.commit_offsets(GROUP, -1, "", None, offsets)
            assert set(codes) == {ErrorCode.none}

    async def reload(running: RunningBroker) -> None:
        coord = running.broker.group_coordinator
        port = running.port
        assert await coord.runtime.wait_loaded(0, 120_000)  # the start-up load
        assert len(coord.fetch_offsets(GROUP, None)[1]) == COMMITS * PER_COMMIT
        producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{port}")
        client = AIOKafkaClient(bootstrap_servers=f"127.0.0.1:{port}")
        await producer.start()
        await client.bootstrap()
        try:
            await producer.send_and_wait("t", b"before")  # creates "t"
            epoch = coord.writer.leader_epoch(0)
            assert epoch is not None
            gaps: list[float] = []

            async def tick() -> None:  # how long the loop goes without running us
                last = time.monotonic()
                while True:
                    await asyncio.sleep(0)
                    now = time.monotonic()
                    gaps.append(now - last)
                    last = now

            ticker = asyncio.get_running_loop().create_task(tick())
            coord.on_resignation(0, epoch)
            started = time.monotonic()
            coord.on_election(0, epoch)  # the shard is replayed again
            assert coord.partition_loading(0), "the load finished in its first step"

            # Served during the load: Metadata, a Produce (acks=all), and an OffsetFetch
            # for the loading group answered COORDINATOR_LOAD_IN_PROGRESS.
            served: list[str] = []
            md = await client.fetch_all_metadata()
            assert "t" in md.topics()
            served.append("metadata")
            assert coord.partition_loading(0)
            meta = await producer.send_and_wait("t", b"during")
            assert meta.offset >= 1
            served.append("produce")
            assert coord.partition_loading(0)
            node = next(iter(b.nodeId for b in md.brokers()))
            resp = await client.send(node, OffsetFetchRequest(GROUP, [("t", [0])]))
            codes = {p[3] for _t, parts in resp.topics for p in parts}
            assert codes == {ErrorCode.coordinator_load_in_progress.value}, codes
            served.append("offset_fetch")
            assert coord.partition_loading(0), f"load ended before {served} were all answered"
            during = time.monotonic() - started

            assert await coord.runtime.wait_loaded(0, 120_000)
            loaded = time.monotonic() - started
            ticker.cancel()
            err, got = coord.fetch_offsets(GROUP, None)
            assert err is ErrorCode.none and len(got) == COMMITS * PER_COMMIT
            assert {(f.partition, f.offset) for f in got[:3]} == {(0, 0), (1, 1), (2, 2)}
            gaps.sort()
            print(f"load took {loaded:.2f}s; {served} answered within {during:.2f}s of it; "
                  f"event loop turns during the load: {len(gaps)}, longest "
                  f"{gaps[-1] * 1000:.0f} ms, median {gaps[len(gaps) // 2] * 1000:.1f} ms")
        finally:
            await producer.stop()
            await client.close()

    run_broker(tmp_path, write)
    run_broker(tmp_path, reload)
