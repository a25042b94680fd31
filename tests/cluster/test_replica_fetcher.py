"""Replica fetchers over real sockets: in-process brokers (`start_broker`, each its own data
dir and listener on 127.0.0.1), partition states applied by hand by a small in-memory
controller (the etcd one is tested in the failover tests), Produce and Fetch through the
brokers' real handlers.

- a follower copies its leader (Fetch v15 with the replica's broker epoch, topic ids) and
  acks=all completes only once the ISR has the records; logs end byte-identical;
- a follower whose log diverged (a former leader's unreplicated tail) truncates on the
  leader's diverging epoch and ends byte-identical with the new leader;
- a follower cut off through a TCP proxy leaves the ISR after replica.lag.time.max.ms while
  acks=all continues with the rest, and rejoins after the cut heals;
- a follower with an empty log (a wiped data dir) behind the leader's log start restarts
  its log there and copies the rest.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import await_until
from yak.broker.server import RunningBroker, start_broker
from yak.cluster.replica_fetcher import FetcherConfig, ReplicaFetcherManager
from yak.config import BrokerConfig
from yak.devcluster.netproxy import NetProxy
from yak.partition import PartitionState
from yak.partition.isr import IsrChange
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig

T = "orders"


def run(coro: Any, timeout: float = 60.0) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


class Cluster:
    """In-process brokers plus the controller's part: partition states, ISR changes
    (accepted against the partition epoch, published to every broker) and who follows."""

    def __init__(self, tmp: Path, lag_ms: int = 30_000) -> None:
        self.tmp = tmp
        self.lag_ms = lag_ms
        self.running: dict[int, RunningBroker] = {}
        self.fetchers: dict[int, ReplicaFetcherManager] = {}
        self.addresses: dict[int, tuple[str, int]] = {}
        self.state: PartitionState | None = None
        self.topic_id: Any = None
        self.config = LogConfig.from_props({"min.insync.replicas": "2"})
        self.isr_changes: list[tuple[int, ...]] = []

    async def start(self, *nodes: int) -> None:
        for n in nodes:
            cfg = BrokerConfig.load(
                data_dir=str(self.tmp / f"b{n}"), listen="127.0.0.1:0",
                overrides=(f"node.id={n}", f"replica.lag.time.max.ms={self.lag_ms}",
                           "replica.fetch.backoff.ms=100", "replica.fetch.wait.max.ms=200"))
            rb = await start_broker(cfg)
            rb.broker.replica_manager.alter_partition = self
            rb.broker.replica_manager.replica_lag_time_max_ms = self.lag_ms
            self.running[n] = rb
            self.addresses[n] = ("127.0.0.1", rb.port)
            self.fetchers[n] = ReplicaFetcherManager(
                rb.broker.replica_manager, self.addresses.get,
                FetcherConfig.from_broker_config(cfg, broker_epoch=lambda n=n: 1000 + n))
            await self.fetchers[n].start()

    async def create_topic(self, on: int) -> None:
        topics = self.running[on].broker.topics
        await topics.create(T, 1, {"min.insync.replicas": "2"})
        self.topic_id = topics.get(T).topic_id

    def rm(self, n: int) -> Any:
        return self.running[n].broker.replica_manager

    def publish(self, state: PartitionState) -> None:
        self.state = state
        for n in state.replicas:
            if n not in self.running:
                continue
            self.rm(n).apply_partition_state(T, 0, self.topic_id, state, self.config)
            if state.leader == n:
                self.fetchers[n].unfollow(T, 0)
            else:
                self.fetchers[n].follow(T, 0, state.leader, state.leader_epoch)

    async def submit(self, change: IsrChange) -> PartitionState:
        st = self.state
        assert st is not None
        if (change.leader_epoch, change.partition_epoch) != (st.leader_epoch,
                                                              st.partition_epoch):
            raise kio_compat_error(ErrorCode.invalid_update_version)
        assert all(e in (-1, 1000 + b) for b, e in change.broker_epochs), change.broker_epochs
        new = PartitionState(st.replicas, change.new_isr, st.leader, st.leader_epoch,
                             st.partition_epoch + 1)
        self.isr_changes.append(change.new_isr)
        self.publish(new)
        return new

    async def stop(self) -> None:
        for f in self.fetchers.values():
            await f.stop()
        for rb in self.running.values():
            await rb.stop()


def kio_compat_error(code: ErrorCode) -> Exception:
    from yak.errors import error_for_code

    return error_for_code(code)


async def produce(port: int, acks: int, n: int = 1, timeout_ms: int = 10_000,
                  tag: bytes = b"v") -> ErrorCode:
    """One Produce request (v9) over a fresh connection, through the broker's handler."""
    mod = kio_compat.schema_module("produce", 9, "request")
    req = mod.ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=(mod.TopicProduceData(name=T, partition_data=(mod.PartitionProduceData(
            index=0, records=build_batch([Record(b"k", tag + b"%d" % i) for i in range(n)])),
        )),))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(kio_compat.encode_request(req, 1))
        if acks == 0:
            return ErrorCode.none
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        frame = await reader.readexactly(size)
        _, resp = kio_compat.decode_response(0, 9, frame)
        return resp.responses[0].partition_responses[0].error_code
    finally:
        writer.close()


