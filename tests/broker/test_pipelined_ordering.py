"""Issue 21 over the wire: a connection's pipelined requests take effect in arrival order.

A real broker (in-process, on a thread of its own, so the test can inject awaits into it)
and raw Kafka requests on one socket. The property: a random pipeline of Produce
(transactional, which waits on KIP-890 verification, and idempotent), Fetch and barrier
requests (ListOffsets, OffsetCommit, OffsetFetch), sent all at once with random delays injected into the verification, gives the
same responses and the same logs as the same requests sent one at a time (Kafka's
one-request-at-a-time handling of a connection).
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.broker.rawclient import RawClient
from yak.broker.server import RunningBroker, start_broker
from yak.config import BrokerConfig
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

# The records' time: now, not a fixed date, or time retention (7 days) could delete the
# segment between the produce and the reads that check it.
TS = int(time.time() * 1000)
PRODUCE = kio_compat.schema_module("produce", 9, "request")
FETCH = kio_compat.schema_module("fetch", 12, "request")
LIST_OFFSETS = kio_compat.schema_module("list_offsets", 7, "request")
OFFSET_COMMIT = kio_compat.schema_module("offset_commit", 8, "request")
OFFSET_FETCH = kio_compat.schema_module("offset_fetch", 7, "request")


class ThreadBroker:
    """A broker on its own event loop thread; `delays` are awaited, one per call, by the
    partition layer's KIP-890 verifier before it asks the coordinator."""

    def __init__(self, data_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        cfg = BrokerConfig.load(data_dir=str(data_dir), listen="127.0.0.1:0")
        self.running: RunningBroker = self._call(start_broker(cfg))
        self.bootstrap = f"127.0.0.1:{self.running.broker.port}"
        self.delays: list[float] = []
        self.verifications = 0
        rm = self.running.broker.replica_manager
        inner = rm.txn_verifier
        assert inner is not None

        async def delayed(txn_id: str, pid: int, epoch: int,
                          tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
            self.verifications += 1
            if self.delays:
                await asyncio.sleep(self.delays.pop(0))  # the point: a slow verification
            return await inner(txn_id, pid, epoch, tps)

        rm.txn_verifier = delayed

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def stop(self) -> None:
        self._call(self.running.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadBroker]:
    b = ThreadBroker(tmp_path_factory.mktemp("ordering") / "data")
    yield b
    b.stop()


# ---------------------------------------------------------------- requests


def _init_producer(client: RawClient, txn_id: str | None) -> tuple[int, int]:
    mod = kio_compat.schema_module("init_producer_id", 4, "request")
    req = kio_compat.build(mod.InitProducerIdRequest, transactional_id=txn_id,
                           transaction_timeout=datetime.timedelta(seconds=60),
                           producer_id=-1, producer_epoch=-1)
    for _ in range(100):
        resp = client.request(req)
        if resp.error_code == ErrorCode.none:
            return int(resp.producer_id), int(resp.producer_epoch)
        assert resp.error_code in (ErrorCode.coordinator_not_available,
                                   ErrorCode.not_coordinator,
                                   ErrorCode.coordinator_load_in_progress), resp.error_code
        threading.Event().wait(0.1)
    raise AssertionError("InitProducerId never succeeded")


def _add_partitions(client: RawClient, txn_id: str, pid: int, epoch: int,
                    topics: Sequence[str]) -> None:
    mod = kio_compat.schema_module("add_partitions_to_txn", 3, "request")
    req = kio_compat.build(mod.AddPartitionsToTxnRequest, v3_and_below_transactional_id=txn_id,
                           v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                           v3_and_below_topics=tuple(
                               kio_compat.build(mod.AddPartitionsToTxnTopic, name=t,
                                                partitions=(0, 1)) for t in topics),
                           transactions=())
    for _ in range(100):
        resp = client.request(req)
        codes = {int(p.partition_error_code) for t in resp.results_by_topic_v3_and_below
                 for p in t.results_by_partition}
        if codes == {0}:
            return
        assert codes <= {int(ErrorCode.concurrent_transactions),
                         int(ErrorCode.coordinator_load_in_progress)}, codes
        threading.Event().wait(0.1)
    raise AssertionError("AddPartitionsToTxn never succeeded")


def _produce(topic: str, partition: int, batch: bytes, acks: int,
             txn_id: str | None) -> Any:
    return PRODUCE.ProduceRequest(
        transactional_id=txn_id, acks=acks, timeout=datetime.timedelta(seconds=10),
        topic_data=(PRODUCE.TopicProduceData(name=topic, partition_data=(
            PRODUCE.PartitionProduceData(index=partition, records=batch),)),))


def _fetch(topic: str, partition: int) -> Any:
    part = kio_compat.build(FETCH.FetchPartition, partition=partition, fetch_offset=0,
                            partition_max_bytes=1 << 20, current_leader_epoch=-1,
                            log_start_offset=-1, last_fetched_epoch=-1)
    return kio_compat.build(
        FETCH.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(kio_compat.build(FETCH.FetchTopic, topic=topic, partitions=(part,)),),
        forgotten_topics_data=(), rack_id="")


def _list_latest(topic: str, partition: int) -> Any:
    return kio_compat.build(
        LIST_OFFSETS.ListOffsetsRequest, replica_id=-1, isolation_level=0,
        topics=(LIST_OFFSETS.ListOffsetsTopic(name=topic, partitions=(kio_compat.build(
            LIST_OFFSETS.ListOffsetsPartition, partition_index=partition,
            current_leader_epoch=-1, timestamp=-1),)),),
        timeout=datetime.timedelta(seconds=5))


def _commit(group: str, topic: str, partition: int, offset: int) -> Any:
    """A simple consumer's OffsetCommit (no generation): group state, a barrier."""
    return kio_compat.build(
        OFFSET_COMMIT.OffsetCommitRequest, group_id=group, generation_id_or_member_epoch=-1,
        member_id="", group_instance_id=None, topics=(kio_compat.build(
            OFFSET_COMMIT.OffsetCommitRequestTopic, name=topic, partitions=(kio_compat.build(
                OFFSET_COMMIT.OffsetCommitRequestPartition, partition_index=partition,
                committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata=""),)),))


def _committed(group: str, topic: str, partition: int) -> Any:
    return kio_compat.build(
        OFFSET_FETCH.OffsetFetchRequest, group_id=group, require_stable=False,
        topics=(kio_compat.build(OFFSET_FETCH.OffsetFetchRequestTopic, name=topic,
                                 partition_indexes=(partition,)),))


def _summary(req: Any, resp: Any) -> tuple[Any, ...]:
    """What a request's answer says about the broker's state, topic names left out."""
    key = int(req.__api_key__)
    if key == 0:
        p = resp.responses[0].partition_responses[0]
        return ("produce", int(p.error_code), int(p.base_offset))
    if key == 1:
        p = resp.responses[0].partitions[0]
        return ("fetch", int(p.error_code), int(p.high_watermark), bytes(p.records or b""))
    if key == 8:
        return ("commit", int(resp.topics[0].partitions[0].error_code))
    if key == 9:
        p = resp.topics[0].partitions[0]
        return ("committed", int(resp.error_code), int(p.error_code), int(p.committed_offset))
    p = resp.topics[0].partitions[0]
    return ("offsets", int(p.error_code), int(p.offset))


def _pipelined(client: RawClient, requests: Sequence[Any]) -> list[tuple[Any, ...]]:
    frames = []
    for r in requests:
        client._cid += 1
        frames.append(kio_compat.encode_request(r, client._cid))
    first = client._cid - len(requests) + 1
    client.send_bytes(b"".join(frames))  # one write: the broker sees them all at once
    out = []
    for i, r in enumerate(requests):
        frame = client.recv_frame()
        assert struct.unpack_from(">i", frame, 0)[0] == first + i  # answered in order
        _, resp = kio_compat.decode_response(int(r.__api_key__), int(r.__version__), frame)
        out.append(_summary(r, resp))
    return out


def _one_at_a_time(client: RawClient, requests: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [_summary(r, client.request(r)) for r in requests]


# ---------------------------------------------------------------- the property

OPS = st.one_of(
    st.tuples(st.sampled_from(["txn", "idem-a", "idem-b"]), st.integers(0, 1),
              st.sampled_from([1, -1])),
    st.tuples(st.just("fetch"), st.integers(0, 1), st.just(0)),
    st.tuples(st.just("offsets"), st.integers(0, 1), st.just(0)),
    st.tuples(st.just("commit"), st.integers(0, 1), st.integers(0, 100)),
    st.tuples(st.just("committed"), st.integers(0, 1), st.just(0)),
)
_runs = itertools.count()


def _requests(ops: Sequence[tuple[str, int, int]], topic: str, txn_id: str,
              producers: dict[str, tuple[int, int]]) -> list[Any]:
    seqs: dict[tuple[str, int], int] = {}
    out = []
    group = f"g-{topic}"
    for kind, partition, acks in ops:
        if kind == "commit":
            out.append(_commit(group, topic, partition, acks))
        elif kind == "committed":
            out.append(_committed(group, topic, partition))
        elif kind == "fetch":
            out.append(_fetch(topic, partition))
        elif kind == "offsets":
            out.append(_list_latest(topic, partition))
        else:
            pid, epoch = producers[kind]
            seq = seqs.get((kind, partition), 0)
            seqs[(kind, partition)] = seq + 1
            batch = build_batch([Record(None, f"{kind}-{partition}-{seq}".encode(), TS)],
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                transactional=kind == "txn")
            out.append(_produce(topic, partition, batch, acks if kind != "txn" else -1,
                                txn_id if kind == "txn" else None))
    # The logs at the end, whole.
    out.extend(_fetch(topic, p) for p in (0, 1))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(OPS, min_size=2, max_size=14),
       delays=st.lists(st.sampled_from([0.0, 0.005, 0.02, 0.05]), min_size=1, max_size=4))
def test_a_pipeline_has_the_effects_of_one_request_at_a_time(
        broker: ThreadBroker, ops: list[tuple[str, int, int]], delays: list[float]) -> None:
    n = next(_runs)
    piped, alone, txn_id = f"piped-{n}", f"alone-{n}", f"tx-{n}"
    with RawClient(broker.bootstrap) as client:
        for t in (piped, alone):
            client.create_topic(t, 2)
        producers = {"txn": _init_producer(client, txn_id),
                     "idem-a": _init_producer(client, None),
                     "idem-b": _init_producer(client, None)}
        _add_partitions(client, txn_id, *producers["txn"], [piped, alone])
        broker.delays = list(delays)
        got = _pipelined(client, _requests(ops, piped, txn_id, producers))
        broker.delays = []
        want = _one_at_a_time(client, _requests(ops, alone, txn_id, producers))
    assert got == want
    # Every produce and commit succeeded: the producers' sequences held.
    assert all(s[1] == 0 for s in got if s[0] in ("produce", "commit")), got


def test_a_second_batch_waits_for_the_first_ones_delayed_verification(
        broker: ThreadBroker) -> None:
    """The failing scenario of the issue, made deterministic: the verification of a
    transaction's first batch takes 50 ms; the producer's next five batches, pipelined
    behind it, wait for it (no OUT_OF_ORDER_SEQUENCE_NUMBER) and land in order."""
    n = next(_runs)
    topic, txn_id = f"delayed-{n}", f"tx-delayed-{n}"
    with RawClient(broker.bootstrap) as client:
        client.create_topic(topic, 2)
        pid, epoch = _init_producer(client, txn_id)
        _add_partitions(client, txn_id, pid, epoch, [topic])
        before = broker.verifications
        broker.delays = [0.05]
        requests = [_produce(topic, 0, build_batch(
            [Record(None, b"v%d" % seq, TS)], producer_id=pid, producer_epoch=epoch,
            base_sequence=seq, transactional=True), -1, txn_id) for seq in range(6)]
        got = _pipelined(client, [*requests, _fetch(topic, 0)])
    assert [s[1:] for s in got[:6]] == [(0, i) for i in range(6)]
    assert got[6][2] == 6  # the high watermark
    assert broker.verifications - before == 1  # one question for the six requests
