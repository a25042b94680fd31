"""Every transactional API through the wire at every version Yak offers, with the error
answers clients rely on (raw requests: exactly the bytes a client would send)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.broker.rawclient import RawClient
from tests.waiting import wait_until
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch

E = ErrorCode


def req(api: str, version: int, **fields: Any) -> Any:
    mod = kio_compat.schema_module(api, version, "request")
    cls = kio_compat.request_class(kio_compat.api_key_for(api), version)
    return mod, kio_compat.build(cls, **fields)


def sub(api: str, version: int, cls_name: str, **fields: Any) -> Any:
    mod = kio_compat.schema_module(api, version, "request")
    return kio_compat.build(getattr(mod, cls_name), **fields)


def init(c: RawClient, txn_id: str, version: int = 4, timeout_ms: int = 60_000,
         pid: int = -1, epoch: int = -1) -> Any:
    _, r = req("init_producer_id", version, transactional_id=txn_id,
               transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
               producer_id=pid, producer_epoch=epoch)
    def settled() -> Any:  # a dangling transaction being aborted: the client retries
        resp = c.request(r)
        return None if resp.error_code is E.concurrent_transactions else resp

    return wait_until(settled, 20, f"InitProducerId of {txn_id!r} past CONCURRENT_TRANSACTIONS",
                      every=0.1)


def find_txn_coordinator(c: RawClient, txn_id: str, version: int) -> Any:
    if version < 4:
        _, r = req("find_coordinator", version, key=txn_id, key_type=1)
        return c.request(r)
    _, r = req("find_coordinator", version, key_type=1, coordinator_keys=(txn_id,))
    return c.request(r).coordinators[0]


def add_partitions(c: RawClient, version: int, txn_id: str, pid: int, epoch: int,
                   topic: str, parts: list[int]) -> dict[int, ErrorCode]:
    t = sub("add_partitions_to_txn", version, "AddPartitionsToTxnTopic", name=topic,
            partitions=tuple(parts))
    _, r = req("add_partitions_to_txn", version, v3_and_below_transactional_id=txn_id,
               v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
               v3_and_below_topics=(t,))
    resp = c.request(r)
    return {p.partition_index: p.partition_error_code
            for tr in resp.results_by_topic_v3_and_below for p in tr.results_by_partition}


def end_txn(c: RawClient, version: int, txn_id: str, pid: int, epoch: int,
            commit: bool) -> ErrorCode:
    _, r = req("end_txn", version, transactional_id=txn_id, producer_id=pid,
               producer_epoch=epoch, committed=commit)
    return c.request(r).error_code


def txn_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    return build_batch([Record(None, v) for v in values], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, transactional=True)


def lso(c: RawClient, topic: str, partition: int) -> int:
    return c.list_offset(topic, partition, -1, isolation_level=1).offset


def hw(c: RawClient, topic: str, partition: int) -> int:
    return c.list_offset(topic, partition, -1, isolation_level=0).offset


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_a_whole_transaction_at_each_client_version(module_broker, version: int) -> None:
    """InitProducerId, FindCoordinator, AddPartitionsToTxn, Produce, AddOffsetsToTxn,
    TxnOffsetCommit and EndTxn at v0-3 (aiokafka sends v0 only)."""
    topic = f"raw-v{version}"
    txn_id = f"raw-{version}"
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic(topic, 2)
        if version >= 1:
            fc = find_txn_coordinator(c, txn_id, version)
            assert fc.error_code is E.none and fc.port == module_broker.port
        got = init(c, txn_id, version=version)
        assert got.error_code is E.none
        pid, epoch = got.producer_id, got.producer_epoch
        assert add_partitions(c, version, txn_id, pid, epoch, topic, [0, 1]) == {0: E.none,
                                                                              1: E.none}
        for part in (0, 1):
            code, _ = c.produce_one(topic, part, txn_batch(pid, epoch, 0, [b"a", b"b"]),
                                    transactional_id=txn_id)
            assert code is E.none
        assert lso(c, topic, 0) == 0 and hw(c, topic, 0) == 2
        _, r = req("add_offsets_to_txn", version, transactional_id=txn_id, producer_id=pid,
                   producer_epoch=epoch, group_id=f"g{version}")
        assert c.request(r).error_code is E.none
        part = sub("txn_offset_commit", version, "TxnOffsetCommitRequestPartition",
                   partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                   committed_metadata="m")
        t = sub("txn_offset_commit", version, "TxnOffsetCommitRequestTopic", name=topic,
                partitions=(part,))
        _, r = req("txn_offset_commit", version, transactional_id=txn_id, group_id=f"g{version}",
                   producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
                   group_instance_id=None, topics=(t,))
        assert c.request(r).topics[0].partitions[0].error_code is E.none
        # pending: OffsetFetch require_stable says UNSTABLE_OFFSET_COMMIT, plain says -1
        assert offset_fetch(c, f"g{version}", topic, stable=True) == E.unstable_offset_commit
        assert offset_fetch(c, f"g{version}", topic, stable=False) == -1
        assert end_txn(c, version, txn_id, pid, epoch, True) is E.none
        wait_until(lambda: lso(c, topic, 0) == 3, 10, "the markers (LSO 3)")
        assert lso(c, topic, 0) == hw(c, topic, 0) == 3
        wait_until(lambda: offset_fetch(c, f"g{version}", topic, stable=True) == 42, 10,
                   "the committed offset 42, stable")


def offset_fetch(c: RawClient, group: str, topic: str, stable: bool) -> int | ErrorCode:
    t = sub("offset_fetch", 7, "OffsetFetchRequestTopic", name=topic, partition_indexes=(0,))
    _, r = req("offset_fetch", 7, group_id=group, topics=(t,), require_stable=stable)
    p = c.request(r).topics[0].partitions[0]
    return p.committed_offset if p.error_code is E.none else p.error_code


def test_error_answers(module_broker) -> None:
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic("raw-errors", 1)
        # transaction.max.timeout.ms (900000) is enforced
        assert init(c, "err-tx", timeout_ms=900_001).error_code is E.invalid_transaction_timeout
        got = init(c, "err-tx", timeout_ms=5000)
        assert got.error_code is E.none
        pid, epoch = got.producer_id, got.producer_epoch
        # EndTxn without a transaction
        assert end_txn(c, 3, "err-tx", pid, epoch, True) is E.invalid_txn_state
        # an id nobody initialised
        assert end_txn(c, 3, "never", 123, 0, True) is E.invalid_producer_id_mapping
        # KIP-890 part 1: a transactional batch for a partition not in the transaction
        code, _ = c.produce_one("raw-errors", 0, txn_batch(pid, epoch, 0, [b"x"]),
                                transactional_id="err-tx")
        assert code is E.invalid_txn_state
        assert hw(c, "raw-errors", 0) == 0
        # transactional records without a transactional id could never be ended (they would
        # pin the LSO for good): refused, as Kafka does
        code, _ = c.produce_one("raw-errors", 0, txn_batch(pid, epoch, 0, [b"x"]))
        assert code is E.transactional_id_authorization_failed
        assert hw(c, "raw-errors", 0) == 0
        # a re-init bumps the epoch: the old one is fenced with an error answer (never a
        # closed connection), PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before
        again = init(c, "err-tx", timeout_ms=5000)
        assert again.producer_epoch == epoch + 1
        assert add_partitions(c, 3, "err-tx", pid, epoch, "raw-errors", [0]) == {
            0: E.producer_fenced}
        assert add_partitions(c, 1, "err-tx", pid, epoch, "raw-errors", [0]) == {
            0: E.invalid_producer_epoch}
        assert end_txn(c, 2, "err-tx", pid, epoch, False) is E.producer_fenced
        assert end_txn(c, 0, "err-tx", pid, epoch, False) is E.invalid_producer_epoch
        # unknown partitions: UNKNOWN_TOPIC_OR_PARTITION, the rest not attempted
        assert add_partitions(c, 3, "err-tx", pid, epoch + 1, "raw-errors", [0, 7]) == {
            0: E.operation_not_attempted, 7: E.unknown_topic_or_partition}
        assert c.api_versions().error_code is E.none  # still connected


def test_add_partitions_v4_verify_only_and_describe_apis(module_broker) -> None:
    with RawClient(module_broker.bootstrap) as c:
        c.create_topic("raw-v4", 2)
        got = init(c, "v4-tx")
        pid, epoch = got.producer_id, got.producer_epoch
        assert add_partitions(c, 3, "v4-tx", pid, epoch, "raw-v4", [0]) == {0: E.none}

        def txn(verify: bool, parts: list[int]) -> Any:
            t = sub("add_partitions_to_txn", 4, "AddPartitionsToTxnTopic", name="raw-v4",
                    partitions=tuple(parts))
            return sub("add_partitions_to_txn", 4, "AddPartitionsToTxnTransaction",
                       transactional_id="v4-tx", producer_id=pid, producer_epoch=epoch,
                       verify_only=verify, topics=(t,))

        _, r = req("add_partitions_to_txn", 4, transactions=(txn(True, [0, 1]),))
        resp = c.request(r)
        assert resp.error_code is E.none
        codes = {p.partition_index: p.partition_error_code
                 for tr in resp.results_by_transaction[0].topic_results
                 for p in tr.results_by_partition}
        assert codes == {0: E.none, 1: E.transaction_abortable}

        code, _ = c.produce_one("raw-v4", 0, txn_batch(pid, epoch, 0, [b"1", b"2", b"3"]),
                                transactional_id="v4-tx")
        assert code is E.none

        _, r = req("describe_transactions", 0, transactional_ids=("v4-tx",))
        states = c.request(r).transaction_states
        assert states[0].error_code is E.none and states[0].transaction_state == "Ongoing"
        assert states[0].producer_id == pid and states[0].topics[0].topic == "raw-v4"
        assert list(states[0].topics[0].partitions) == [0]
        # an unknown id: start time -1 as Kafka sends it (kio refuses to decode a negative
        # timestamp, so the bytes are read here): correlation id, tags, throttle, count, code
        _, r = req("describe_transactions", 0, transactional_ids=("nope",))
        c.send(r)
        frame = c.recv_frame()
        assert frame[9] == 2  # one entry (compact array length + 1)
        assert int.from_bytes(frame[10:12], "big") == E.transactional_id_not_found
        # ... start time (int64), producer id (int64), epoch (int16), topics, tags, tags
        assert frame[-21:-13] == (-1).to_bytes(8, "big", signed=True)
        assert frame[-13:-5] == (-1).to_bytes(8, "big", signed=True)

        for version in (0, 1, 2):
            _, r = req("list_transactions", version, state_filters=("Ongoing", "Bogus"),
                       producer_id_filters=(), duration_filter=-1,
                       transactional_id_pattern="v4-.*")
            resp = c.request(r)
            assert resp.error_code is E.none
            assert [t.transactional_id for t in resp.transaction_states
                    if t.transactional_id == "v4-tx"] == ["v4-tx"]
            assert list(resp.unknown_state_filters) == ["Bogus"]

        t = sub("describe_producers", 0, "TopicRequest", name="raw-v4", partition_indexes=(0, 1))
        _, r = req("describe_producers", 0, topics=(t,))
        parts = c.request(r).topics[0].partitions
        p0 = parts[0].active_producers
        assert [(x.producer_id, x.producer_epoch, x.current_txn_start_offset) for x in p0] == [
            (pid, epoch, 0)]
        assert parts[1].active_producers == ()

        # WriteTxnMarkers (the admin abort of `yak txn abort` / kafka-transactions.sh)
        assert lso(c, "raw-v4", 0) == 0
        mt = sub("write_txn_markers", 1, "WritableTxnMarkerTopic", name="raw-v4",
                 partition_indexes=(0,))
        m = sub("write_txn_markers", 1, "WritableTxnMarker", producer_id=pid,
                producer_epoch=epoch, transaction_result=False, topics=(mt,),
                coordinator_epoch=0)
        _, r = req("write_txn_markers", 1, markers=(m,))
        res = c.request(r).markers[0].topics[0].partitions[0]
        assert res.error_code is E.none
        assert lso(c, "raw-v4", 0) == hw(c, "raw-v4", 0) == 4
        fetched = c.fetch("raw-v4", 0, 0, isolation_level=1)
        aborted = fetched.responses[0].partitions[0].aborted_transactions
        assert [(a.producer_id, a.first_offset) for a in aborted] == [(pid, 0)]
