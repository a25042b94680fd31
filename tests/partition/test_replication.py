"""Replication in the partition layer, on real logs: a leader and followers as separate
ReplicaManagers (each its own LogManager in its own directory) in one process, with a
small in-memory "controller" standing in for the store that accepts ISR changes against
the partition epoch. The follower's fetch loop is driven by hand here (one round at a
time, as the replica fetcher does it); over real sockets it is tested in
tests/cluster/test_replica_fetcher.py.

Covered: the high watermark over the ISR and its min.insync.replicas floor (KAFKA-15583),
acks=all waiting for followers, NOT_ENOUGH_REPLICAS / NOT_ENOUGH_REPLICAS_AFTER_APPEND,
ISR shrink after replica.lag.time.max.ms and expansion at the high watermark and the
epoch's start, the maximal ISR while a change is in flight, refused/failed changes,
diverging epochs and truncation to byte-identical logs, a follower far behind the log start,
idempotent producer state carried by followers, and fencing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from yak.clock import ManualClock
from yak.errors import ErrorCode, NotLeaderOrFollowerError, error_for_code
from yak.partition import (
    AppendOrigin,
    FetchIsolation,
    FetchParams,
    FetchPartition,
    PartitionState,
    ReplicaManager,
)
from yak.partition.isr import IsrChange
from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager

TID = uuid.uuid4()
T = "t"


def batch(n: int = 1, pid: int = -1, seq: int = -1, epoch: int = -1) -> memoryview:
    now = int(time.time() * 1000)
    return memoryview(build_batch([Record(b"k", b"v%d" % i, now) for i in range(n)],
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq))


class Controller:
    """The store of partition states: accepts an ISR change only against the current
    partition epoch (AlterPartition's rule) and hands every new state to every broker."""

    def __init__(self, config: LogConfig) -> None:
        self.config = config
        self.state: PartitionState | None = None
        self.brokers: dict[int, ReplicaManager] = {}
        self.requests: list[IsrChange] = []
        self.hold: asyncio.Event | None = None  # set: answer; None: answer at once
        self.fail_with: Exception | None = None
        # The brokers' clock for durations (follower silence, ISR retry pause): tests
        # move it instead of sleeping.
        self.clock = ManualClock()

    def publish(self, state: PartitionState) -> None:
        self.state = state
        for rm in self.brokers.values():
            if rm.node_id in state.replicas:
                rm.apply_partition_state(T, 0, TID, state, self.config)

    async def submit(self, change: IsrChange) -> PartitionState:
        self.requests.append(change)
        if self.hold is not None:
            await self.hold.wait()
        if self.fail_with is not None:
            raise self.fail_with
        st = self.state
        assert st is not None
        if change.partition_epoch != st.partition_epoch or change.leader_epoch != st.leader_epoch:
            raise error_for_code(ErrorCode.invalid_update_version, "stale partition epoch")
        new = PartitionState(st.replicas, change.new_isr, st.leader, st.leader_epoch,
                             st.partition_epoch + 1)
        self.state = new
        # Like the etcd store, the change reaches the other brokers through the metadata.
        for rm in self.brokers.values():
            if rm.node_id != st.leader:
                rm.apply_partition_state(T, 0, TID, new, self.config)
        return new


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Controller, dict[int, ReplicaManager]]]:
    config = LogConfig.from_props({"min.insync.replicas": "2"})
    ctl = Controller(config)
    managers: dict[int, ReplicaManager] = {}
    logs = []
    for node in (1, 2, 3):
        lm = LogManager(str(tmp_path / f"b{node}"), LogConfig(), start_cleaner=False)
        lm.startup()
        logs.append(lm)
        managers[node] = ReplicaManager(node, lm, replica_lag_time_max_ms=300,
                                        alter_partition=ctl, clock=ctl.clock)
    ctl.brokers = managers
    yield ctl, managers
    for rm in managers.values():
        rm.io_pool.shutdown(wait=True)
    for lm in logs:
        lm.shutdown()


def run(coro):  # noqa: ANN001, ANN201
    return asyncio.run(asyncio.wait_for(coro, 20))


async def until(cond, what: str = "the condition", rounds: int = 1000) -> None:  # noqa: ANN001
    """Let the event loop run (ISR changes and produces are tasks) until `cond()` holds:
    synchronisation on the condition itself, never on a wall-clock sleep."""
    for _ in range(rounds):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