def metrics_text(rb: RunningBroker) -> str:
    from prometheus_client import generate_latest

    return generate_latest(rb.broker.metrics.registry).decode()


def log_bytes(c: Cluster, n: int, upto: int) -> bytes:
    p = c.rm(n).get_partition(T, 0)
    out = p.log.read(p.log_start_offset, 1 << 30, max_offset=upto)
    return b"".join(bytes(b) for b in out.buffers)


async def until(cond: Any, timeout: float = 15.0, what: str = "") -> None:
    await await_until(cond, timeout, what or repr(cond))


def test_follower_copies_the_leader_and_acks_all_waits_for_it(tmp_path: Path) -> None:
    async def body() -> None:
        c = Cluster(tmp_path)
        await c.start(1, 2)
        try:
            await c.create_topic(1)
            c.publish(PartitionState((1, 2), (1, 2), 1, 1, 1))
            results = await asyncio.gather(*(produce(c.running[1].port, -1, n=5, tag=b"%d-" % i)
                                             for i in range(20)))
            assert set(results) == {ErrorCode.none}
            leader = c.rm(1).get_partition(T, 0)
            follower = c.rm(2).get_partition(T, 0)
            assert leader.high_watermark == leader.log_end_offset == 100
            await until(lambda: follower.high_watermark == 100, what="follower HW")
            assert follower.log_end_offset == 100 and follower.latest_epoch == 1
            assert log_bytes(c, 1, 100) == log_bytes(c, 2, 100)
            # The leader knows the follower's broker epoch from Fetch v15's replica_state.
            assert leader.follower(2).broker_epoch == 1002
            # The follower refuses clients: it does not lead.
            assert await produce(c.running[2].port, 1) == ErrorCode.not_leader_or_follower
            # Followers' fetches are not counted as messages out.
            assert c.fetchers[2].followed() == {(T, 0): (1, 1)}
            assert c.fetchers[2].max_lag() == 0
        finally:
            await c.stop()

    run(body())


