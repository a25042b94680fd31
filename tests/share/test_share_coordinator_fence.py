"""The read fence is durable (issue 24): a ReadShareGroupState from a share-partition
leader at a newer leader epoch writes a record carrying that epoch before it answers
(Kafka's readStateAndMaybeUpdateLeaderEpoch), so an older leader's write is still
FENCED_LEADER_EPOCH after the share coordinator fails over, before the new leader wrote
anything. Before, the fence lived in the coordinator's memory only and a failover in that
window forgot it: a deposed leader that lived on could then land an accept the new leader
never saw, and the record was handed out again.

First through the coordinator runtime on an in-memory log (the failover is a second
coordinator replaying the same log), then on three real brokers with the state RPCs on
the wire, the coordinator's broker SIGKILLed and restarted."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import cluster_factory, etcd, keys  # noqa: F401 (fixtures)
from tests.cluster.test_cluster_metadata import _metadata
from yak.clock import ManualClock
from yak.coordinator.memory import MemoryCoordinatorLog
from yak.errors import ErrorCode
from yak.protocol import kio_compat
from yak.share import records as rec
from yak.share.coordinator import ShareCoordinator
from yak.share.records import SHARE_STATE_TOPIC, ShareKey, partition_for

TID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def _coordinator(log: MemoryCoordinatorLog) -> ShareCoordinator:
    c = ShareCoordinator(log, log, ManualClock())
    c.runtime.load_led_partitions()
    return c


def test_a_newer_leaders_read_fences_the_old_one_across_a_coordinator_failover() -> None:
    async def run() -> None:
        log = MemoryCoordinatorLog(num_partitions=3, topic=rec.SHARE_STATE_TOPIC)
        coord = _coordinator(log)
        key = ShareKey("g", TID, 0)
        assert await coord.write(key, 0, 3, 0, [(0, 9, 0, 1)]) is ErrorCode.none
        p = coord.partition_for(key)
        before = len(log.records(p))
        code, st = await coord.read_state(key, 4)  # the new leader loads
        assert code is ErrorCode.none and st is not None and st.batches == [(0, 9, 0, 1)]
        assert len(log.records(p)) == before + 1  # the epoch, written
        again = _coordinator(log)  # the share coordinator failed over: a fresh replay
        assert await again.write(key, 0, 3, 0, [(0, 0, 2, 1)]) is ErrorCode.fenced_leader_epoch
        assert (await again.read_state(key, 3))[0] is ErrorCode.fenced_leader_epoch
        code, st = await again.read_state(key, 4)
        assert code is ErrorCode.none and st is not None
        assert (st.start_offset, st.batches) == (0, [(0, 9, 0, 1)])  # nothing slipped in
        assert len(log.records(p)) == before + 1  # a read at the epoch held writes nothing
        assert await again.write(key, 0, 4, 0, [(0, 0, 2, 1)]) is ErrorCode.none

    asyncio.run(run())


def test_a_leaders_read_answers_after_the_writes_submitted_before_it() -> None:
    """The read is a write operation: it answers once every write of the shard submitted
    before it completed, so what the old leader wrote up to the read is in the window the
    new leader reads; an old leader's write submitted after it is fenced."""
    async def run() -> None:
        log = MemoryCoordinatorLog(num_partitions=3, topic=rec.SHARE_STATE_TOPIC)
        coord = _coordinator(log)
        key = ShareKey("g", TID, 0)
        assert await coord.write(key, 0, 3, 0, [(0, 9, 0, 1)]) is ErrorCode.none
        log.hold = asyncio.Event()  # appended, not committed yet
        accept = asyncio.ensure_future(coord.write(key, 0, 3, 0, [(0, 0, 2, 1)]))
        await asyncio.sleep(0)
        read = asyncio.ensure_future(coord.read_state(key, 4))
        await asyncio.sleep(0)
        late = asyncio.ensure_future(coord.write(key, 0, 3, 0, [(1, 1, 2, 1)]))
        await asyncio.sleep(0)
        assert not read.done()
        log.hold.set()
        assert await accept is ErrorCode.none
        code, st = await read
        assert code is ErrorCode.none and st is not None
        assert st.batches == [(0, 0, 2, 1), (1, 9, 0, 1)]  # the accept submitted before
        assert await late is ErrorCode.fenced_leader_epoch

    asyncio.run(run())


def test_a_snapshot_applied_after_a_newer_read_keeps_the_fence() -> None:
    """A snapshot (built from the state when its operation ran) completing after a newer
    leader's read was submitted must not take the fence back down."""
    async def run() -> None:
        log = MemoryCoordinatorLog(num_partitions=3, topic=rec.SHARE_STATE_TOPIC)
        coord = ShareCoordinator(log, log, ManualClock(), snapshot_every=1)
        coord.runtime.load_led_partitions()
        key = ShareKey("g", TID, 0)
        assert await coord.write(key, 0, 3, 0, [(0, 9, 0, 1)]) is ErrorCode.none
        assert await coord.write(key, 0, 3, 0, [(0, 0, 2, 1)]) is ErrorCode.none  # update
        log.hold = asyncio.Event()
        snap = asyncio.ensure_future(coord.write(key, 0, 3, 0, [(1, 1, 2, 1)]))  # snapshot
        await asyncio.sleep(0)
        read = asyncio.ensure_future(coord.read_state(key, 4))
        await asyncio.sleep(0)
        log.hold.set()
        assert await snap is ErrorCode.none
        ctx = coord.runtime.context(coord.partition_for(key))
        assert ctx is not None and ctx.shard.states[key].leader_epoch == 4
        assert (await read)[0] is ErrorCode.none
        assert await coord.write(key, 0, 3, 0, [(2, 2, 2, 1)]) is ErrorCode.fenced_leader_epoch

    asyncio.run(run())


