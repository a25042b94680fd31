"""A cluster of real `yak serve --metadata etcd://...` brokers: the metadata plane.

Topics are placed across the registered brokers, every broker describes the same brokers,
controller, leaders, replicas and ISR, each broker hosts (real log directories) exactly
the replicas assigned to it, and admin changes made on one broker are applied by all.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from tests.broker.rawclient import RawClient
from tests.cluster.conftest import FAST_SESSION, YakCluster
from tests.conftest import YakBroker
from tests.waiting import wait_until
from yak.cluster.layout import ClusterKeys
from yak.protocol import kio_compat
from yak.protocol.records import Record, build_batch

T = 20


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _metadata(bootstrap: str, topic: str) -> tuple[dict[int, tuple[str, int]], int, list]:
    """(brokers, controller, [(partition, leader, epoch, replicas, isr, offline)]) as one
    broker answers Metadata v12."""
    mod = kio_compat.schema_module("metadata", 12, "request")
    req = kio_compat.build(mod.MetadataRequest,
                           topics=(kio_compat.build(mod.MetadataRequestTopic, name=topic,
                                                    topic_id=None),),
                           allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
    with RawClient(bootstrap) as raw:
        r = raw.request(req)
    brokers = {b.node_id: (b.host, b.port) for b in r.brokers}
    parts = sorted((p.partition_index, p.leader_id, p.leader_epoch, tuple(p.replica_nodes),
                    tuple(p.isr_nodes), tuple(p.offline_replicas))
                   for p in r.topics[0].partitions)
    return brokers, r.controller_id, parts


def _fetch_epoch_error(raw: RawClient, topic: str, partition: int, epoch: int) -> int:
    mod = kio_compat.schema_module("fetch", 12, "request")
    part = kio_compat.build(mod.FetchPartition, partition=partition, fetch_offset=0,
                            partition_max_bytes=1 << 20, current_leader_epoch=epoch,
                            log_start_offset=-1, last_fetched_epoch=-1)
    req = kio_compat.build(
        mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(kio_compat.build(mod.FetchTopic, topic=topic, partitions=(part,)),),
        forgotten_topics_data=(), rack_id="")
    return int(raw.request(req).responses[0].partitions[0].error_code)


@pytest.fixture(scope="module")
def shared(etcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[YakCluster]:
    """Three brokers for the tests that kill nothing (each uses its own topics)."""
    c = YakCluster(etcd, ClusterKeys("shared-metadata"), tmp_path_factory.mktemp("shared"),
                   dict(FAST_SESSION))
    try:
        for n in (1, 2, 3):
            c.add(n)
        c.wait_registered()
        yield c
    finally:
        c.stop()


def _wait(predicate, timeout: float = 15.0, what: str = "condition"):
    return wait_until(predicate, timeout, what, every=0.1)


def test_topic_placed_across_brokers_and_described_alike(shared) -> None:
    c = shared
    a = _admin(c.bootstrap)
    a.create_topics([NewTopic("placed", 6, 3)])["placed"].result(T)
    expected_brokers = {n: ("127.0.0.1", b.port) for n, b in c.brokers.items()}
    views = [_metadata(b.bootstrap, "placed") for b in c.brokers.values()]
    brokers, controller, parts = views[0]
    assert brokers == expected_brokers
    assert controller in c.brokers
    assert all(v == views[0] for v in views), "brokers disagree"
    assert [p[0] for p in parts] == list(range(6))
    for _i, leader, epoch, replicas, isr, offline in parts:
        assert sorted(replicas) == [1, 2, 3] and leader == replicas[0]
        assert isr == replicas and epoch == 0 and offline == ()
    # Kafka's round robin: leaders spread evenly, and so are second replicas.
    assert Counter(p[1] for p in parts) == {1: 2, 2: 2, 3: 2}
    assert len({p[3][1] for p in parts}) == 3
    # Each broker hosts exactly its replicas, as log directories on its disk.
    for b in c.brokers.values():
        dirs = {d.name for d in b.data_dir.iterdir() if d.name.startswith("placed-")}
        assert dirs == {f"placed-{i}" for i in range(6)}
    # DescribeCluster (AdminClient) agrees.
    desc = a.describe_cluster().result(T)
    assert {n.id for n in desc.nodes} == {1, 2, 3}
    assert desc.controller.id == controller


def test_placement_uses_only_some_brokers_when_rf_is_lower(shared) -> None:
    c = shared
    a = _admin(c.bootstrap)
    a.create_topics([NewTopic("rf1", 3, 1), NewTopic("rf2", 3, 2)])["rf2"].result(T)
    _b, _c, rf1 = _metadata(c[1].bootstrap, "rf1")
    _b, _c, rf2 = _metadata(c[2].bootstrap, "rf2")
    assert sorted(p[1] for p in rf1) == [1, 2, 3]
    assert all(len(p[3]) == 2 and len(set(p[3])) == 2 for p in rf2)
    for n, b in c.brokers.items():
        hosted = {int(d.name.rsplit("-", 1)[1]) for d in b.data_dir.iterdir()
                  if d.name.startswith("rf1-")}
        assert hosted == {p[0] for p in rf1 if n in p[3]}


def test_bad_replication_factor_and_assignments(shared) -> None:
    c = shared
    a = _admin(c.bootstrap)
    with pytest.raises(KafkaException) as ei:
        a.create_topics([NewTopic("too-many", 1, 4)])["too-many"].result(T)
    assert ei.value.args[0].name() == "INVALID_REPLICATION_FACTOR"
    with pytest.raises(KafkaException) as ei:
        a.create_topics([NewTopic("unknown-broker", 1, replica_assignment=[[1, 9]])])[
            "unknown-broker"].result(T)
    assert ei.value.args[0].name() == "INVALID_REPLICA_ASSIGNMENT"
    with pytest.raises(KafkaException) as ei:
        a.create_topics([NewTopic("twice", 1, replica_assignment=[[1, 1]])])["twice"].result(T)
    assert ei.value.args[0].name() == "INVALID_REPLICA_ASSIGNMENT"
    a.create_topics([NewTopic("explicit", 2, replica_assignment=[[2, 1], [1, 2]])])[
        "explicit"].result(T)
    _b, _c, parts = _metadata(c[1].bootstrap, "explicit")
    assert [(p[1], p[3]) for p in parts] == [(2, (2, 1)), (1, (1, 2))]


def test_produce_to_leaders_and_refused_by_followers(shared) -> None:
    c = shared
    a = _admin(c.bootstrap)
    a.create_topics([NewTopic("lead", 3, 2)])["lead"].result(T)
    _b, _c, parts = _metadata(c[1].bootstrap, "lead")
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": 1})
    errors: list = []
    for i in range(30):
        p.produce("lead", b"v%d" % i, partition=i % 3,
                  on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(T) == 0 and not errors
    for index, leader, _e, replicas, _isr, _o in parts:
        follower = next(r for r in replicas if r != leader)
        with RawClient(c[follower].bootstrap) as raw:
            code, _ = raw.produce_one("lead", index, build_batch([Record(None, b"x")]), acks=1)
        assert code == kio_compat.ErrorCode.not_leader_or_follower


def test_admin_changes_on_one_broker_apply_on_all(shared) -> None:
    c = shared
    a1, a3 = _admin(c[1].bootstrap), _admin(c[3].bootstrap)
    a1.create_topics([NewTopic("chg", 2, 3)])["chg"].result(T)
    # Configs: set through broker 1, seen by broker 3 and applied to its logs.
    res = ConfigResource(ResourceType.TOPIC, "chg", incremental_configs=[ConfigEntry(
        "retention.ms", "12345", incremental_operation=AlterConfigOpType.SET)])
    a1.incremental_alter_configs([res])[res].result(T)
    got = a3.describe_configs([ConfigResource(ResourceType.TOPIC, "chg")])
    entries = next(iter(got.values())).result(T)
    assert entries["retention.ms"].value == "12345"
    # Partitions: added through broker 3, hosted by the replicas they were placed on.
    a3.create_partitions([NewPartitions("chg", 4)])["chg"].result(T)
    _b, _c, parts = _metadata(c[2].bootstrap, "chg")
    assert len(parts) == 4 and all(sorted(p[3]) == [1, 2, 3] for p in parts)
    for b in c.brokers.values():
        _wait(lambda b=b: (b.data_dir / "chg-3").is_dir(), what="chg-3 hosted")
    # Delete: every broker removes its logs.
    a1.delete_topics(["chg"])["chg"].result(T)
    for b in c.brokers.values():
        _wait(lambda b=b: not any(d.name.startswith("chg-") and not d.name.endswith("-delete")
                                  for d in b.data_dir.iterdir()), what="chg logs deleted")
    with pytest.raises(KafkaException):
        a3.delete_topics(["chg"])["chg"].result(T)


def test_leader_moves_when_its_broker_dies(cluster_factory) -> None:
    c = cluster_factory(3)
    a = _admin(c.bootstrap)
    a.create_topics([NewTopic("fo", 3, 3)])["fo"].result(T)
    _b, _c, before = _metadata(c[1].bootstrap, "fo")
    victim = 2
    c[victim].kill()

    def moved():
        _brokers, _ctl, parts = _metadata(c[1].bootstrap, "fo")
        return parts if all(p[1] not in (victim, -1) for p in parts) else None

    after = _wait(moved, 15, "new leaders")
    # A client still at the old leader epoch is fenced by the new leader.
    moved_p = next(old for old in before if old[1] == victim)
    new_leader = next(x for x in after if x[0] == moved_p[0])[1]
    with RawClient(c[new_leader].bootstrap) as raw:
        assert _fetch_epoch_error(raw, "fo", moved_p[0], moved_p[2]) == \
            kio_compat.ErrorCode.fenced_leader_epoch
    brokers, controller, _ = _metadata(c[3].bootstrap, "fo")
    assert set(brokers) == {1, 3} and controller in (1, 3)
    for old, new in zip(before, after, strict=True):
        assert victim not in new[4]  # out of the ISR
        assert new[5] == (victim,)  # an offline replica
        if old[1] == victim:
            assert new[2] == old[2] + 1  # a new leader epoch
            assert new[1] == next(r for r in old[3] if r != victim)  # next preferred
        else:
            assert new[1] == old[1] and new[2] == old[2]


def test_producer_ids_come_in_cluster_unique_blocks(shared) -> None:
    c = shared
    ids = []
    for _round in range(2):
        for b in c.brokers.values():
            with RawClient(b.bootstrap) as raw:
                r = raw.init_producer_id()
            assert r.error_code == kio_compat.ErrorCode.none
            ids.append(int(r.producer_id))
    assert len(set(ids)) == len(ids)
    # Each broker took its own block of 1000 from etcd: ids of different brokers are in
    # different blocks, and a broker's second id follows its first.
    blocks = [i // 1000 for i in ids[:3]]
    assert len(set(blocks)) == 3
    assert ids[3:] == [i + 1 for i in ids[:3]]


def test_data_dir_of_another_cluster_refuses_to_start(cluster_factory, etcd) -> None:
    c = cluster_factory(1)
    b = c[1]
    b.stop()
    # The same data dir, pointed at another cluster namespace (another cluster id).
    stranger = YakBroker(b.data_dir, {**b.settings,
                                      "metadata.store": etcd.url("another-" + c.keys.namespace)})
    with pytest.raises(RuntimeError):
        stranger.start()
    assert stranger.proc is not None and stranger.proc.returncode == 2
    lines = [ln for ln in stranger.log().splitlines() if ln.startswith("yak:")]
    assert len(lines) == 1 and "belongs to cluster" in lines[0], lines


def test_describe_topic_partitions_pages_with_a_cursor(shared) -> None:
    c = shared
    a = _admin(c.bootstrap)
    a.create_topics([NewTopic("dtp", 5, 2)])["dtp"].result(T)
    _b, _c, parts = _metadata(c[1].bootstrap, "dtp")
    # AdminClient.describe_topics (librdkafka asks DescribeTopicPartitions, API 75).
    desc = a.describe_topics(TopicCollection(["dtp"]))["dtp"].result(T)
    got = sorted((p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr])
                 for p in desc.partitions)
    assert got == [(p[0], p[1], list(p[3]), list(p[4])) for p in parts]
    # Raw, two partitions per page: the cursor walks through all five.
    mod = kio_compat.schema_module("describe_topic_partitions", 0, "request")
    seen: list[int] = []
    cursor = None
    with RawClient(c[2].bootstrap) as raw:
        for _page in range(5):
            r = raw.request(kio_compat.build(
                mod.DescribeTopicPartitionsRequest,
                topics=(kio_compat.build(mod.TopicRequest, name="dtp"),),
                response_partition_limit=2, cursor=cursor))
            seen += [p.partition_index for p in r.topics[0].partitions]
            if r.next_cursor is None:
                break
            cursor = kio_compat.build(mod.Cursor, topic_name=r.next_cursor.topic_name,
                                      partition_index=r.next_cursor.partition_index)
    assert seen == [0, 1, 2, 3, 4]
