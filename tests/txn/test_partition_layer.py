"""The transaction coordinator on a real partition layer (real logs, no broker): the marker
writer's routing (led here, led elsewhere, deleted), and the coordinator runtime's writer
and loader on `__transaction_state` (the leader-epoch fence, the replay to the log end,
the wait for the loaded records' high watermark)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from yak.coordinator.loader import ReplicaLoader
from yak.coordinator.partition_writer import ReplicaPartitionWriter
from yak.errors import ErrorCode, NotLeaderOrFollowerError
from yak.partition import (
    FetchIsolation,
    FetchParams,
    FetchPartition,
    PartitionState,
    ReplicaManager,
    TxnMarker,
)
from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager
from yak.txn.markers import PartitionMarkerWriter
from yak.txn.records import TRANSACTION_STATE_TOPIC
from yak.txn.state_manager import TxnPartition

E = ErrorCode


def replicas(tmp_path: Path) -> tuple[LogManager, ReplicaManager]:
    logs = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
    logs.startup()
    rm = ReplicaManager(1, logs)
    for topic, n in (("t", 2), ("__consumer_offsets", 1), (TRANSACTION_STATE_TOPIC, 1)):
        for p in range(n):
            rm.apply_partition_state(topic, p, uuid.uuid4(), PartitionState.initial([1]),
                                     LogConfig())
    # t-1 is led by broker 2 (this one follows)
    rm.apply_partition_state("t", 1, uuid.uuid4(),
                             PartitionState((2, 1), (2, 1), leader=2, leader_epoch=1),
                             LogConfig())
    return logs, rm


async def _no_create(*_a: object) -> None:
    raise AssertionError("the topic exists")


def txn_writer(rm: ReplicaManager) -> ReplicaPartitionWriter:
    return ReplicaPartitionWriter(rm, TRANSACTION_STATE_TOPIC, lambda _t: 1, _no_create, 1,
                                  {}, timeout_ms=5000)


class Recorded(TxnPartition):
    """The transaction coordinator's shard, recording what the loader replayed."""

    def __init__(self) -> None:
        super().__init__(0, {}, 0)
        self.seen: list[tuple[bytes, bytes | None]] = []

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes,
               value: bytes | None) -> None:
        self.seen.append((key, value))


def replayed(rm: ReplicaManager) -> list[tuple[bytes, bytes | None]]:
    shard = Recorded()
    ReplicaLoader(rm, TRANSACTION_STATE_TOPIC).load(0, shard)
    return shard.seen


def test_marker_routing_and_offsets_listener(tmp_path: Path) -> None:
    logs, rm = replicas(tmp_path)
    completed: list[tuple[int, bool, list[int]]] = []
    sent: list[list[TxnMarker]] = []

    def exists(tp: tuple[str, int]) -> bool:
        return tp[0] in ("t", "__consumer_offsets") and tp[1] < 3

    async def body() -> None:
        batch = build_batch([Record(None, b"x")], producer_id=9, producer_epoch=0,
                            base_sequence=0, transactional=True)
        (r,) = await rm.append_records([("t", 0, memoryview(batch))], -1)
        assert r.error == 0
        assert rm.get_partition("t", 0).last_stable_offset == 0
        w = PartitionMarkerWriter(rm, exists,
                                  on_offsets_marker=lambda pid, c, ps: completed.append(
                                      (pid, c, list(ps))))
        got = await w.write_markers(9, 0, 3, True, {("t", 0), ("t", 1), ("t", 2), ("gone", 0),
                                                   ("__consumer_offsets", 0)})
        assert got == {("t", 0): E.none, ("t", 1): E.not_leader_or_follower,
                       ("t", 2): E.not_leader_or_follower, ("gone", 0): E.unknown_topic_or_partition,
                       ("__consumer_offsets", 0): E.none}
        assert rm.get_partition("t", 0).last_stable_offset == 2  # data + marker
        assert completed == [(9, True, [0])]
        # an older coordinator's late marker is fenced, nothing written
        got = await w.write_markers(9, 0, 2, False, {("t", 0)})
        assert got == {("t", 0): E.transaction_coordinator_fenced}
        assert rm.get_partition("t", 0).log_end_offset == 2

        async def remote(markers: list[TxnMarker]) -> dict[tuple[str, int], ErrorCode]:
            sent.append(list(markers))
            return {(m.topic, m.partition): E.none for m in markers}

        w.remote = remote
        got = await w.write_markers(9, 0, 3, False, {("t", 1)})
        assert got == {("t", 1): E.none}
        assert [(m.topic, m.partition, m.commit) for m in sent[0]] == [("t", 1, False)]

    try:
        asyncio.run(body())
    finally:
        logs.shutdown()