async def settle(rounds: int = 50) -> None:
    """Let every runnable task run, to check that something did NOT happen."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def replicate_once(leader: ReplicaManager, follower: ReplicaManager,
                         max_wait_ms: int = 0) -> object:
    """One round of the replica fetcher: fetch from the follower's log end with its last
    epoch, then truncate or append as the answer says."""
    p = follower.get_partition(T, 0)
    want = FetchPartition(T, 0, p.log_end_offset, 1 << 20, p.leader_epoch, p.latest_epoch,
                          p.log_start_offset)
    params = FetchParams(max_wait_ms, 1, 10 << 20, FetchIsolation.LOG_END,
                         replica_id=follower.node_id, replica_epoch=100 + follower.node_id)
    (r,) = await leader.fetch_messages(params, [want])
    if r.error == ErrorCode.offset_out_of_range and p.log_end_offset < r.log_start_offset:
        follower.truncate_fully_and_start_at(T, 0, p.leader_epoch, r.log_start_offset)
    elif r.error == 0 and r.diverging_epoch is not None:
        epoch, end = r.diverging_epoch
        mine, my_end = p.end_offset_for_epoch(epoch)
        follower.truncate(T, 0, p.leader_epoch, min(end, my_end) if mine == epoch else my_end)
    elif r.error == 0:
        data = memoryview(b"".join(bytes(b) for b in r.buffers))
        follower.append_as_follower(T, 0, p.leader_epoch, data, r.high_watermark,
                                    r.log_start_offset)
    return r


def start(ctl: Controller, managers: dict[int, ReplicaManager], leader: int = 1,
          isr: tuple[int, ...] = (1, 2, 3), epoch: int = 0) -> None:
    ctl.publish(PartitionState((1, 2, 3), isr, leader, epoch, epoch))


def log_bytes(rm: ReplicaManager, upto: int) -> bytes:
    p = rm.get_partition(T, 0)
    out = p.log.read(p.log_start_offset, 1 << 30, max_offset=upto)
    return b"".join(bytes(b) for b in out.buffers)


async def produce(rm: ReplicaManager, acks: int, data: memoryview | None = None,
                  timeout_ms: int = 5000) -> object:
    (r,) = await rm.append_records([(T, 0, data if data is not None else batch())], acks,
                                   AppendOrigin.CLIENT, timeout_ms)
    return r


async def produce_bg(rm: ReplicaManager, acks: int, data: memoryview | None = None,
                     timeout_ms: int = 5000) -> asyncio.Future:
    """Start a produce and let it reach the purgatory (appended, waiting)."""
    task = asyncio.ensure_future(produce(rm, acks, data, timeout_ms))
    await until(lambda: task.done() or rm.produce_purgatory.waiting() > 0, "produce parked")
    return task


def test_acks_all_completes_when_the_isr_has_the_records(cluster) -> None:  # noqa: ANN001
    ctl, rms = cluster
    start(ctl, rms)

    async def body() -> None:
        task = asyncio.ensure_future(produce(rms[1], -1, batch(3)))
        await until(lambda: rms[1].produce_purgatory.waiting() == 1, "produce parked")
        assert not task.done()
        # Follower 2 copies the batch; the leader learns it only from 2's next fetch.
        await replicate_once(rms[1], rms[2])
        await replicate_once(rms[1], rms[2])
        await asyncio.sleep(0)
        assert not task.done()  # 3 is in the ISR too and has nothing yet
        await replicate_once(rms[1], rms[3])
        r3 = await replicate_once(rms[1], rms[3])
        r = await asyncio.wait_for(task, 5)
        assert r.error == 0 and r.info.base_offset == 0
        assert rms[1].get_partition(T, 0).high_watermark == 3
        # The next fetch of each follower carries the leader's HW: theirs is min(it, LEO).
        assert r3.high_watermark == 3 and rms[3].get_partition(T, 0).high_watermark == 3
        await replicate_once(rms[1], rms[2])
        assert rms[2].get_partition(T, 0).high_watermark == 3

    run(body())
    assert log_bytes(rms[1], 3) == log_bytes(rms[2], 3) == log_bytes(rms[3], 3)


def test_high_watermark_never_moves_below_min_insync(cluster) -> None:  # noqa: ANN001
    ctl, rms = cluster
    start(ctl, rms, isr=(1,))  # min.insync.replicas=2

    async def body() -> None:
        r = await produce(rms[1], -1)
        assert r.error == ErrorCode.not_enough_replicas  # refused before writing
        assert rms[1].get_partition(T, 0).log_end_offset == 0
        r = await produce(rms[1], 1)  # acks=1 is written...
        assert r.error == 0
        # ...but not exposed as committed while the ISR is below min.insync.replicas.
        assert rms[1].get_partition(T, 0).high_watermark == 0
        # Follower 2 catches up and is added to the ISR: then the HW moves.
        await replicate_once(rms[1], rms[2])
        await replicate_once(rms[1], rms[2])
        await until(lambda: 2 in rms[1].get_partition(T, 0).state.isr, "2 joins the ISR")
        p = rms[1].get_partition(T, 0)
        assert p.state.isr == (1, 2) and p.state.partition_epoch == 1
        assert p.high_watermark == 1
        assert rms[1].isr_expands == 1

    run(body())


def test_lagging_follower_leaves_the_isr_and_acks_continue(cluster) -> None:  # noqa: ANN001
    ctl, rms = cluster
    start(ctl, rms)

    async def body() -> None:
        await rms[1].start()
        try:
            task = asyncio.ensure_future(produce(rms[1], -1, timeout_ms=10_000))
            # Only follower 2 fetches; 3 is silent for more than replica.lag.time.max.ms
            # (the clock moves 50 ms a round). Polling on the condition: the ISR decision
            # is made on the manual clock, but the point here is that the broker's own
            # expiration task makes it, and that task ticks on the event loop's timer
            # (every 150 ms here), so each round yields 20 ms of it.
            deadline = time.monotonic() + 5
            while not task.done() and time.monotonic() < deadline:
                await replicate_once(rms[1], rms[2])
                ctl.clock.advance(50)
                await asyncio.sleep(0.02)
            r = await task
            assert r.error == 0
            p = rms[1].get_partition(T, 0)
            assert p.state.isr == (1, 2) and rms[1].isr_shrinks == 1
            assert [c.new_isr for c in ctl.requests] == [(1, 2)]
            # Acks go on with ISR {1, 2} (>= min.insync.replicas).
            task = await produce_bg(rms[1], -1)
            for _ in range(3):
                await replicate_once(rms[1], rms[2])
            assert (await task).error == 0
            # 3 comes back, catches up to the HW and joins again.
            for _ in range(3):
                await replicate_once(rms[1], rms[3])
            await until(lambda: p.state.isr == (1, 2, 3), "3 joins the ISR again")
            assert rms[1].isr_expands == 1
            assert ctl.requests[-1].broker_epochs == ((2, 102), (3, 103))
        finally:
            await rms[1].stop()

    run(body())


def test_isr_change_in_flight_keeps_the_maximal_isr(cluster) -> None:  # noqa: ANN001
    """While a shrink is being stored, the HW still waits for the replica leaving (it is
    in the ISR until the store says otherwise); a refused change is dropped."""
    ctl, rms = cluster
    start(ctl, rms)

    async def body() -> None:
        ctl.hold = asyncio.Event()
        p = rms[1].get_partition(T, 0)
        assert (await produce(rms[1], 1)).error == 0
        ctl.clock.advance(350)
        await replicate_once(rms[1], rms[2])
        await replicate_once(rms[1], rms[2])
        assert p.maybe_shrink_isr()  # 3 has been silent for > 300 ms
        assert not p.maybe_shrink_isr()  # one change at a time
        await until(lambda: len(ctl.requests) == 1, "the shrink is asked for")
        await settle()
        assert len(ctl.requests) == 1 and p.high_watermark == 0  # still waits for 3
        ctl.hold.set()
        await until(lambda: p.state.isr == (1, 2), "the shrink is stored")
        assert p.high_watermark == 1
        # A refused change (the store moved on: stale partition epoch) changes nothing.
        ctl.hold = None
        ctl.publish(PartitionState((1, 2, 3), (1, 2), 1, 0, 5))
        ctl.state = PartitionState((1, 2, 3), (1, 2), 1, 0, 6)  # a write this leader missed
        await replicate_once(rms[1], rms[3])
        await replicate_once(rms[1], rms[3])
        await until(lambda: len(ctl.requests) == 2, "the expansion is asked for")
        await settle()
        assert p.state.isr == (1, 2) and p.state.partition_epoch == 5
        # An unreachable store (etcd down) also leaves the ISR as it is.
        ctl.fail_with = ConnectionError("etcd unreachable")
        ctl.clock.advance(600)  # past the retry pause
        await replicate_once(rms[1], rms[3])
        await until(lambda: len(ctl.requests) == 3, "the expansion is asked again")
        await settle()
        assert p.state.isr == (1, 2) and len(ctl.requests) == 3

    run(body())


def test_timeout_after_the_isr_fell_below_min_insync(cluster) -> None:  # noqa: ANN001
    ctl, rms = cluster
    start(ctl, rms, isr=(1, 2))

    async def body() -> None:
        task = asyncio.ensure_future(produce(rms[1], -1, timeout_ms=300))
        await until(lambda: rms[1].produce_purgatory.waiting() == 1, "produce parked")
        ctl.publish(PartitionState((1, 2, 3), (1,), 1, 0, 1))  # 2 removed meanwhile
        r = await task
        assert r.error == ErrorCode.not_enough_replicas_after_append
        task = asyncio.ensure_future(produce(rms[1], 1))
        assert (await task).error == 0
        ctl.publish(PartitionState((1, 2, 3), (1, 2), 1, 0, 2))
        r = await produce(rms[1], -1, timeout_ms=200)
        assert r.error == ErrorCode.request_timed_out  # plain timeout: 2 did not fetch

    run(body())


def test_diverging_follower_truncates_to_the_leaders_log(cluster) -> None:  # noqa: ANN001
    """Broker 1 leads epoch 0 and writes batches only 2 copies; 1 dies; 3 (which has less)
    ... is made leader at epoch 1 by an unclean choice, writes its own batches; 2 then
    follows 3: its fetch with last_fetched_epoch 0 is answered with a diverging epoch, it
    truncates to where epoch 0 ends on 3 and copies epoch 1: byte-identical logs."""
    ctl, rms = cluster
    start(ctl, rms)

    async def body() -> None:
        await produce(rms[1], 1, batch(2))
        for f in (2, 3):
            await replicate_once(rms[1], rms[f])
        await produce(rms[1], 1, batch(5))
        await replicate_once(rms[1], rms[2])  # only 2 has offsets 2..6
        assert rms[2].get_partition(T, 0).log_end_offset == 7
        assert rms[3].get_partition(T, 0).log_end_offset == 2
        del ctl.brokers[1]
        ctl.publish(PartitionState((1, 2, 3), (3, 2), 3, 1, 1))
        assert (await produce(rms[3], 1, batch(3))).error == 0  # offsets 2..4 at epoch 1
        r = await replicate_once(rms[3], rms[2])
        assert r.diverging_epoch == (0, 2)
        assert rms[2].get_partition(T, 0).log_end_offset == 2
        r = await replicate_once(rms[3], rms[2])
        assert r.diverging_epoch is None and r.size > 0
        await replicate_once(rms[3], rms[2])
        p2 = rms[2].get_partition(T, 0)
        assert p2.log_end_offset == 5 and p2.latest_epoch == 1
        assert rms[3].get_partition(T, 0).high_watermark == 5

    run(body())
    assert log_bytes(rms[2], 5) == log_bytes(rms[3], 5)


def test_follower_behind_the_log_start_restarts_there(cluster) -> None:  # noqa: ANN001
    ctl, rms = cluster
    start(ctl, rms, isr=(1, 2))

    async def body() -> None:
        for _ in range(4):
            task = await produce_bg(rms[1], -1, batch(2))
            await replicate_once(rms[1], rms[2])
            await replicate_once(rms[1], rms[2])
            assert (await task).error == 0
        assert rms[1].delete_records(T, 0, 6) == 6
        r = await replicate_once(rms[1], rms[3])  # 3 has nothing: offset 0 < start 6
        assert r.error == ErrorCode.offset_out_of_range
        p3 = rms[3].get_partition(T, 0)
        assert p3.log_start_offset == p3.log_end_offset == 6
        await replicate_once(rms[1], rms[3])
        assert p3.log_end_offset == 8
        # The leader's log start reaches followers through the fetch responses.
        await replicate_once(rms[1], rms[2])
        assert rms[2].get_partition(T, 0).log_start_offset == 6

    run(body())
    assert log_bytes(rms[1], 8) == log_bytes(rms[3], 8)


def test_new_leader_knows_the_producers_sequences(cluster) -> None:  # noqa: ANN001
    """A batch acknowledged by the old leader and retried to the new one is a duplicate
    there (the follower kept the producer state from the replicated batches)."""
    ctl, rms = cluster
    start(ctl, rms, isr=(1, 2))

    async def body() -> None:
        b = batch(3, pid=7, seq=0, epoch=0)
        task = await produce_bg(rms[1], -1, b)
        await replicate_once(rms[1], rms[2])
        await replicate_once(rms[1], rms[2])
        first = await task
        assert first.error == 0 and first.info.base_offset == 0
        ctl.publish(PartitionState((1, 2, 3), (2,), 2, 1, 1))
        (again,) = await rms[2].append_records([(T, 0, b)], 1, AppendOrigin.CLIENT, 1000)
        assert again.error == 0 and again.info.base_offset == 0
        assert again.info.record_count == 0  # nothing appended
        assert rms[2].get_partition(T, 0).log_end_offset == 3

    run(body())


def test_fenced_broker_acknowledges_nothing(cluster) -> None:  # noqa: ANN001
    ctl, rms = cluster
    start(ctl, rms, isr=(1, 2))
    leader = rms[1]

    async def body() -> None:
        task = asyncio.ensure_future(produce(leader, -1))
        await until(lambda: leader.produce_purgatory.waiting() == 1, "produce parked")
        leader.fence("test: registration lost")
        r = await task
        assert r.error == ErrorCode.not_leader_or_follower
        assert (await produce(leader, 1)).error == ErrorCode.not_leader_or_follower
        p = leader.get_partition(T, 0)
        assert not p.maybe_shrink_isr(ctl.clock.now_ms() + 10_000)
        leader.unfence()
        # A session that is not known to be valid (paused past it) also stops acks, even
        # when the records did reach the ISR.
        valid = [True]
        leader.session_valid = lambda: valid[0]
        task = await produce_bg(leader, -1)
        valid[0] = False
        await replicate_once(leader, rms[2])
        await replicate_once(leader, rms[2])
        r = await task
        assert r.error == ErrorCode.not_leader_or_follower
        assert p.high_watermark == p.log_end_offset  # replicated, yet not acknowledged
        valid[0] = True
        assert (await produce(leader, 1)).error == 0

    run(body())


def test_follower_operations_check_the_epoch(cluster) -> None:  # noqa: ANN001
    ctl, rms = cluster
    start(ctl, rms, epoch=4)
    with pytest.raises(NotLeaderOrFollowerError):
        rms[2].append_as_follower(T, 0, 3, batch(), 0, 0)  # a fetch from an old epoch
    with pytest.raises(NotLeaderOrFollowerError):
        rms[1].truncate(T, 0, 4, 0)  # a leader never truncates
    assert rms[1].last_offset_for_leader_epoch(T, 0, 4) == (-1, -1)
    run(produce(rms[1], 1, batch(2)))
    assert rms[1].last_offset_for_leader_epoch(T, 0, 4, 4) == (4, 2)
    assert rms[1].last_offset_for_leader_epoch(T, 0, 9) == (4, 2)


def test_new_leader_lists_no_offsets_until_its_high_watermark_reaches_its_epoch(
        cluster) -> None:  # noqa: ANN001
    """KIP-207: a new leader's high watermark starts below what the old leader exposed;
    ListOffsets answers OFFSET_NOT_AVAILABLE (retriable) until the ISR caught up with the
    new epoch's start, so a consumer never resets to an offset it already read past."""
    from yak.errors import OffsetNotAvailableError
    from yak.partition import LATEST_TIMESTAMP

    ctl, rms = cluster
    start(ctl, rms, isr=(1, 2))

    async def body() -> None:
        assert (await produce(rms[1], 1, batch(3))).error == 0
        await replicate_once(rms[1], rms[2])  # 2 copies them; the HW it learns is still 0
        ctl.publish(PartitionState((1, 2, 3), (2, 1), 2, 1, 1))
        p2 = rms[2].get_partition(T, 0)
        assert p2.high_watermark < p2.log_end_offset == 3
        with pytest.raises(OffsetNotAvailableError):
            rms[2].fetch_offset_for_timestamp(T, 0, LATEST_TIMESTAMP,
                                              FetchIsolation.HIGH_WATERMARK)
        await replicate_once(rms[2], rms[1])  # 1 follows 2 now: the HW reaches 3
        assert rms[2].fetch_offset_for_timestamp(
            T, 0, LATEST_TIMESTAMP, FetchIsolation.HIGH_WATERMARK) == (3, -1, 1)

    run(body())


