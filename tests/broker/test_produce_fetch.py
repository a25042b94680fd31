"""Produce/Fetch/ListOffsets/InitProducerId semantics at the wire, with a raw client."""

from __future__ import annotations

import threading
import time
import uuid

from tests.txn.test_wire_protocol import add_partitions as txn_add_partitions
from tests.txn.test_wire_protocol import init as txn_init
from yak.protocol import records
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

from .rawclient import RawClient


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _idem_batch(pid: int, epoch: int, seq: int, n: int = 5, tag: bytes = b"") -> bytes:
    return build_batch([Record(None, b"%s-%d" % (tag, seq + i)) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def _values(c: RawClient, topic: str, partition: int = 0) -> list[bytes]:
    part = c.fetch(topic, partition, 0).responses[0].partitions[0]
    out: list[bytes] = []
    data = bytes(part.records or b"")
    for pos, h in records.iter_batches(data):
        out += [r.value for r in records.decode_records(data[pos : pos + h.size])]
    return out


def test_idempotent_replay_gap_and_fencing(module_broker) -> None:
    topic = _topic("idem")
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic)
        r = c.init_producer_id()
        assert r.error_code == ErrorCode.none and r.producer_epoch == 0
        pid = r.producer_id

        assert c.produce_one(topic, 0, _idem_batch(pid, 0, 0)) == (ErrorCode.none, 0)
        assert c.produce_one(topic, 0, _idem_batch(pid, 0, 5)) == (ErrorCode.none, 5)
        # Replay of an acknowledged batch: the original offset, nothing appended.
        assert c.produce_one(topic, 0, _idem_batch(pid, 0, 0)) == (ErrorCode.none, 0)
        assert c.produce_one(topic, 0, _idem_batch(pid, 0, 5)) == (ErrorCode.none, 5)
        assert c.list_offset(topic, 0, -1).offset == 10
        # A gap in the sequence.
        code, _ = c.produce_one(topic, 0, _idem_batch(pid, 0, 20))
        assert code == ErrorCode.out_of_order_sequence_number
        assert c.list_offset(topic, 0, -1).offset == 10

        # KIP-360: same id, epoch + 1.
        bumped = c.init_producer_id(pid, 0)
        assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (
            ErrorCode.none, pid, 1)
        assert c.produce_one(topic, 0, _idem_batch(pid, 1, 0, tag=b"e1")) == (
            ErrorCode.none, 10)
        # The old epoch is fenced.
        code, _ = c.produce_one(topic, 0, _idem_batch(pid, 0, 10))
        assert code == ErrorCode.invalid_producer_epoch
        stale = c.init_producer_id(pid, 0)
        assert stale.error_code == ErrorCode.invalid_producer_epoch
        assert len(_values(c, topic)) == 15


def test_producer_ids_are_unique_across_restart(broker) -> None:
    with RawClient(broker.bootstrap) as c:
        first = {c.init_producer_id().producer_id for _ in range(3)}
    broker.restart()
    with RawClient(broker.bootstrap) as c:
        later = {c.init_producer_id().producer_id for _ in range(3)}
    assert len(first) == 3 and len(later) == 3 and not first & later


def test_acks_zero_gets_no_response_but_appends(module_broker) -> None:
    topic = _topic("acks0")
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic)
        c.produce(topic, {0: build_batch([Record(None, b"fire")])}, acks=0)
        # The next request's response is the first thing on the wire.
        assert c.list_offset(topic, 0, -1).offset == 1


def test_unknown_partition_and_topic(module_broker) -> None:
    topic = _topic("unk")
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic, partitions=1)
        resp = c.produce(topic, {0: build_batch([Record(None, b"a")]),
                                 5: build_batch([Record(None, b"b")])})
        codes = {p.index: p.error_code for p in resp.responses[0].partition_responses}
        assert codes == {0: ErrorCode.none, 5: ErrorCode.unknown_topic_or_partition}
        code, _ = c.produce_one("no-such-topic-" + topic, 0, build_batch([Record(None, b"x")]))
        assert code == ErrorCode.unknown_topic_or_partition


def test_fetch_long_polls_until_an_append(module_broker) -> None:
    topic = _topic("poll")
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic)
    result: dict[str, object] = {}

    def consumer() -> None:
        with RawClient(module_broker.bootstrap) as c:
            t0 = time.monotonic()
            sending.set()
            resp = c.fetch(topic, 0, 0, max_wait_ms=10_000, min_bytes=1)
            result["elapsed"] = time.monotonic() - t0
            result["part"] = resp.responses[0].partitions[0]

    sending = threading.Event()
    t = threading.Thread(target=consumer)
    t.start()
    assert sending.wait(10), "the consumer thread never got to its fetch"
    time.sleep(0.7)  # the point: an append 0.7 s into the poll shows that it waited
    with RawClient(module_broker.bootstrap) as c:
        assert c.produce_one(topic, 0, build_batch([Record(None, b"wake")]))[0] == ErrorCode.none
    t.join(15)
    assert 0.5 < result["elapsed"] < 5  # woken by the append, not by max_wait
    part = result["part"]
    assert part.high_watermark == 1
    assert records.decode_records(part.records)[0].value == b"wake"


