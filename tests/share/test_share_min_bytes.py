"""ShareFetch's `min_bytes` (Kafka's DelayedShareFetch) against a real broker process, with
raw kio requests: with fewer bytes to acquire than `min_bytes` the fetch waits, holding
nothing, and at `max_wait` acquires what there is; bytes produced during the wait answer
it early; `min_bytes=1` answers as soon as anything can be acquired; acknowledgements
piggy-backed on a waiting fetch are durable before it waits."""

from __future__ import annotations

import concurrent.futures
import datetime
import time
import uuid
from typing import Any

from tests.broker.rawclient import RawClient
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

ACCEPT = 1


def _join(c: RawClient, group: str, member: str, topic: str) -> uuid.UUID:
    mod = kio_compat.schema_module("share_group_heartbeat", 1, "request")
    r = c.request(mod.ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=(topic,)))
    assert r.error_code == ErrorCode.none, r
    return r.assignment.topic_partitions[0].topic_id


def _fetch(c: RawClient, group: str, member: str, epoch: int, tid: uuid.UUID, *,
           min_bytes: int = 1, max_wait_ms: int = 0,
           acks: list[tuple[int, int, int]] = ()) -> Any:
    mod = kio_compat.schema_module("share_fetch", 1, "request")
    batches = tuple(mod.AcknowledgementBatch(first_offset=f, last_offset=last,
                                             acknowledge_types=(t,)) for f, last, t in acks)
    topic = mod.FetchTopic(topic_id=tid, partitions=(mod.FetchPartition(
        partition_index=0, acknowledgement_batches=batches),))
    r = c.request(mod.ShareFetchRequest(
        group_id=group, member_id=member, share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
        max_bytes=1 << 20, max_records=1000, batch_size=1000, topics=(topic,),
        forgotten_topics_data=()))
    assert r.error_code == ErrorCode.none, r
    return r


def _acquired(resp: Any) -> list[tuple[int, int]]:
    return [(a.first_offset, a.last_offset)
            for t in resp.responses for p in t.partitions for a in p.acquired_records]


def _produce(c: RawClient, topic: str, n: int, size: int) -> None:
    records = [Record(key=None, value=bytes(size)) for _ in range(n)]
    assert c.produce_one(topic, 0, build_batch(records))[0] == ErrorCode.none


def _open(c: RawClient, group: str, member: str, topic: str) -> uuid.UUID:
    """Join and open the share session (the share partition starts at the log end)."""
    tid = _join(c, group, member, topic)
    assert _acquired(_fetch(c, group, member, 0, tid)) == []
    return tid


def _timed_fetch(bootstrap: str, group: str, member: str, epoch: int, tid: uuid.UUID,
                 **kw: Any) -> tuple[float, Any]:
    """A fetch on its own connection (the caller's connection stays free meanwhile)."""
    with RawClient(bootstrap, timeout=30) as c:
        t0 = time.monotonic()
        r = _fetch(c, group, member, epoch, tid, **kw)
        return time.monotonic() - t0, r


def test_min_bytes_not_reached_waits_max_wait_then_returns_what_there_is(broker) -> None:
    with RawClient(broker.bootstrap) as c:
        c.create_topic("mb1", 1)
        tid = _open(c, "g1", "m1", "mb1")
        _produce(c, "mb1", 1, 10)  # one small record: far below min_bytes
        elapsed, r = _timed_fetch(broker.bootstrap, "g1", "m1", 1, tid,
                                  min_bytes=10_000, max_wait_ms=2000)
        assert _acquired(r) == [(0, 0)]
        assert 1.8 <= elapsed < 6, elapsed


def test_min_bytes_wait_holds_no_record(broker) -> None:
    """While one member's fetch waits for min_bytes, another member acquires the record
    the first could have taken: waiting locks nothing (Kafka checks before acquiring)."""
    with RawClient(broker.bootstrap) as c, RawClient(broker.bootstrap) as c2:
        c.create_topic("mb2", 1)
        tid = _open(c, "g2", "m1", "mb2")
        _open(c2, "g2", "m2", "mb2")
        _produce(c, "mb2", 1, 10)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(_timed_fetch, broker.bootstrap, "g2", "m1", 1, tid,
                                  min_bytes=10_000, max_wait_ms=3000)
            time.sleep(0.5)
            assert not waiting.done()
            assert _acquired(_fetch(c2, "g2", "m2", 1, tid)) == [(0, 0)]
            elapsed, r = waiting.result(timeout=30)
        assert _acquired(r) == []  # m2 holds it
        assert elapsed >= 2.7, elapsed


def test_min_bytes_reached_during_the_wait_answers_early(broker) -> None:
    with RawClient(broker.bootstrap) as c:
        c.create_topic("mb3", 1)
        tid = _open(c, "g3", "m1", "mb3")
        _produce(c, "mb3", 1, 10)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(_timed_fetch, broker.bootstrap, "g3", "m1", 1, tid,
                                  min_bytes=10_000, max_wait_ms=8000)
            time.sleep(0.5)
            assert not waiting.done()  # 1 small record: still waiting
            _produce(c, "mb3", 20, 1000)  # ~20 KB: min_bytes reached
            elapsed, r = waiting.result(timeout=30)
        assert _acquired(r) == [(0, 20)]
        assert 0.5 <= elapsed < 5, elapsed


def test_min_bytes_one_answers_at_once(broker) -> None:
    with RawClient(broker.bootstrap) as c:
        c.create_topic("mb4", 1)
        tid = _open(c, "g4", "m1", "mb4")
        _produce(c, "mb4", 1, 10)
        elapsed, r = _timed_fetch(broker.bootstrap, "g4", "m1", 1, tid,
                                  min_bytes=1, max_wait_ms=8000)
        assert _acquired(r) == [(0, 0)]
        assert elapsed < 4, elapsed


def test_acks_of_a_waiting_fetch_are_durable_before_it_waits(broker) -> None:
    """A fetch whose piggy-backed acknowledgement is followed by a min_bytes wait: the
    share coordinator has the acknowledgement (the start offset moved) while it waits."""
    with RawClient(broker.bootstrap) as c, RawClient(broker.bootstrap) as admin:
        c.create_topic("mb5", 1)
        tid = _open(c, "g5", "m1", "mb5")
        _produce(c, "mb5", 1, 10)
        assert _acquired(_fetch(c, "g5", "m1", 1, tid)) == [(0, 0)]
        mod = kio_compat.schema_module("describe_share_group_offsets", 1, "request")

        def start() -> int:
            (g,) = admin.request(mod.DescribeShareGroupOffsetsRequest(groups=(
                mod.DescribeShareGroupOffsetsRequestGroup(group_id="g5", topics=(
                    mod.DescribeShareGroupOffsetsRequestTopic(topic_name="mb5",
                                                              partitions=(0,)),)),))).groups
            (p,) = g.topics[0].partitions
            return p.start_offset

        assert start() == 0
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(_timed_fetch, broker.bootstrap, "g5", "m1", 2, tid,
                                  min_bytes=10_000, max_wait_ms=3000,
                                  acks=[(0, 0, ACCEPT)])
            deadline = time.monotonic() + 2
            while start() != 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert start() == 1
            assert not waiting.done()
            elapsed, r = waiting.result(timeout=30)
        (p,) = r.responses[0].partitions
        assert p.acknowledge_error_code == ErrorCode.none and _acquired(r) == []
        assert elapsed >= 2.7, elapsed
