"""The group coordinator's shards on the coordinator runtime, on real partitions: write,
compact, restart, replay, and a shard moving between brokers.

The first test runs production's single broker (`start_broker`: a one-node cluster on the
local KV store) and drives its own group coordinator, whose runtime writes through its
`ReplicaPartitionWriter` and loads through its `ReplicaLoader` at start-up, so this checks
exactly what the coordinator relies on there (Kafka's loader semantics, including
transactional offset commits that must only count once their commit marker is in the
log). The second builds the partition layer and the coordinator by hand to step
leadership changes one at a time.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

from yak.broker.server import RunningBroker, start_broker
from yak.config import BrokerConfig
from yak.coordinator.loader import ReplicaLoader
from yak.coordinator.partition_writer import ReplicaPartitionWriter
from yak.errors import ErrorCode
from yak.group import records as rec
from yak.group.coordinator import GroupConfig, GroupCoordinator, OffsetToCommit
from yak.group.records import OFFSETS_TOPIC
from yak.partition import ReplicaManager
from yak.protocol import records as batches
from yak.storage import LogManager


def run_broker(data_dir: Path, offsets_partitions: int,
               body: Callable[[RunningBroker], Awaitable[None]]) -> None:
    """A single broker on `data_dir` whose `offsets.topic.num.partitions` is
    `offsets_partitions`: run `body`, stop."""
    async def main() -> None:
        cfg = BrokerConfig.from_settings({
            "log.dirs": str(data_dir), "listeners": "PLAINTEXT://127.0.0.1:0",
            "offsets.topic.num.partitions": str(offsets_partitions)})
        running = await start_broker(cfg)
        try:
            await body(running)
        finally:
            await running.stop()

    asyncio.run(main())


def control_batch(producer_id: int, commit: bool, base_offset: int) -> bytes:
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 0)
    return batches.build_batch(
        [batches.Record(key, value)],
        producer_id=producer_id,
        producer_epoch=0,
        transactional=True,
        control=True,
        base_offset=base_offset,
    )


def txn_offsets(producer_id: int, group: str, offset: int, base_offset: int) -> bytes:
    value = rec.encode_offset_value(rec.OffsetValue(offset, -1, "txn", 1))
    return batches.build_batch(
        [batches.Record(rec.encode_offset_key(group, "t", 0), value)],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
        base_offset=base_offset,
    )


def test_commits_survive_restart_and_compaction_with_txn_markers(tmp_path: Path) -> None:
    async def write(running: RunningBroker) -> None:
        broker = running.broker
        replicas, topics = broker.replica_manager, broker.topics
        logs = replicas.logs
        coord = broker.group_coordinator
        assert topics.get(OFFSETS_TOPIC) is None  # nothing yet: the first commit creates it
        for i in range(200):  # many versions of the same keys: compaction fodder
            codes = await coord.commit_offsets(
                "g",
                -1,
                "",
                None,
                [OffsetToCommit("t", p, i * 10 + p, 1, f"m{i}") for p in range(3)],
            )
            assert set(codes) == {rec_none()}
        await coord.commit_offsets("gone", -1, "", None, [OffsetToCommit("t", 0, 5)])
        assert await coord.delete_groups(["gone"]) == [rec_none()]
        txg = replicas.get_partition(OFFSETS_TOPIC, coord.partition_for("txg"))
        assert txg is not None
        assert topics.get(OFFSETS_TOPIC).configs["cleanup.policy"] == "compact"
        # An aborted and a committed transactional offset commit, as a txn coordinator
        # would leave them, and one still open at the "crash".
        # (Written as a replica would: storage keeps control batches off the leader path,
        # where only clients write.)
        # Each in its group's own partition: that partition's shard owns the group.
        opn = replicas.get_partition(OFFSETS_TOPIC, coord.partition_for("open"))
        assert opn is not None
        for part, make in (
            (txg, lambda o: txn_offsets(1000, "txg", 111, o)),
            (txg, lambda o: control_batch(1000, False, o)),
            (txg, lambda o: txn_offsets(2000, "txg", 222, o)),
            (txg, lambda o: control_batch(2000, True, o)),
            (opn, lambda o: txn_offsets(3000, "open", 333, o)),
        ):
            part.log.append_as_follower(make(part.log.log_end_offset))
            assert part.maybe_increment_high_watermark()
        g = replicas.get_partition(OFFSETS_TOPIC, coord.partition_for("g"))
        assert g is not None
        # Commits are appended with acks=all: committed (below the high watermark) at once.
        assert g.high_watermark == g.log_end_offset > 0
        g_part = g.log
        # The broker's own cleaner thread stops, so that this pass is the one that cleans.
        logs._stop_cleaner()
        g_part.roll()
        assert logs.run_cleaner_once() >= 1, "the cleaner compacted __consumer_offsets"
        assert g_part.log_start_offset == 0

    async def read(running: RunningBroker) -> None:
        coord = running.broker.group_coordinator
        await coord.ensure_ready("g")
        assert coord.writer.num_partitions == 3  # the existing topic's count wins
        for p in range(3):  # a partition's load may go on in the background
            assert await coord.runtime.wait_loaded(p, 30_000)
        assert coord.loaded and all(coord.owns(p) for p in range(3))
        _, fetched = coord.fetch_offsets("g", None)
        assert [(f.partition, f.offset, f.leader_epoch, f.metadata) for f in fetched] == [
            (p, 1990 + p, 1, "m199") for p in range(3)
        ]
        assert "gone" not in coord.groups
        assert coord.fetch_offsets("txg", [("t", [0])])[1][0].offset == 222
        # A transaction without a marker yet: its commit stays pending (invisible, unstable
        # with require_stable) until the coordinator re-sends the marker.
        assert coord.fetch_offsets("open", [("t", [0])])[1][0].offset == -1
        unstable = coord.fetch_offsets("open", [("t", [0])], require_stable=True)[1][0]
        assert unstable.error is ErrorCode.unstable_offset_commit
        assert coord.complete_txn_offsets(3000, True, [coord.partition_for("open")]) == 1
        assert coord.fetch_offsets("open", [("t", [0])],
                                   require_stable=True)[1][0].offset == 333

    run_broker(tmp_path, 3, write)
    run_broker(tmp_path, 99, read)


def rec_none():  # type: ignore[no-untyped-def]
    from yak.errors import ErrorCode

    return ErrorCode.none


def test_a_shard_follows_leadership_and_a_deposed_coordinator_cannot_write(
        tmp_path: Path) -> None:
    """Cluster mode: a partition is loaded when this broker leads it and dropped when it
    stops; between the partition layer's change and the hook, the writer's epoch fence
    refuses the commit (NOT_COORDINATOR to the client, which finds the new one)."""
    import uuid

    from yak.partition import PartitionState
    from yak.storage import LogConfig

    logs = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
    logs.startup()
    replicas = ReplicaManager(1, logs)
    topic_id = uuid.uuid4()

    def lead(leader: int, epoch: int) -> None:
        for p in range(2):
            replicas.apply_partition_state(
                OFFSETS_TOPIC, p, topic_id,
                PartitionState((1, 2), (1, 2) if leader == 2 else (1,), leader=leader,
                               leader_epoch=epoch, partition_epoch=epoch), LogConfig())

    async def no_create(*_a: object) -> None:
        raise AssertionError("the topic exists")

    writer = ReplicaPartitionWriter(replicas, OFFSETS_TOPIC, lambda _t: 2, no_create, 2,
                                    {}, timeout_ms=5000)
    coord = GroupCoordinator(writer, ReplicaLoader(replicas, OFFSETS_TOPIC), GroupConfig())
    coord.manage_partitions()
    p = coord.partition_for("g")

    async def body() -> None:
        lead(1, 0)
        assert coord.fetch_offsets("g", None)[0] is ErrorCode.not_coordinator
        coord.on_election(p, 0)
        assert coord.owns(p)
        assert await coord.commit_offsets("g", -1, "", None, [OffsetToCommit("t", 0, 7)]) == [
            ErrorCode.none]
        lead(2, 1)  # broker 2 leads now; the hook has not run yet
        assert await coord.commit_offsets("g", -1, "", None, [OffsetToCommit("t", 0, 8)]) == [
            ErrorCode.not_coordinator]
        coord.on_resignation(p, 1)
        assert not coord.owns(p) and "g" not in coord.groups
        assert coord.fetch_offsets("g", None)[0] is ErrorCode.not_coordinator
        coord.on_election(p, 0)  # a late notice of an older term changes nothing
        assert not coord.owns(p)
        lead(1, 2)  # back here at epoch 2: reloaded from the log, the refused commit absent
        coord.on_election(p, 2)
        err, got = coord.fetch_offsets("g", [("t", [0])])
        assert err is ErrorCode.none and got[0].offset == 7
        await coord.stop()

    try:
        asyncio.run(body())
    finally:
        logs.shutdown()
