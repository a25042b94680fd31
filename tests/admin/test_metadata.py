"""The single broker's metadata store as production opens it (`EtcdMetadataStore` over the
local KV backend, `LocalKV`): Kafka's topic-name rules, durable changes across reopening,
producer ids never reused, the old single-broker file migrated, and partition changes as
compare-and-set. Topic-change errors go through the topic manager of a running single
broker (`start_broker`), where production checks them."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from yak.broker.server import start_broker
from yak.cluster.etcd_store import EtcdMetadataStore
from yak.cluster.layout import DEFAULT_NAMESPACE, ClusterKeys
from yak.cluster.local_kv import KV_FILE, LocalKV
from yak.cluster.local_migration import OLD_METADATA_FILE, migrate
from yak.cluster.metadata import StalePartitionStateError, validate_topic_name
from yak.cluster.producer_ids import ProducerIdManager
from yak.config import BrokerConfig
from yak.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from yak.partition import PartitionState

KEYS = ClusterKeys(DEFAULT_NAMESPACE)


@asynccontextmanager
async def opened(data_dir: Path, node_id: int = 1) -> AsyncIterator[EtcdMetadataStore]:
    """The data dir's store, as a single broker opens it (`kv.py`: the local backend in
    the default namespace)."""
    kv = await LocalKV(data_dir / KV_FILE).open()
    store = EtcdMetadataStore(kv, KEYS, node_id)
    await store.start()
    try:
        yield store
    finally:
        await store.stop()
        await kv.aclose()


@pytest.mark.parametrize("name", ["a", "A-b_c.9", "x" * 249, "__consumer_offsets"])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "a/b", "ä", "a:b"])
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_topics_persist_across_reopen(tmp_path: Path) -> None:
    async def body() -> None:
        async with opened(tmp_path) as m:
            t = await m.create_topic("orders", {"retention.ms": "1000"}, [(1,)] * 3)
            assert isinstance(t.topic_id, uuid.UUID) and t.topic_id.int != 0
            await m.add_partitions("orders", [(1,)] * 2)
            await m.set_topic_configs("orders", {"cleanup.policy": "compact"})
            await m.create_topic("gone", {}, [(1,)])
            await m.delete_topic("gone")
            cluster_id = m.cluster_id

        async with opened(tmp_path) as m2:
            assert m2.cluster_id == cluster_id
            assert [x.name for x in m2.topics()] == ["orders"]
            o = m2.get("orders")
            assert o is not None
            assert (o.topic_id, o.partitions, o.configs) == (
                t.topic_id, 5, {"cleanup.policy": "compact"})
            assert m2.by_id(t.topic_id) == o
        # No temp file left behind; the file is valid JSON.
        assert [p.name for p in tmp_path.iterdir()] == [KV_FILE]
        json.loads((tmp_path / KV_FILE).read_text())

    asyncio.run(body())


def test_errors(tmp_path: Path) -> None:
    async def body() -> None:
        cfg = BrokerConfig.from_settings({"log.dirs": str(tmp_path),
                                          "listeners": "PLAINTEXT://127.0.0.1:0"})
        running = await start_broker(cfg)
        try:
            tm = running.broker.topics
            await tm.create("a.b", 1)
            with pytest.raises(TopicAlreadyExistsError):
                await tm.create("a.b", 1)
            with pytest.raises(InvalidTopicError, match="collides"):
                await tm.create("a_b", 1)
            with pytest.raises(InvalidPartitionsError):
                await tm.create("zero", 0)
            with pytest.raises(InvalidPartitionsError):
                await tm.add_partitions("a.b", 1)
            with pytest.raises(UnknownTopicOrPartitionError):
                await tm.delete("nope")
            with pytest.raises(UnknownTopicOrPartitionError):
                await tm.alter_configs("nope", {})
            # The store refuses the same when called directly.
            with pytest.raises(UnknownTopicOrPartitionError):
                await tm.store.set_topic_configs("nope", {})
            with pytest.raises(TopicAlreadyExistsError):
                await tm.store.create_topic("a.b", {}, [(1,)])
            assert [x.name for x in tm.topics()] == ["a.b"]
        finally:
            await running.stop()

    asyncio.run(body())


def test_producer_ids_are_never_reused_after_restart(tmp_path: Path) -> None:
    def manager(store: EtcdMetadataStore) -> ProducerIdManager:
        # As the composition builds it: blocks reserved by a compare-and-set in the store.
        return ProducerIdManager(store, allocate=lambda size: store.allocate_producer_ids(size))

    async def body() -> None:
        async with opened(tmp_path) as s:
            ids = manager(s)
            first = [await ids.new_producer_id() for _ in range(5)]
        assert first == sorted(set(first))
        # a restart (or crash) mid-block
        async with opened(tmp_path) as s:
            ids2 = manager(s)
            later = [await ids2.new_producer_id() for _ in range(2000)]
        assert min(later) > max(first)
        assert len(set(later)) == len(later)
        async with opened(tmp_path) as s:
            ids3 = manager(s)
            assert await ids3.new_producer_id() > max(later)
            assert ids3.was_allocated(max(later)) and not ids3.was_allocated(10**9)

    asyncio.run(body())


def test_version_1_file_is_migrated_to_partition_states(tmp_path: Path) -> None:
    """A single broker's file written before partition states existed: every partition
    was led by the one broker at epoch 0, and the reserved producer id block is kept."""
    old = {
        "version": 1,
        "cluster_id": "abcdefghijklmnopqrstuv",
        "producer_id_block_end": 3000,
        "topics": [{"name": "orders", "topic_id": str(uuid.uuid4()), "partitions": 2,
                    "configs": {"retention.ms": "1000"}}],
    }
    (tmp_path / OLD_METADATA_FILE).write_text(json.dumps(old))

    async def body() -> None:
        kv = await LocalKV(tmp_path / KV_FILE).open()
        assert migrate(kv, KEYS, tmp_path, node_id=7)
        await kv.aclose()
        async with opened(tmp_path, node_id=7) as m:
            assert m.cluster_id == "abcdefghijklmnopqrstuv"
            assert m.get("orders").configs == {"retention.ms": "1000"}
            assert m.partition_states("orders") == [PartitionState((7,), (7,), 7, 0, 0)] * 2
            assert m.next_producer_id() == 3000
            states = m.partition_states("orders")
        # Written in the current format (the KV store), readable again; migrated once.
        kv = await LocalKV(tmp_path / KV_FILE).open()
        assert not migrate(kv, KEYS, tmp_path, node_id=7)
        await kv.aclose()
        async with opened(tmp_path, node_id=7) as again:
            assert again.partition_states("orders") == states

    asyncio.run(body())


def test_partition_state_is_persisted_and_compare_and_set(tmp_path: Path) -> None:
    async def body() -> None:
        async with opened(tmp_path) as m:
            info = await m.create_topic("t", {}, [(1,), (1,)])
            tid = str(info.topic_id)
            s0 = m.partition_states("t")[1]
            assert (s0.leader, s0.replicas, s0.isr, s0.leader_epoch, s0.partition_epoch) == \
                (1, (1,), (1,), 0, 0)
            e0 = m.partition_entry(tid, 1)
            bumped = dataclasses.replace(e0.record, leader_epoch=1, partition_epoch=1)
            await m.compare_and_set_partition(tid, bumped, e0.mod_revision)
            s1 = m.partition_states("t")[1]
            with pytest.raises(StalePartitionStateError):
                await m.compare_and_set_partition(
                    tid, dataclasses.replace(bumped, leader_epoch=2, partition_epoch=2),
                    e0.mod_revision)
            assert (s1.leader_epoch, s1.partition_epoch) == (1, 1)
            assert m.partition_states("t") == [s0, s1]
            # Another image of the same store (as each broker of a cluster holds): it
            # watches the store, so it sees every change (the old file store's handles
            # each kept a snapshot; an image never stays stale, which brokers rely on).
            other = EtcdMetadataStore(m.client, KEYS, 1)
            await other.start()
            assert other.partition_states("t") == [s0, s1]
            await m.add_partitions("t", [(4, 1)])
            await other.wait_for(lambda s: len(s.partition_states("t")) == 3, 5)
            assert other.partition_states("t")[2] == PartitionState((4, 1), (4, 1), 4, 0, 0)
            await other.stop()
        async with opened(tmp_path) as again:
            assert again.partition_states("t") == [s0, s1, PartitionState((4, 1), (4, 1), 4, 0, 0)]

    asyncio.run(body())
