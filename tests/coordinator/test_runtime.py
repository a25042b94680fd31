"""The coordinator runtime on the real partition layer (a ReplicaManager over real log files,
no broker): the order in which writes on a shard take effect, loading a shard by
replaying its partition and unloading it with leadership, the epoch fence on a deposed
coordinator's writes, and the per-shard timers on a `ManualClock`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.waiting import await_until
from yak.clock import ManualClock
from yak.coordinator import NO_PRODUCER, CoordinatorResult, CoordinatorRuntime, ShardState
from yak.coordinator.loader import ReplicaLoader
from yak.coordinator.partition_writer import ReplicaPartitionWriter
from yak.errors import ErrorCode, KafkaError
from yak.partition import (
    FetchIsolation,
    FetchParams,
    FetchPartition,
    PartitionState,
    ReplicaManager,
    TxnMarker,
)
from yak.storage import LogConfig, LogManager

pytestmark = pytest.mark.timeout(60)

TOPIC = "__kv_state"
E = ErrorCode


class KVShard:
    """A tiny state machine: key -> value, transactions held until their marker."""

    def __init__(self, partition: int, epoch: int) -> None:
        self.partition = partition
        self.epoch = epoch
        self.kv: dict[bytes, bytes | None] = {}
        self.pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.replayed: list[int] = []

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes,
               value: bytes | None) -> None:
        self.replayed.append(offset)
        if producer_id == NO_PRODUCER:
            self.kv[key] = value
        else:
            self.pending.setdefault(producer_id, []).append((key, value))

    def replay_end_transaction(self, producer_id: int, producer_epoch: int,
                               commit: bool) -> None:
        held = self.pending.pop(producer_id, [])
        if commit:
            self.kv.update(held)


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.logs = LogManager(str(tmp_path / "data"), LogConfig(), start_cleaner=False)
        self.logs.startup()
        self.rm = ReplicaManager(1, self.logs)
        self.topic_id = uuid.uuid4()
        # partition 0: this broker alone (the high watermark follows every append);
        # partition 1: broker 2 in the ISR too (the high watermark waits for its fetches)
        self.rm.apply_partition_state(TOPIC, 0, self.topic_id, PartitionState.initial([1]),
                                      LogConfig())
        self.rm.apply_partition_state(TOPIC, 1, self.topic_id,
                                      PartitionState((1, 2), (1, 2), leader=1, leader_epoch=0),
                                      LogConfig())
        self.clock = ManualClock()
        self.loaded: list[int] = []
        self.unloaded: list[int] = []

    def runtime(self) -> CoordinatorRuntime[KVShard]:
        writer = ReplicaPartitionWriter(self.rm, TOPIC, lambda _t: 2, _no_create, 2, {},
                                        timeout_ms=5000)
        return CoordinatorRuntime(
            writer, ReplicaLoader(self.rm, TOPIC), KVShard, self.clock,
            on_loaded=lambda ctx: self.loaded.append(ctx.partition),
            on_unloaded=lambda ctx: self.unloaded.append(ctx.partition))

    async def follower_fetch(self, partition: int, offset: int) -> None:
        """Broker 2 fetches from `offset`: it has everything below it (moves the HW)."""
        p = self.rm.get_partition(TOPIC, partition)
        want = FetchPartition(TOPIC, partition, offset, 1 << 20, p.leader_epoch, p.latest_epoch)
        params = FetchParams(0, 1, 1 << 20, FetchIsolation.LOG_END, replica_id=2,
                             replica_epoch=102)
        await self.rm.fetch_messages(params, [want])

    def move_leader(self, partition: int, leader: int, epoch: int) -> None:
        self.rm.apply_partition_state(
            TOPIC, partition, self.topic_id,
            PartitionState((1, 2), (1, 2), leader=leader, leader_epoch=epoch,
                           partition_epoch=epoch), LogConfig())

    def log_keys(self, partition: int) -> list[bytes]:
        from yak.protocol.records import decode_records, iter_batches
        p = self.rm.get_partition(TOPIC, partition)
        info = p.read(p.log_start_offset, 1 << 20, FetchIsolation.LOG_END, True)
        data = b"".join(bytes(b) for b in info.buffers)
        out: list[bytes] = []
        for pos, h in iter_batches(data):
            if not h.is_control:
                out += [r.key for r in decode_records(data[pos:pos + h.batch_length + 12])
                        if r.key is not None]
        return out


async def _no_create(*_a: object) -> None:
    raise AssertionError("the topic exists")


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.logs.shutdown()


def put(key: bytes, value: bytes, applied: list[str], name: str):  # type: ignore[no-untyped-def]
    def op(shard: KVShard) -> CoordinatorResult[str]:
        def apply() -> str:
            shard.kv[key] = value
            applied.append(name)
            return name
        return CoordinatorResult([(key, value)], apply=apply)
    return op


def read_only(applied: list[str], name: str):  # type: ignore[no-untyped-def]
    def op(shard: KVShard) -> CoordinatorResult[str]:
        def apply() -> str:
            applied.append(name)
            return name
        return CoordinatorResult([], apply=apply)
    return op


def test_writes_on_a_shard_take_effect_in_submission_order(env: Env) -> None:
    async def body() -> None:
        rt = env.runtime()
        rt.load_led_partitions()
        assert rt.shard_error(1) is None
        applied: list[str] = []
        w1 = asyncio.ensure_future(rt.schedule_write_operation("w1", 1, put(b"a", b"1", applied, "w1")))
        w2 = asyncio.ensure_future(rt.schedule_write_operation("w2", 1, read_only(applied, "w2")))
        w3 = asyncio.ensure_future(rt.schedule_write_operation("w3", 1, put(b"b", b"2", applied, "w3")))
        for _ in range(20):
            await asyncio.sleep(0)
        # appended at submission, in order; nothing applied before the ISR has it
        assert env.log_keys(1) == [b"a", b"b"]
        assert applied == [] and not w2.done()
        await env.follower_fetch(1, 1)  # the high watermark passes w1's batch only
        assert await asyncio.wait_for(w1, 5) == "w1"
        assert await asyncio.wait_for(w2, 5) == "w2"  # it had no records, but came after w1
        for _ in range(20):
            await asyncio.sleep(0)
        assert applied == ["w1", "w2"] and not w3.done()
        await env.follower_fetch(1, 2)
        assert await asyncio.wait_for(w3, 5) == "w3"
        assert applied == ["w1", "w2", "w3"]
        assert rt.active(1).shard.kv == {b"a": b"1", b"b": b"2"}  # type: ignore[union-attr]
        assert rt.active(1).tail is None  # type: ignore[union-attr]
        await rt.stop()

    asyncio.run(body())


def test_many_concurrent_writes_apply_in_submission_order(env: Env) -> None:
    async def body() -> None:
        rt = env.runtime()
        rt.load_led_partitions()
        applied: list[str] = []
        names = [f"w{i}" for i in range(30)]
        ops = [put(n.encode(), b"v", applied, n) if i % 3 else read_only(applied, n)
               for i, n in enumerate(names)]
        got = await asyncio.gather(*(rt.schedule_write_operation(n, 0, op)
                                     for n, op in zip(names, ops, strict=True)))
        assert got == names and applied == names
        assert env.log_keys(0) == [n.encode() for i, n in enumerate(names) if i % 3]
        await rt.stop()

    asyncio.run(body())


def test_load_replays_to_the_log_end_and_unloads_on_resignation(env: Env) -> None:
    async def body() -> None:
        rt = env.runtime()
        rt.load_led_partitions()
        applied: list[str] = []
        await rt.schedule_write_operation("a", 0, put(b"a", b"1", applied, "a"))
        # a transaction's records, then its COMMIT marker
        await rt.schedule_write_operation("t", 0, lambda _s: CoordinatorResult(
            [(b"t", b"x")], response="t", producer=(7, 0)))
        (r,) = await env.rm.write_txn_markers([TxnMarker(TOPIC, 0, 7, 0, 0, True)])
        assert r.error == 0
        # on partition 1 a record above the high watermark (broker 2 does not have it)
        w = asyncio.ensure_future(rt.schedule_write_operation(
            "u", 1, put(b"u", b"1", applied, "u")))
        for _ in range(10):
            await asyncio.sleep(0)
        await rt.stop()
        w.cancel()  # (a broker's shutdown stops the partition layer, failing the wait)

        # a restart: a new runtime replays both partitions to their log end
        rt2 = env.runtime()
        rt2.load_led_partitions()
        assert env.loaded == [0, 1, 0, 1]
        s0 = rt2.active(0).shard  # type: ignore[union-attr]
        assert s0.kv == {b"a": b"1", b"t": b"x"} and s0.pending == {}
        s1 = rt2.active(1).shard  # type: ignore[union-attr]
        assert s1.kv == {b"u": b"1"}  # above the high watermark: still loaded
        assert rt2.active(1).loaded_end == 1  # type: ignore[union-attr]

        # broker 2 leads partition 1 at epoch 1: the shard goes, its timers with it
        fired: list[str] = []
        rt2.schedule_timer(1, "t", 10, lambda: fired.append("p1"))
        rt2.schedule_timer(0, "t", 10, lambda: fired.append("p0"))
        env.move_leader(1, leader=2, epoch=1)
        rt2.on_partition_change(1, 1, leads=False)
        assert env.unloaded == [1]
        assert rt2.shard_error(1) is E.not_coordinator
        with pytest.raises(KafkaError) as ei:
            await rt2.schedule_write_operation("x", 1, put(b"x", b"1", applied, "x"))
        assert ei.value.code == E.not_coordinator
        env.clock.advance(10)
        rt2.timers.run_due()
        assert fired == ["p0"]
        # an out-of-order resignation of an older epoch does not unload a newer shard
        env.move_leader(1, leader=1, epoch=2)
        rt2.on_partition_change(1, 2, leads=True)
        assert rt2.held_epoch(1) == 2 and rt2.shard_error(1) is None
        assert not rt2.schedule_unload(1, epoch=1)
        assert rt2.shard_error(1) is None
        await rt2.stop()

    asyncio.run(body())


def test_a_write_is_refused_once_the_broker_no_longer_leads_at_the_shards_epoch(
        env: Env) -> None:
    async def body() -> None:
        rt = env.runtime()
        rt.load_led_partitions()
        applied: list[str] = []
        # in flight (waiting for broker 2) when leadership moves: answered with an error,
        # never applied
        w = asyncio.ensure_future(rt.schedule_write_operation(
            "w", 1, put(b"w", b"1", applied, "w")))
        for _ in range(10):
            await asyncio.sleep(0)
        env.move_leader(1, leader=2, epoch=1)
        with pytest.raises(KafkaError) as ei:
            await asyncio.wait_for(w, 5)
        assert ei.value.code in (E.not_leader_or_follower, E.not_coordinator)
        # the runtime was not told yet: the writer's epoch fence refuses, nothing written
        before = env.log_keys(1)
        with pytest.raises(KafkaError) as ei:
            await rt.schedule_write_operation("late", 1, put(b"late", b"1", applied, "late"))
        assert ei.value.code == E.not_leader_or_follower
        assert env.log_keys(1) == before and applied == []
        # led here again at a newer epoch: the old shard (epoch 0) may not write either
        env.move_leader(1, leader=1, epoch=2)
        with pytest.raises(KafkaError) as ei:
            await rt.schedule_write_operation("stale", 1, put(b"s", b"1", applied, "stale"))
        assert ei.value.code == E.not_leader_or_follower
        rt.schedule_load(1, 2)
        assert rt.held_epoch(1) == 2
        w2 = asyncio.ensure_future(rt.schedule_write_operation(
            "new", 1, put(b"n", b"1", applied, "new")))
        for _ in range(10):
            await asyncio.sleep(0)
        p = env.rm.get_partition(TOPIC, 1)
        await env.follower_fetch(1, p.log_end_offset)
        assert await asyncio.wait_for(w2, 5) == "new" and applied == ["new"]
        await rt.stop()

    asyncio.run(body())


def test_a_shard_whose_load_failed_is_not_served_and_can_be_loaded_again(env: Env) -> None:
    async def body() -> None:
        rt = env.runtime()
        rt.load_led_partitions()
        applied: list[str] = []
        await rt.schedule_write_operation("a", 0, put(b"bad", b"1", applied, "a"))
        await rt.stop()
        rt2 = env.runtime()
        broken = {"on": True}
        real_builder = rt2.builder

        def builder(partition: int, epoch: int) -> KVShard:
            shard = real_builder(partition, epoch)
            if broken["on"]:
                def replay(*_a: object) -> None:
                    raise ValueError("unreadable record")
                shard.replay = replay  # type: ignore[method-assign]
            return shard

        rt2.builder = builder
        with pytest.raises(ValueError):
            rt2.schedule_load(0, 0)
        assert rt2.context(0).state is ShardState.FAILED  # type: ignore[union-attr]
        assert rt2.shard_error(0) is E.not_coordinator
        with pytest.raises(KafkaError) as ei:
            await rt2.schedule_write_operation("b", 0, put(b"b", b"1", applied, "b"))
        assert ei.value.code == E.not_coordinator
        broken["on"] = False
        rt2.on_partition_change(0, 0, leads=True)  # the same epoch again: retried
        assert rt2.shard_error(0) is None
        assert rt2.active(0).shard.kv == {b"bad": b"1"}  # type: ignore[union-attr]
        await rt2.stop()

    asyncio.run(body())


def test_shard_timers_fire_on_the_manual_clock(env: Env) -> None:
    async def body() -> None:
        rt = env.runtime()
        rt.load_led_partitions()
        fired: list[str] = []
        rt.schedule_timer(0, "a", 1000, lambda: fired.append("a"))
        rt.schedule_timer(0, "b", 500, lambda: fired.append("b"))
        rt.schedule_timer(0, "b", 1500, lambda: fired.append("b2"))  # replaces b
        env.clock.advance(999)
        rt.timers.run_due()
        assert fired == []
        env.clock.advance(1)
        rt.timers.run_due()
        assert fired == ["a"]
        rt.cancel_timer(0, "b")
        env.clock.advance(10_000)
        rt.timers.run_due()
        assert fired == ["a"]
        # the timer task runs them too, woken by a new earliest deadline
        rt.start_timers()
        rt.schedule_timer(0, "c", 0, lambda: fired.append("c"))
        await await_until(lambda: fired[-1] == "c", 5, "the timer task to run c")
        assert fired == ["a", "c"]
        await rt.stop()

    asyncio.run(body())


def test_wait_loaded_returns_once_the_shard_is_active_or_times_out(env: Env) -> None:
    """A first write right after the topic is created waits for the partition layer to
    hand its partition to this broker (the publisher's hook loads it a moment later)."""
    async def body() -> None:
        rt = env.runtime()
        assert not await rt.wait_loaded(0, 50)  # never loaded: times out
        waiting = asyncio.ensure_future(rt.wait_loaded(0, 5000))
        await asyncio.sleep(0)
        assert not waiting.done()
        rt.on_partition_change(0, 0, leads=True)  # the hook: led here at epoch 0
        assert await asyncio.wait_for(waiting, 5) is True
        assert await rt.wait_loaded(0, 0) is True  # already active: no wait
        await rt.stop()

    asyncio.run(body())


def test_a_big_load_runs_in_chunks_between_other_work_and_sees_what_lands_meanwhile(
        env: Env) -> None:
    """A partition longer than one read chunk is replayed by a task, one chunk per turn
    of the event loop: LOADING (COORDINATOR_LOAD_IN_PROGRESS) until the last chunk, the
    loop free between chunks, a transaction marker appended during the load replayed, and
    an unload during the load stopping it with nothing activated."""
    async def body() -> None:
        rt = env.runtime()
        rt.load_led_partitions()
        applied: list[str] = []
        value = b"v" * 200
        for i in range(200):  # ~2,000 records of ~200 B: several 64 KiB chunks
            await rt.schedule_write_operation(f"w{i}", 0, lambda _s, i=i: CoordinatorResult(
                [(f"k{i}-{j}".encode(), value) for j in range(10)], response=None))
        await rt.schedule_write_operation("t", 0, lambda _s: CoordinatorResult(
            [(b"t", b"x")], response="t", producer=(7, 0)))
        await rt.stop()

        rt2 = env.runtime()
        assert rt2.schedule_load(0, 0) is None  # more than one chunk: goes on in a task
        assert rt2.shard_error(0) is E.coordinator_load_in_progress
        with pytest.raises(KafkaError) as ei:
            await rt2.schedule_write_operation("x", 0, put(b"x", b"1", applied, "x"))
        assert ei.value.code == E.coordinator_load_in_progress
        # the loop is free meanwhile: the transaction's marker lands during the load
        (r,) = await env.rm.write_txn_markers([TxnMarker(TOPIC, 0, 7, 0, 0, True)])
        assert r.error == 0 and rt2.active(0) is None
        turns = 0
        while rt2.active(0) is None:
            await asyncio.sleep(0)
            turns += 1
            assert turns < 10_000
        assert turns >= 3, "replayed in one go"
        s0 = rt2.active(0).shard  # type: ignore[union-attr]
        assert len(s0.kv) == 2001 and s0.kv[b"t"] == b"x" and s0.pending == {}
        assert rt2.context(0).loaded_end == env.rm.get_partition(  # type: ignore[union-attr]
            TOPIC, 0).log_end_offset

        # an unload during a load stops it: nothing activated, no task left behind
        rt2.schedule_unload(0)
        assert rt2.schedule_load(0, 1) is None
        ctx = rt2.context(0)
        task = ctx.load_task  # type: ignore[union-attr]
        assert task is not None
        rt2.schedule_unload(0)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert rt2.context(0) is None and ctx.state is ShardState.CLOSED  # type: ignore[union-attr]
        await rt2.stop()

    asyncio.run(body())