def test_transaction_log_is_fenced_by_the_leader_epoch(tmp_path: Path) -> None:
    logs, rm = replicas(tmp_path)
    tlog = txn_writer(rm)

    async def body() -> None:
        assert tlog.leader_epoch(0) == 0
        await tlog.wait_committed(tlog.append(0, 0, [(b"k1", b"v1")]))
        try:
            tlog.append(0, 1, [(b"k2", b"v2")])
            raise AssertionError("a write at another coordinator epoch must be refused")
        except NotLeaderOrFollowerError:
            pass
        await tlog.wait_committed(tlog.append(0, 0, [(b"k1", None)]))  # a tombstone
        assert replayed(rm) == [(b"k1", b"v1"), (b"k1", None)]
        # leadership moves to broker 2 (epoch 1): this broker may not write any more
        rm.apply_partition_state(TRANSACTION_STATE_TOPIC, 0, uuid.uuid4(),
                                 PartitionState((2, 1), (2, 1), leader=2, leader_epoch=1,
                                                partition_epoch=1), LogConfig())
        assert tlog.leader_epoch(0) is None
        try:
            tlog.append(0, 0, [(b"k3", b"v3")])
            raise AssertionError("a deposed coordinator's write must be refused")
        except NotLeaderOrFollowerError:
            pass
        assert replayed(rm) == [(b"k1", b"v1"), (b"k1", None)]

    try:
        asyncio.run(body())
    finally:
        logs.shutdown()


def test_replay_reads_past_a_new_leaders_lagging_high_watermark(tmp_path: Path) -> None:
    """A follower that becomes leader knows the old leader's high watermark only as of its
    last fetch response, so a record every in-sync replica had (an acknowledged
    PrepareCommit) can lie above its own high watermark. The coordinator's replay must
    still see it (issue 16: loading to the high watermark found a committed transaction
    Ongoing, and the timeout sweep aborted it)."""
    logs, rm = replicas(tmp_path)
    tlog = txn_writer(rm)
    rm.apply_partition_state(TRANSACTION_STATE_TOPIC, 0, uuid.uuid4(),
                             PartitionState((2, 1), (2, 1), leader=2, leader_epoch=1,
                                            partition_epoch=1), LogConfig())

    async def body() -> None:
        fetched = (build_batch([Record(b"k", b"ongoing")], base_offset=0,
                               partition_leader_epoch=1)
                   + build_batch([Record(b"k", b"prepare-commit")], base_offset=1,
                                 partition_leader_epoch=1))
        # the leader's high watermark as of that fetch response: the first record only
        rm.append_as_follower(TRANSACTION_STATE_TOPIC, 0, 1, memoryview(fetched), 1, 0)
        # broker 2 dies; this broker leads at epoch 2 with broker 2 still in the ISR
        rm.apply_partition_state(TRANSACTION_STATE_TOPIC, 0, uuid.uuid4(),
                                 PartitionState((2, 1), (1, 2), leader=1, leader_epoch=2,
                                                partition_epoch=2), LogConfig())
        p = rm.get_partition(TRANSACTION_STATE_TOPIC, 0)
        assert p.is_leader and p.high_watermark == 1 and p.log_end_offset == 2
        assert replayed(rm) == [(b"k", b"ongoing"), (b"k", b"prepare-commit")]
        # ...and what it loaded is committed once broker 2 fetches past it (the coordinator
        # sends the loaded PrepareCommit's markers only then), not before
        wait = asyncio.ensure_future(tlog.wait_high_watermark(0, 2, 2))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not wait.done()
        want = FetchPartition(TRANSACTION_STATE_TOPIC, 0, 2, 1 << 20, 2, 1)
        await rm.fetch_messages(FetchParams(0, 1, 1 << 20, FetchIsolation.LOG_END,
                                            replica_id=2, replica_epoch=102), [want])
        assert await asyncio.wait_for(wait, 5) is True
        # a leadership change ends the wait with False
        assert await tlog.wait_high_watermark(0, 1, 5) is False

    try:
        asyncio.run(body())
    finally:
        logs.shutdown()
