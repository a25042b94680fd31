"""Pipelined Produce requests keep Kafka's ordering in a cluster (issue 21).

Kafka handles one request of a connection at a time, so a batch can never overtake an
earlier one of the same producer. Yak works on a connection's Produce requests
concurrently; when the first transactional batch of a transaction waits on KIP-890
verification with a transaction coordinator on another broker, a later batch of the same
producer must still not reach the log first (librdkafka answers that with a fatal
OUT_OF_ORDER_SEQUENCE_NUMBER and the commit fails).

Real broker processes on a real etcd, real confluent-kafka clients. One 3-broker cluster
is shared by the module; every case uses topics and transactional ids of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import FAST_SESSION, YakCluster
from tests.cluster.test_cluster_metadata import _metadata
from yak.cluster.layout import ClusterKeys
from yak.devcluster.local import LocalEtcd
from yak.protocol import kio_compat

T = 30
TRANSACTIONS = 12
PER_TRANSACTION = 6
IDEMPOTENT = 200


@pytest.fixture(scope="module")
def cluster(etcd: LocalEtcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[YakCluster]:
    """Three brokers (node ids 1..3) on the session's etcd, shared by this module."""
    c = YakCluster(etcd, ClusterKeys("test_cluster_ordering"),
                   tmp_path_factory.mktemp("ordering"), dict(FAST_SESSION))
    try:
        for i in (1, 2, 3):
            c.add(i)
        c.wait_registered()
        yield c
    finally:
        c.stop()


def _txn_coordinator(bootstrap: str, txn_id: str, timeout: float = T) -> int:
    """The node FindCoordinator (v3, key type TRANSACTION) names for `txn_id`, waiting
    while `__transaction_state` is being created."""
    mod = kio_compat.schema_module("find_coordinator", 3, "request")
    deadline = time.monotonic() + timeout
    while True:
        with RawClient(bootstrap) as raw:
            r = raw.request(kio_compat.build(mod.FindCoordinatorRequest, key=txn_id,
                                             key_type=1))
        if int(r.error_code) == 0:
            return int(r.node_id)
        assert time.monotonic() < deadline, f"no coordinator for {txn_id}: {r.error_code}"
        time.sleep(0.2)  # back-off of this wait-for-coordinator loop


def _create(c: YakCluster, topic: str, replicas: list[int]) -> None:
    """One partition on `replicas`, the first its leader; waits until every broker's
    Metadata shows that leader."""
    a = AdminClient({"bootstrap.servers": c.bootstrap})
    a.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])[topic].result(T)
    deadline = time.monotonic() + T
    while True:
        leaders = set()
        for b in c.brokers.values():
            try:
                leaders.add(_metadata(b.bootstrap, topic)[2][0][1])
            except IndexError:
                leaders.add(None)
        if leaders == {replicas[0]}:
            return
        assert time.monotonic() < deadline, f"{topic}: leaders {leaders}, want {replicas[0]}"
        time.sleep(0.1)  # back-off of this wait-for-leader loop


def _read(bootstrap: str, topic: str, want: int, committed: bool,
          timeout: float = T) -> tuple[list[tuple[int, bytes]], int]:
    """([(offset, value)] of partition 0 from offset 0, up to `want` records) and the
    partition's high watermark."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"order-{time.monotonic()}",
                  "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted"})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(got) < want:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.value()))
        _low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()
    return got, high


@pytest.mark.parametrize("rf", [3, 1])
def test_transactions_with_a_remote_coordinator_commit_in_order(
        cluster: YakCluster, rf: int) -> None:
    """12 transactions of 6 single-message batches to a fresh topic whose leader is not
    the transaction coordinator: every commit succeeds, and read_committed reads the 72
    values in the order they were produced."""
    c = cluster
    txn_id = f"order-txn-rf{rf}"
    coordinator = _txn_coordinator(c[1].bootstrap, txn_id)
    assert {_txn_coordinator(b.bootstrap, txn_id) for b in c.brokers.values()} == {
        coordinator}
    others = [n for n in (1, 2, 3) if n != coordinator]
    leader = others[0]
    # RF 3: the coordinator is a follower of the partition; RF 1: not a replica at all.
    replicas = [leader, others[1], coordinator][:rf]
    topic = f"order-txn-rf{rf}"
    _create(c, topic, replicas)

    errors: list[str] = []
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": 30000, "batch.num.messages": 1,
                  "linger.ms": 0, "max.in.flight": 5,
                  "error_cb": lambda e: errors.append(str(e))})
    p.init_transactions(T)
    # The case that failed (issue 21): the coordinator is not the broker the batches go to,
    # so their KIP-890 verification is a request to another broker, an await before the
    # append. Checked after init_transactions so a coordinator move cannot hide it.
    assert _txn_coordinator(c[leader].bootstrap, txn_id) == coordinator
    assert _metadata(c[coordinator].bootstrap, topic)[2][0][1] == leader != coordinator

    def delivered(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(f"delivery: {err}")

    want: list[bytes] = []
    for t in range(TRANSACTIONS):
        p.begin_transaction()
        for m in range(PER_TRANSACTION):
            v = b"t%02d-m%d" % (t, m)
            want.append(v)
            p.produce(topic, v, partition=0, on_delivery=delivered)
        try:
            p.commit_transaction(T)
        except KafkaException as e:
            err = e.args[0]
            raise AssertionError(
                f"commit of transaction {t} of {TRANSACTIONS} failed "
                f"(fatal={err.fatal()}): {err}; client errors: {errors}") from e
    assert not errors, errors

    got, high = _read(c.bootstrap, topic, len(want), committed=True)
    assert [v for _o, v in got] == want
    assert high == len(want) + TRANSACTIONS  # one COMMIT marker per transaction, no more


@pytest.mark.parametrize("rf", [3, 1])
def test_idempotent_pipelined_batches_keep_their_order(cluster: YakCluster, rf: int) -> None:
    """200 single-message batches from an idempotent producer with 5 requests in flight:
    the log holds them at offsets 0..199 in the order they were produced, no gap, no
    duplicate."""
    c = cluster
    topic = f"order-idem-rf{rf}"
    _create(c, topic, [2, 3, 1][:rf])
    errors: list[str] = []

    def delivered(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(f"delivery: {err}")

    p = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True,
                  "batch.num.messages": 1, "linger.ms": 0, "max.in.flight": 5,
                  "error_cb": lambda e: errors.append(str(e))})
    want = [b"idem-%03d" % i for i in range(IDEMPOTENT)]
    for v in want:
        p.produce(topic, v, partition=0, on_delivery=delivered)
        p.poll(0)
    assert p.flush(T) == 0
    assert not errors, errors

    got, high = _read(c.bootstrap, topic, len(want), committed=False)
    assert [v for _o, v in got] == want
    assert [o for o, _v in got] == list(range(len(want)))
    assert high == len(want)