# ---------------------------------------------------------------- real brokers

def _req(api: str, cls: str, data: str, tid: uuid.UUID, parts: tuple[Any, ...]) -> Any:
    mod = kio_compat.schema_module(api, 0, "request")
    return getattr(mod, cls)(group_id="sg", topics=(getattr(mod, data)(
        topic_id=tid, partitions=parts),))


def _one(resp: Any) -> Any:
    (t,) = resp.results
    (p,) = t.partitions
    return p


RETRIABLE = {ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
             ErrorCode.coordinator_not_available}


def _until_answered(c: Any, send: Any, timeout: float = 40.0) -> Any:
    """`send(bootstrap)` to the leader of the key's __share_group_state partition until it
    answers with something other than a retriable coordinator error."""
    end = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < end:
        for b in c.brokers.values():
            if not b.is_alive():
                continue
            try:
                last = send(b.bootstrap)
            except (OSError, ConnectionError):
                continue
            if ErrorCode(last.error_code) not in RETRIABLE:
                return last
        time.sleep(0.3)
    raise AssertionError(f"no coordinator answered: {last}")


@pytest.mark.slow
def test_the_read_fence_survives_a_share_coordinator_failover_on_real_brokers(
        cluster_factory) -> None:  # noqa: F811 (the fixture imported above)
    c = cluster_factory(3)
    tid = uuid.uuid4()
    w = kio_compat.schema_module("write_share_group_state", 0, "request")
    r = kio_compat.schema_module("read_share_group_state", 0, "request")
    i = kio_compat.schema_module("initialize_share_group_state", 0, "request")

    def init(bs: str) -> Any:
        with RawClient(bs) as raw:
            return _one(raw.request(_req(
                "initialize_share_group_state", "InitializeShareGroupStateRequest",
                "InitializeStateData", tid,
                (i.PartitionData(partition=0, state_epoch=0, start_offset=10),))))

    def write(leader_epoch: int, batches: list[tuple[int, int, int, int]]) -> Any:
        def send(bs: str) -> Any:
            with RawClient(bs) as raw:
                return _one(raw.request(_req(
                    "write_share_group_state", "WriteShareGroupStateRequest",
                    "WriteStateData", tid, (w.PartitionData(
                        partition=0, state_epoch=0, leader_epoch=leader_epoch,
                        start_offset=10, state_batches=tuple(w.StateBatch(
                            first_offset=a, last_offset=b, delivery_state=s,
                            delivery_count=n) for a, b, s, n in batches)),))))
        return _until_answered(c, send)

    def read(leader_epoch: int) -> Any:
        def send(bs: str) -> Any:
            with RawClient(bs) as raw:
                return _one(raw.request(_req(
                    "read_share_group_state", "ReadShareGroupStateRequest", "ReadStateData",
                    tid, (r.PartitionData(partition=0, leader_epoch=leader_epoch),))))
        return _until_answered(c, send)

    assert _until_answered(c, init).error_code == ErrorCode.none
    # the old share-partition leader (epoch 3) acquired 10..19
    assert write(3, [(10, 19, 0, 1)]).error_code == ErrorCode.none
    got = read(4)  # the new leader (epoch 4) loads the state; it writes nothing yet
    assert got.error_code == ErrorCode.none
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in got.state_batches] == [(10, 19, 0, 1)]
    state = _metadata(c[1].bootstrap, SHARE_STATE_TOPIC)[2]
    sp = partition_for(ShareKey("sg", tid, 0), len(state))
    _, coordinator, epoch, replicas, *_ = state[sp]
    assert len(replicas) == 3
    c[coordinator].kill()  # SIGKILL: the share coordinator fails over to another broker
    other = next(b for b in c.brokers if b != coordinator)
    end = time.monotonic() + 40
    while time.monotonic() < end:
        _, leader, new_epoch, *_ = _metadata(c[other].bootstrap, SHARE_STATE_TOPIC)[2][sp]
        if leader not in (-1, coordinator) and new_epoch > epoch:
            break
        time.sleep(0.3)
    else:
        raise AssertionError("no new leader of the share state partition")
    # the deposed leader (epoch 3) resumes and accepts 10: refused by the new coordinator
    assert write(3, [(10, 10, 2, 1)]).error_code == ErrorCode.fenced_leader_epoch
    assert read(3).error_code == ErrorCode.fenced_leader_epoch
    c[coordinator].restart()  # and after the old coordinator is back, still refused
    assert write(3, [(10, 10, 2, 1)]).error_code == ErrorCode.fenced_leader_epoch
    got = read(4)
    assert got.error_code == ErrorCode.none
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
            for b in got.state_batches] == [(10, 19, 0, 1)]
    assert write(4, [(10, 10, 2, 1)]).error_code == ErrorCode.none
