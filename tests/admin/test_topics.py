"""The topic manager as production composes it: a single broker is a one-node cluster
(`yak.broker.server.start_broker`, the metadata in the local KV store), with real storage
and partition layer. Metadata and partitions stay in step: the topic manager writes the
store, the node's publisher hosts what the image assigns here, restarts included."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.waiting import await_until
from yak.broker.server import RunningBroker, start_broker
from yak.cluster.etcd_store import EtcdMetadataStore
from yak.cluster.layout import DEFAULT_NAMESPACE, ClusterKeys
from yak.cluster.local_kv import KV_FILE, LocalKV
from yak.config import BrokerConfig
from yak.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
)
from yak.storage import PartitionLog

Body = Callable[[RunningBroker], Awaitable[None]]


def run_broker(data_dir: Path, body: Body, **settings: str) -> None:
    """Start a single broker on `data_dir` (production's composition), run `body`, stop."""
    async def main() -> None:
        cfg = BrokerConfig.from_settings({"log.dirs": str(data_dir),
                                          "listeners": "PLAINTEXT://127.0.0.1:0", **settings})
        running = await start_broker(cfg)
        try:
            await body(running)
        finally:
            await running.stop()

    asyncio.run(main())


def partition_log(running: RunningBroker, topic: str, partition: int) -> PartitionLog | None:
    p = running.broker.replica_manager.get_partition(topic, partition)
    return None if p is None else p.log


async def hosted(running: RunningBroker, topic: str, partitions: int,
                 timeout: float = 10.0) -> None:
    """The publisher applies the store's records from its watch: wait until it hosts them."""
    await await_until(lambda: all(partition_log(running, topic, p) is not None
                                  for p in range(partitions)),
                      timeout, f"{topic}'s {partitions} partitions hosted")


async def fence(running: RunningBroker, name: str) -> None:
    """A barrier on the watch: create a topic and wait until the publisher hosts it. The
    watch delivers the store's records in revision order, so any record written before
    this one has been applied by the time it returns; a check that nothing changed after
    it is not a guess about how long the watch takes."""
    await running.broker.topics.create(name, 1)
    await hosted(running, name, 1)


async def until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    await await_until(check, timeout, what)


def test_create_uses_defaults_and_overrides(tmp_path: Path) -> None:
    async def body(running: RunningBroker) -> None:
        tm = running.broker.topics
        info = await tm.create("t", None, {"segment.bytes": "1048576"})
        assert info.partitions == 2
        await hosted(running, "t", 2)
        for p in range(2):
            plog = partition_log(running, "t", p)
            assert plog is not None
            assert plog.config.segment_bytes == 1048576
            assert plog.config.retention_ms == 3600000  # broker log.retention.hours
        assert partition_log(running, "t", 2) is None
        assert partition_log(running, "nope", 0) is None
        with pytest.raises(InvalidReplicationFactorError):
            await tm.create("rf", 1, replication_factor=2)
        with pytest.raises(InvalidConfigurationError):
            await tm.create("bad", 1, {"segment.bytes": "x"})
        with pytest.raises(InvalidConfigurationError, match="Unknown topic config"):
            await tm.create("bad", 1, {"log.segment.bytes": "1048576"})
        with pytest.raises(InvalidPartitionsError):
            await tm.create("zero", 0)
        # Accepted Kafka config Yak does not act on: stored, not passed to storage.
        await tm.create("pre", 1, {"preallocate": "true"})
        assert tm.get("pre").configs == {"preallocate": "true"}
        assert {t.name for t in tm.topics()} == {"t", "pre"}

    run_broker(tmp_path, body, **{"num.partitions": "2", "log.retention.hours": "1"})


def test_alter_configs_apply_live_and_survive_restart(tmp_path: Path) -> None:
    async def first(running: RunningBroker) -> None:
        tm = running.broker.topics
        await tm.create("t", 2, {"retention.ms": "1000"})
        await hosted(running, "t", 2)
        await tm.alter_configs("t", {"max.message.bytes": "512"})
        # Every broker applies a config change from its watch, this one included.
        await until(lambda: all(partition_log(running, "t", p).config.max_message_bytes == 512
                                for p in range(2)), "configs applied")
        for p in range(2):
            cfg = partition_log(running, "t", p).config
            assert cfg.max_message_bytes == 512
            assert cfg.retention_ms == 7 * 24 * 3600 * 1000  # replaced, back to default
        await tm.alter_configs("t", {"max.message.bytes": "1"}, validate_only=True)
        await fence(running, "fence")  # a change would have reached the publisher by now
        assert partition_log(running, "t", 0).config.max_message_bytes == 512
        assert tm.get("t").configs == {"max.message.bytes": "512"}

    async def second(running: RunningBroker) -> None:
        await hosted(running, "t", 2)
        assert partition_log(running, "t", 1).config.max_message_bytes == 512

    run_broker(tmp_path, first)
    run_broker(tmp_path, second)


def test_startup_reconciles_crash_leftovers(tmp_path: Path) -> None:
    async def first(running: RunningBroker) -> None:
        await running.broker.topics.create("keep", 2)
        await running.broker.topics.create("gone", 1)
        await hosted(running, "keep", 2)
        await hosted(running, "gone", 1)

    async def crash_between_metadata_and_logs() -> None:
        # The store changed while the broker was down (a crash between the metadata write
        # and the publisher's log changes): a deleted topic's log remains, and a created
        # topic's logs are missing.
        kv = await LocalKV(tmp_path / KV_FILE).open()
        store = EtcdMetadataStore(kv, ClusterKeys(DEFAULT_NAMESPACE), 1)
        await store.start()
        await store.delete_topic("gone")
        await store.create_topic("new", {}, [(1,), (1,)])
        await store.stop()
        await kv.aclose()

    async def second(running: RunningBroker) -> None:
        assert running.broker.replica_manager.logs.get("gone", 0) is None
        assert not (tmp_path / "gone-0").exists()
        await hosted(running, "new", 2)
        assert partition_log(running, "keep", 1) is not None

    run_broker(tmp_path, first)
    assert (tmp_path / "gone-0").exists()
    asyncio.run(crash_between_metadata_and_logs())
    assert (tmp_path / "gone-0").exists() and not (tmp_path / "new-0").exists()
    run_broker(tmp_path, second)


def test_add_partitions_and_delete(tmp_path: Path) -> None:
    async def body(running: RunningBroker) -> None:
        tm = running.broker.topics
        await tm.create("t", 1, {"cleanup.policy": "compact"})
        await hosted(running, "t", 1)
        with pytest.raises(InvalidPartitionsError):
            await tm.add_partitions("t", 1)
        await tm.add_partitions("t", 3, validate_only=True)
        await fence(running, "fence")  # a change would have reached the publisher by now
        assert partition_log(running, "t", 1) is None
        assert tm.get("t").partitions == 1
        await tm.add_partitions("t", 3)
        await hosted(running, "t", 3)
        assert partition_log(running, "t", 2).config.compact  # the topic's configs
        await tm.delete("t")
        assert tm.get("t") is None
        logs = running.broker.replica_manager.logs
        await until(lambda: logs.get("t", 0) is None and not list(tmp_path.glob("t-*")),
                    "the deleted topic's logs are gone")

    run_broker(tmp_path, body)


def test_failed_log_creation_stops_neither_the_broker_nor_the_topic(tmp_path: Path) -> None:
    """Storage that fails on one partition (a full disk, say). The single broker of before
    undid the whole create; on the one metadata path the topic is committed first and the
    publisher hosts it (as in Kafka's KRaft, where the controller's record stands and a
    broker that cannot create a replica's log reports it offline): the failed partition is
    not hosted and the others are, the broker goes on, and a restart with a working disk
    hosts the missing partition (a start-up that cannot host a replica would stop with
    one line naming it)."""
    async def first(running: RunningBroker) -> None:
        logs = running.broker.replica_manager.logs
        create = logs.create

        def failing(topic, partition, config=None):  # type: ignore[no-untyped-def]
            if topic == "t" and partition == 2:
                raise OSError(28, "No space left on device")
            return create(topic, partition, config)

        logs.create = failing  # type: ignore[method-assign]
        await running.broker.topics.create("t", 4)
        await until(lambda: all(partition_log(running, "t", p) is not None
                                for p in (0, 1, 3)), "the healthy partitions hosted")
        assert partition_log(running, "t", 2) is None and logs.get("t", 2) is None
        assert running.broker.topics.get("t").partitions == 4
        # The broker still serves topic changes.
        await running.broker.topics.create("after", 1)
        await hosted(running, "after", 1)

    async def second(running: RunningBroker) -> None:
        await hosted(running, "t", 4)

    run_broker(tmp_path, first)
    run_broker(tmp_path, second)