def test_diverged_follower_truncates_to_the_new_leader(tmp_path: Path) -> None:
    async def body() -> None:
        c = Cluster(tmp_path)
        await c.start(1, 2)
        try:
            await c.create_topic(2)
            # Both lead in turn, and only broker 2's topic manager knows the topic id: the
            # fetchers name topics (Fetch v12) instead.
            for f in c.fetchers.values():
                f.config = FetcherConfig(**{**f.config.__dict__, "fetch_version": 12})
            # Epoch 1: broker 2 leads; 1 copies the first two records.
            c.publish(PartitionState((2, 1), (2, 1), 2, 1, 1))
            assert await produce(c.running[2].port, -1, n=2) == ErrorCode.none
            # 1 stops following; 2 writes a tail nobody else gets (acks=1).
            c.fetchers[1].unfollow(T, 0)
            assert await produce(c.running[2].port, 1, n=3, tag=b"lost") == ErrorCode.none
            assert c.rm(2).get_partition(T, 0).log_end_offset == 5
            # Epoch 2: broker 1 leads (it was in the ISR) and writes its own records.
            c.publish(PartitionState((2, 1), (1,), 1, 2, 2))
            c.fetchers[2].unfollow(T, 0)  # (2 is paused in this story)
            assert await produce(c.running[1].port, 1, n=4, tag=b"new") == ErrorCode.none
            # 2 follows 1: diverging epoch -> truncate to 2 -> copy epoch 2's records.
            c.fetchers[2].follow(T, 0, 1, 2)
            p2 = c.rm(2).get_partition(T, 0)
            await until(lambda: p2.log_end_offset == 6 and p2.latest_epoch == 2,
                        what="truncate and copy")
            assert log_bytes(c, 1, 6) == log_bytes(c, 2, 6)
            # It caught up: the leader adds it back to the ISR, the HW moves.
            await until(lambda: set(c.state.isr) == {1, 2}, what="ISR expansion")
            await until(lambda: c.rm(1).get_partition(T, 0).high_watermark == 6)
        finally:
            await c.stop()

    run(body())


def test_cut_follower_leaves_the_isr_and_rejoins_after_healing(tmp_path: Path) -> None:
    async def body() -> None:
        c = Cluster(tmp_path, lag_ms=1500)
        await c.start(1, 2, 3)
        proxy = await NetProxy(("127.0.0.1", c.running[1].port)).start()
        c.addresses[1] = c.addresses[1]  # 2 reaches 1 directly...
        direct = dict(c.addresses)
        c.fetchers[3].resolve = lambda n: proxy.address if n == 1 else direct.get(n)
        try:
            await c.create_topic(1)
            c.publish(PartitionState((1, 2, 3), (1, 2, 3), 1, 1, 1))
            for i in range(5):
                assert await produce(c.running[1].port, -1, tag=b"a%d" % i) == ErrorCode.none
            proxy.cut("drop")
            started = time.monotonic()
            # acks=all waits for 3 until it leaves the ISR, then completes without it.
            during = asyncio.ensure_future(produce(c.running[1].port, -1, tag=b"during"))
            await until(lambda: "yak_delayed_produce_requests 1.0" in metrics_text(c.running[1]),
                        10, "the acks=all produce parked for broker 3")
            assert await during == ErrorCode.none
            assert c.state.isr == (1, 2)
            assert time.monotonic() - started < 10
            for i in range(5):
                assert await produce(c.running[1].port, -1, tag=b"b%d" % i) == ErrorCode.none
            leader = c.rm(1).get_partition(T, 0)
            assert leader.is_under_replicated and c.rm(1).isr_shrinks == 1
            scrape = metrics_text(c.running[1])
            assert "yak_isr_shrinks_total 1.0" in scrape
            assert "yak_under_replicated_partitions 1.0" in scrape
            assert "yak_under_min_isr_partitions 0.0" in scrape
            proxy.heal()
            await until(lambda: c.state.isr == (1, 2, 3), 20, "ISR expansion after heal")
            assert c.rm(1).isr_expands == 1
            hw = leader.high_watermark
            await until(lambda: c.rm(3).get_partition(T, 0).high_watermark == hw)
            assert log_bytes(c, 1, hw) == log_bytes(c, 2, hw) == log_bytes(c, 3, hw)
            assert c.isr_changes == [(1, 2), (1, 2, 3)]
            scrape = metrics_text(c.running[1])
            assert "yak_isr_expands_total 1.0" in scrape
            assert "yak_under_replicated_partitions 0.0" in scrape
            assert 'yak_replica_lag{partition="0",topic="orders"} 0.0' in \
                metrics_text(c.running[3])
        finally:
            await proxy.stop()
            await c.stop()

    run(body())