def test_fetch_waits_max_wait_when_nothing_arrives(module_broker) -> None:
    topic = _topic("idle")
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic)
        t0 = time.monotonic()
        resp = c.fetch(topic, 0, 0, max_wait_ms=600, min_bytes=1)
        elapsed = time.monotonic() - t0
    assert 0.5 < elapsed < 3
    assert resp.responses[0].partitions[0].records in (b"", None)


def test_fetch_limits_and_out_of_range(module_broker) -> None:
    topic = _topic("limits")
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic)
        for i in range(10):
            c.produce_one(topic, 0, build_batch([Record(None, b"%d" % i + b"x" * 1000)]))
        part = c.fetch(topic, 0, 0, partition_max_bytes=3000).responses[0].partitions[0]
        n = len(list(records.iter_batches(bytes(part.records))))
        assert 1 <= n <= 3
        # min one message: a batch larger than the limit still comes back whole.
        part = c.fetch(topic, 0, 4, partition_max_bytes=10).responses[0].partitions[0]
        got = list(records.iter_batches(bytes(part.records)))
        assert len(got) == 1 and got[0][1].base_offset == 4
        part = c.fetch(topic, 0, 11).responses[0].partitions[0]
        assert part.error_code == ErrorCode.offset_out_of_range
        # Every version clients use decodes.
        for v in (4, 7, 11, 12):
            part = c.fetch(topic, 0, 9, version=v).responses[0].partitions[0]
            assert part.error_code == ErrorCode.none and part.high_watermark == 10


def test_list_offsets_special_and_by_timestamp(module_broker) -> None:
    topic = _topic("lo")
    with RawClient(module_broker.bootstrap) as c:
        # Timestamps of 1970 are past any retention.ms: a retention pass between the
        # produces and the lookups rolls and deletes them (Kafka's rule for an expired
        # active segment), which made this fail once under load. Keep them.
        c.create_topic(topic, retention_ms="-1")
        for i, ts in enumerate([1000, 2000, 5000, 3000]):
            c.produce_one(topic, 0, build_batch([Record(None, b"%d" % i, timestamp=ts)]))
        assert c.list_offset(topic, 0, -2).offset == 0
        assert c.list_offset(topic, 0, -1).offset == 4
        p = c.list_offset(topic, 0, 1500)
        assert (p.offset, p.timestamp) == (1, 2000)
        p = c.list_offset(topic, 0, -3)
        assert (p.offset, p.timestamp) == (2, 5000)
        p = c.list_offset(topic, 0, 9999)
        assert p.offset == -1
        for v in (1, 4, 7, 10):
            assert c.list_offset(topic, 0, -1, version=v).offset == 4


def test_read_committed_stops_at_last_stable_offset(module_broker) -> None:
    topic = _topic("lso")
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic)
        # a real transaction (KIP-890: the partition must be in it before its first batch)
        got = txn_init(c, "t1")
        pid, epoch = got.producer_id, got.producer_epoch
        assert txn_add_partitions(c, 3, "t1", pid, epoch, topic, [0]) == {0: ErrorCode.none}
        assert c.produce_one(topic, 0, build_batch([Record(None, b"plain")]))[1] == 0
        open_txn = build_batch([Record(None, b"in-txn")], producer_id=pid, producer_epoch=epoch,
                               base_sequence=0, transactional=True)
        assert c.produce_one(topic, 0, open_txn, transactional_id="t1")[1] == 1
        assert c.produce_one(topic, 0, build_batch([Record(None, b"after")]))[1] == 2

        committed = c.fetch(topic, 0, 0, isolation_level=1).responses[0].partitions[0]
        assert committed.high_watermark == 3 and committed.last_stable_offset == 1
        assert [r.value for r in records.decode_records(committed.records)] == [b"plain"]
        assert committed.aborted_transactions == ()
        uncommitted = c.fetch(topic, 0, 0).responses[0].partitions[0]
        assert len(list(records.iter_batches(bytes(uncommitted.records)))) == 3
        assert c.list_offset(topic, 0, -1, isolation_level=1).offset == 1
        assert c.list_offset(topic, 0, -1, isolation_level=0).offset == 3


def test_clients_cannot_write_internal_topics(module_broker) -> None:
    with RawClient(module_broker.bootstrap) as c:
        for topic in ("__consumer_offsets", "__transaction_state"):
            code, _ = c.produce_one(topic, 0, build_batch([Record(b"k", b"v")]))
            assert code == ErrorCode.invalid_topic_exception