def test_batches_behind_a_refused_one_get_its_error_not_a_sequence_gap(cluster) -> None:  # noqa: ANN001
    """An idempotent producer pipelines batches. When the first is refused for a transient
    reason that is over before the next arrives (the session renewed late: fenced for
    100 ms; the ISR back at min.insync.replicas), the next must get the same retriable
    error, not OUT_OF_ORDER_SEQUENCE_NUMBER: librdkafka answers that by bumping its epoch
    and renumbering messages other partitions already wrote (duplicates, librdkafka
    #4953, found by yak chaos). A gap with no refusal behind it stays OUT_OF_ORDER."""
    ctl, rms = cluster
    start(ctl, rms, isr=(1, 2))
    leader = rms[1]
    pid = 11

    def b(seq: int, n: int = 2) -> memoryview:
        return batch(n, pid=pid, seq=seq, epoch=0)

    async def body() -> None:
        assert (await produce(leader, 1, b(0))).error == 0  # seq 0-1
        # Fenced while the batch at seq 2 arrives; unfenced before the one at seq 4.
        leader.fence("test: lease renewed late")
        assert (await produce(leader, 1, b(2))).error == ErrorCode.not_leader_or_follower
        leader.unfence()
        r = await produce(leader, 1, b(4))
        assert r.error == ErrorCode.not_leader_or_follower, r.error_message
        assert "ahead of this one was refused" in r.error_message
        # The producer retries in order: both go in, with their sequences.
        assert (await produce(leader, 1, b(2))).info.base_offset == 2
        assert (await produce(leader, 1, b(4))).info.base_offset == 4
        # Now the ISR falls below min.insync.replicas for one acks=all batch, and is back
        # (2 caught up) before the batch behind it.
        ctl.publish(PartitionState((1, 2, 3), (1,), 1, 0, 5))
        assert (await produce(leader, -1, b(6))).error == ErrorCode.not_enough_replicas
        ctl.publish(PartitionState((1, 2, 3), (1, 2), 1, 0, 6))
        assert (await produce(leader, 1, b(8))).error == ErrorCode.not_enough_replicas
        assert (await produce(leader, 1, b(6))).error == 0
        assert (await produce(leader, 1, b(8))).error == 0
        # Nothing refused in front of it: a gap is the producer's own, as in Kafka.
        assert (await produce(leader, 1, b(20))).error == ErrorCode.out_of_order_sequence_number
        assert leader.get_partition(T, 0).log_end_offset == 10

    run(body())


