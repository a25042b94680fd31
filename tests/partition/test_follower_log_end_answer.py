"""The leader answers a follower's fetch at its log end without a read (issue 28): a
caught-up follower does that on every other fetch, and the read would find nothing. The
answer must be the general read's (`_read_followed`, which `fetch_messages` used for every
partition) for the same state; a partition the replication throttle applies to (its
bytes are counted) and a tiered one (its log start is the remote log's) take the read.

On real logs: the leader a ReplicaManager of tests/partition/test_replication.py's
cluster, the followers' fetches made by hand. The throttle is the cluster layer's
`ReplicationThrottle`; the remote log a stand-in answering the one question the read asks
of it (the remote log start), as the composition plugs a RemoteLogManager in."""

from __future__ import annotations

from typing import Any

from tests.partition.test_follower_fetch_wakeups import count_reads, throttle_all_replicas
from tests.partition.test_replication import (  # noqa: F401 (the fixture)
    T,
    cluster,
    produce,
    run,
    start,
)
from yak.errors import ErrorCode
from yak.partition import FetchIsolation, FetchParams, FetchPartition, ReplicaManager
from yak.storage import LogConfig


def _want(offset: int, leader_epoch: int = 0) -> FetchPartition:
    return FetchPartition(T, 0, offset, 1 << 20, leader_epoch, 0, 0)


def _params(replica: int) -> FetchParams:
    return FetchParams(0, 1, 10 << 20, FetchIsolation.LOG_END, replica_id=replica,
                       replica_epoch=100 + replica)


def _answer(r: Any) -> tuple[Any, ...]:
    return (r.error, r.high_watermark, r.last_stable_offset, r.log_start_offset, r.size,
            b"".join(bytes(b) for b in r.buffers), r.aborted_transactions,
            r.diverging_epoch, r.current_leader, r.preferred_read_replica)


async def _both(rm: ReplicaManager, replica: int, want: FetchPartition
                ) -> tuple[tuple[Any, ...], tuple[Any, ...], int]:
    """(the fetch's answer, the general read's answer right after, reads by the fetch)."""
    p = rm.get_partition(T, 0)
    reads = count_reads(rm)
    (fast,) = await rm.fetch_messages(_params(replica), [want])
    n = len(reads)
    (general,), _, _ = rm._read_followed(_params(replica), [want], [p])
    return _answer(fast), _answer(general), n


def test_at_the_log_end_the_answer_is_the_reads(cluster) -> None:  # noqa: ANN001, F811
    ctl, rms = cluster
    start(ctl, rms)
    leader = rms[1]

    async def body() -> None:
        for _ in range(3):
            assert (await produce(leader, 1)).error == 0
        fast, general, reads = await _both(leader, 2, _want(3))
        assert reads == 0  # answered without a read
        assert fast == general and fast[:5] == (0, 0, 0, 0, 0)
        # Follower 3 at the log end too: the high watermark moves; both see it.
        fast, general, reads = await _both(leader, 3, _want(3))
        assert reads == 0 and fast == general and fast[1] == 3
        # Below the log end: the read, with the records.
        fast, general, reads = await _both(leader, 2, _want(1))
        assert reads == 1 and fast == general and fast[4] > 0
        # After DeleteRecords: the new log start in the answer.
        assert leader.delete_records(T, 0, 2) == 2
        fast, general, reads = await _both(leader, 2, _want(3))
        assert reads == 0 and fast == general and fast[3] == 2
        # Errors are answered before: an epoch newer than the leader's, at the log end.
        (r,) = await leader.fetch_messages(_params(2), [_want(3, leader_epoch=5)])
        assert r.error == ErrorCode.unknown_leader_epoch and r.current_leader == (1, 0)

    run(body())


def test_a_throttled_follower_at_the_log_end_takes_the_read(cluster) -> None:  # noqa: ANN001, F811
    ctl, rms = cluster
    start(ctl, rms, isr=(1, 2))  # 3 is out of the ISR: the throttle applies to it
    leader = rms[1]
    throttle, _ = throttle_all_replicas(leader)

    async def body() -> None:
        assert (await produce(leader, 1)).error == 0
        # In the ISR: the throttle does not apply; answered without a read.
        fast, general, reads = await _both(leader, 2, _want(1))
        assert reads == 0 and fast == general
        # Out of it: the read (which consults and counts the quota), same answer.
        fast, general, reads = await _both(leader, 3, _want(1))
        assert reads == 1 and fast == general
        throttle.quota.record(10_000)  # spent
        fast, general, reads = await _both(leader, 3, _want(1))
        assert fast == general

    run(body())


class RemoteLogStart:
    """What the leader's read asks a RemoteLogManager of a tiered partition: the whole
    log's start (the remote one), once the leadership has read its metadata."""

    def __init__(self, start: int) -> None:
        self.start = start

    def log_start_offset(self, topic: str, partition: int,
                         leader_epoch: int | None = None) -> int | None:
        return self.start


def test_a_tiered_partition_at_the_log_end_takes_the_read(cluster) -> None:  # noqa: ANN001, F811
    ctl, rms = cluster
    ctl.config = LogConfig.from_props({"min.insync.replicas": "2",
                                       "remote.storage.enable": "true"})
    start(ctl, rms)
    leader = rms[1]

    async def body() -> None:
        for _ in range(3):
            assert (await produce(leader, 1)).error == 0
        for replica in (2, 3):  # the high watermark to 3
            await leader.fetch_messages(_params(replica), [_want(3)])
        assert leader.delete_records(T, 0, 2) == 2  # local start 2; the remote log's 0
        leader.remote_log = RemoteLogStart(0)  # type: ignore[assignment]
        fast, general, reads = await _both(leader, 2, _want(3))
        assert reads == 1  # fails if the tiered partition is answered without the read
        assert fast == general and fast[3] == 0  # the remote log start, not the local 2

    run(body())


def test_the_epoch_check_answers_as_the_epoch_cache(cluster) -> None:  # noqa: ANN001, F811
    """The follower's last fetched epoch against the leader's epochs (0 and 2 here): the
    usual case (its epoch our latest or newer) is answered without asking the epoch cache;
    every answer must be what `end_offset_for_epoch` gives (Kafka's diverging epoch, or
    OFFSET_OUT_OF_RANGE where no epoch of ours is that old)."""
    ctl, rms = cluster
    start(ctl, rms)
    leader = rms[1]

    async def body() -> None:
        for _ in range(2):
            assert (await produce(leader, 1)).error == 0
        start(ctl, rms, epoch=2)
        for _ in range(2):
            assert (await produce(leader, 1)).error == 0
        p = leader.get_partition(T, 0)
        assert p.latest_epoch == 2 and p.log_end_offset == 4
        cases = 0
        for last in (-1, 0, 1, 2, 3, 7):
            for offset in range(5):
                want = FetchPartition(T, 0, offset, 1 << 20, 2, last, 0)
                (r,) = await leader.fetch_messages(_params(2), [want])
                diverging = None
                error = 0
                if last >= 0:
                    end_epoch, end_offset = p.end_offset_for_epoch(last)
                    if end_epoch < 0 or end_offset < 0:
                        error = ErrorCode.offset_out_of_range
                    elif end_epoch < last or end_offset < offset:
                        diverging = (end_epoch, end_offset)
                assert (r.error, r.diverging_epoch) == (error, diverging), (last, offset)
                cases += diverging is not None
        assert cases > 0

    run(body())