def test_empty_follower_restarts_its_log_at_the_leaders_log_start(tmp_path: Path) -> None:
    async def body() -> None:
        c = Cluster(tmp_path)
        await c.start(1, 2)
        try:
            await c.create_topic(1)
            c.publish(PartitionState((1, 2), (1,), 1, 1, 1))
            for i in range(6):
                assert await produce(c.running[1].port, 1, n=2, tag=b"%d" % i) == \
                    ErrorCode.none
            await until(lambda: c.rm(1).get_partition(T, 0).high_watermark == 12
                        or c.state.isr == (1, 2))
            c.fetchers[2].unfollow(T, 0)
            # Its fetcher's task ends a little later (an answer may be on its way): only then
            # is broker 2's log left alone for the wipe below.
            await until(lambda: not c.fetchers[2]._retired, 10, "broker 2's fetcher stopped")
            assert c.rm(1).delete_records(T, 0, 7) == 7
            # Broker 2 loses its data (a wiped dir): an empty log at 0 behind log start 7.
            p2 = c.rm(2).get_partition(T, 0)
            p2.log.truncate_fully_and_start_at(0)
            c.fetchers[2].follow(T, 0, 1, 1)
            await until(lambda: p2.log_end_offset == 12, what="copy from log start")
            assert p2.log_start_offset == 7
            assert log_bytes(c, 1, 12) == log_bytes(c, 2, 12)
        finally:
            await c.stop()

    run(body())


@pytest.mark.parametrize("version", [12, 15])
def test_fetch_versions_by_name_and_by_id(tmp_path: Path, version: int) -> None:
    async def body() -> None:
        c = Cluster(tmp_path)
        await c.start(1, 2)
        try:
            await c.create_topic(1)
            f = c.fetchers[2]
            f.config = FetcherConfig(**{**f.config.__dict__, "fetch_version": version})
            c.publish(PartitionState((1, 2), (1, 2), 1, 1, 1))
            assert await produce(c.running[1].port, -1, n=3) == ErrorCode.none
            await until(lambda: c.rm(2).get_partition(T, 0).high_watermark == 3)
            expected = 1002 if version >= 15 else -1
            assert c.rm(1).get_partition(T, 0).follower(2).broker_epoch == expected
        finally:
            await c.stop()

    run(body())


def test_follower_with_no_epoch_in_common_truncates_and_copies(tmp_path: Path) -> None:
    """The follower's log holds epoch 1 records the leader never had (the leader's log
    starts at epoch 3): the leader answers OFFSET_OUT_OF_RANGE (no epoch of its own is that
    old), the follower asks the leader's log end with ListOffsets as a replica and truncates
    to it (inside its one batch of 10: the whole batch goes, as in Kafka), then copies the
    leader's log."""
    async def body() -> None:
        c = Cluster(tmp_path)
        await c.start(1, 2)
        try:
            await c.create_topic(1)
            c.publish(PartitionState((1, 2), (2,), 2, 1, 1))
            c.fetchers[1].unfollow(T, 0)
            assert await produce(c.running[2].port, 1, n=10, tag=b"old") == ErrorCode.none
            c.fetchers[2].unfollow(T, 0)
            c.publish(PartitionState((1, 2), (1,), 1, 3, 3))
            c.fetchers[2].unfollow(T, 0)
            assert await produce(c.running[1].port, 1, n=4, tag=b"new") == ErrorCode.none
            p2 = c.rm(2).get_partition(T, 0)
            assert p2.log_end_offset == 10 and p2.latest_epoch == 1
            c.fetchers[2].follow(T, 0, 1, 3)
            await until(lambda: p2.log_end_offset == 4 and p2.latest_epoch == 3,
                        what="truncate and copy")
            assert log_bytes(c, 1, 4) == log_bytes(c, 2, 4)
        finally:
            await c.stop()

    run(body())