def test_batch_behind_one_refused_by_a_full_disk_gets_a_storage_error(tmp_path: Path) -> None:
    """The same on a real full disk (a 2 MiB tmpfs; needs root): the batch behind one that
    failed with KAFKA_STORAGE_ERROR gets KAFKA_STORAGE_ERROR, and once space is back the
    retried batches are written in order. This is the case `yak chaos` found (disk-full on
    one broker, duplicates on a partition another broker led)."""
    import contextlib
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount tmpfs: {r.stderr.strip()}")
    lm = LogManager(str(mnt / "data"), LogConfig(), start_cleaner=False)
    try:
        lm.startup()
        rm = ReplicaManager(1, lm)
        rm.apply_partition_state(T, 0, TID, PartitionState((1,), (1,), 1, 0, 0), LogConfig())

        def b(seq: int, size: int = 100) -> memoryview:
            return memoryview(build_batch([Record(b"k", b"v" * size)], producer_id=3,
                                          producer_epoch=0, base_sequence=seq))

        async def body() -> None:
            assert (await produce(rm, -1, b(0))).error == 0
            ballast = mnt / "ballast"
            with open(ballast, "wb") as f, contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            assert (await produce(rm, -1, b(1, 200_000))).error == ErrorCode.kafka_storage_error
            r2 = await produce(rm, -1, b(2))
            assert r2.error == ErrorCode.kafka_storage_error, r2.error_message
            ballast.unlink()
            assert (await produce(rm, -1, b(1, 200_000))).info.base_offset == 1
            assert (await produce(rm, -1, b(2))).info.base_offset == 2

        run(body())
        rm.io_pool.shutdown(wait=True)
    finally:
        with contextlib.suppress(Exception):  # a failed test may leave the disk full
            lm.shutdown()
        subprocess.run(["umount", "-l", str(mnt)], check=False)
