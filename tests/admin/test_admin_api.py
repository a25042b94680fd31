"""Admin APIs through confluent-kafka's AdminClient against a real `yak serve` process."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from yak.protocol.kio_compat import ErrorCode, schema_module

from .kafka_wire import call

pytestmark = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")

T = 15  # seconds: generous for a shared 2-core machine


def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_errors(a: AdminClient, topics: list[NewTopic], **kw) -> dict[str, int | None]:
    """topic -> Kafka error code (None for success)."""
    out: dict[str, int | None] = {}
    for name, fut in a.create_topics(topics, **kw).items():
        try:
            fut.result(T)
            out[name] = None
        except KafkaException as e:
            out[name] = e.args[0].code()
    return out


def topic_configs(a: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return a.describe_configs([res])[res].result(T)


def produce(broker, topic: str, n: int, partition: int = 0, **kw) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=partition, **kw)
    assert p.flush(T) == 0


def test_create_topics_results_and_errors(broker_factory) -> None:
    broker = broker_factory(num_partitions=3)
    a = admin(broker)
    errors = create_errors(
        a,
        [
            NewTopic(
                "orders",
                num_partitions=4,
                replication_factor=1,
                config={"retention.ms": "60000", "cleanup.policy": "compact"},
            ),
            NewTopic("defaults"),  # num_partitions / replication_factor -1: broker defaults
            NewTopic("bad/name", 1, 1),
            NewTopic("x" * 250, 1, 1),
            NewTopic("replicated", 1, 3),
            NewTopic("badcfg", 1, 1, config={"retention.ms": "soon"}),
            NewTopic("unknowncfg", 1, 1, config={"no.such.config": "1"}),
            NewTopic("brokername", 1, 1, config={"log.retention.hours": "1"}),
        ],
    )
    assert errors == {
        "orders": None,
        "defaults": None,
        "bad/name": KafkaError.TOPIC_EXCEPTION,
        "x" * 250: KafkaError.TOPIC_EXCEPTION,
        "replicated": KafkaError.INVALID_REPLICATION_FACTOR,
        "badcfg": KafkaError.INVALID_CONFIG,
        "unknowncfg": KafkaError.INVALID_CONFIG,
        "brokername": KafkaError.INVALID_CONFIG,
    }
    assert create_errors(a, [NewTopic("orders", 1, 1)]) == {
        "orders": KafkaError.TOPIC_ALREADY_EXISTS
    }
    # '.' and '_' collide in Kafka's metric names, so Kafka refuses the second one.
    assert create_errors(a, [NewTopic("my.topic", 1, 1)]) == {"my.topic": None}
    assert create_errors(a, [NewTopic("my_topic", 1, 1)]) == {
        "my_topic": KafkaError.TOPIC_EXCEPTION
    }
    # validate_only checks everything but creates nothing.
    assert create_errors(a, [NewTopic("dry", 2, 1)], validate_only=True) == {"dry": None}
    assert create_errors(
        a, [NewTopic("dry.bad", 1, 1, config={"segment.bytes": "1"})], validate_only=True
    ) == {"dry.bad": KafkaError.INVALID_CONFIG}
    md = a.list_topics(timeout=T)
    assert "dry" not in md.topics
    assert len(md.topics["orders"].partitions) == 4
    assert len(md.topics["defaults"].partitions) == 3
    cfg = topic_configs(a, "orders")
    assert cfg["retention.ms"].value == "60000"
    assert cfg["cleanup.policy"].value == "compact"


def test_error_message_names_the_bad_config(broker) -> None:
    a = admin(broker)
    fut = a.create_topics([NewTopic("m", 1, 1, config={"retention.ms": "soon"})])["m"]
    with pytest.raises(KafkaException) as ei:
        fut.result(T)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "retention.ms" in ei.value.args[0].str()


def test_describe_configs_sources_and_synonyms(broker_factory) -> None:
    broker = broker_factory(**{"log.retention.hours": "2", "num.partitions": "2"})
    a = admin(broker)
    create_errors(a, [NewTopic("t", 1, 1, config={"segment.bytes": "1048576"})])
    cfg = topic_configs(a, "t")
    # Topic override.
    seg = cfg["segment.bytes"]
    assert seg.value == "1048576"
    assert seg.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not seg.is_read_only
    # Broker-level synonym from the broker's settings (server.properties / --set).
    ret = cfg["retention.ms"]
    assert ret.value == str(2 * 3600 * 1000)
    assert ret.source == ConfigSource.STATIC_BROKER_CONFIG.value
    # confluent-kafka keys synonyms by name (collapsing duplicates): read the raw chain.
    dc = schema_module("describe_configs", 4, "request")
    resp = call(
        broker.bootstrap,
        dc.DescribeConfigsRequest(
            resources=(
                dc.DescribeConfigsResource(
                    resource_type=2, resource_name="t", configuration_keys=("retention.ms",)
                ),
            ),
            include_synonyms=True,
            include_documentation=False,
        ),
    )
    (entry,) = resp.results[0].configs
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG.value),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value),
    ]
    # Plain default.
    pol = cfg["cleanup.policy"]
    assert (pol.value, pol.source) == ("delete", ConfigSource.DEFAULT_CONFIG.value)
    # Unknown topic.
    res = ConfigResource(ResourceType.TOPIC, "missing")
    with pytest.raises(KafkaException) as ei:
        a.describe_configs([res])[res].result(T)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # The broker resource: its settings, with where they came from; read-only unless
    # dynamic (issue 23: tests/admin/test_broker_dynamic_configs.py).
    res = ConfigResource(ResourceType.BROKER, "1")
    bcfg = a.describe_configs([res])[res].result(T)
    assert bcfg["num.partitions"].value == "2"
    assert bcfg["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert not bcfg["num.partitions"].is_read_only
    assert bcfg["node.id"].is_read_only
    assert bcfg["message.max.bytes"].value == "1048588"
    assert bcfg["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


def test_incremental_alter_configs_applies_live_and_persists(broker) -> None:
    a = admin(broker)
    create_errors(
        a, [NewTopic("t", 1, 1, config={"retention.ms": "100000", "max.message.bytes": "5000"})]
    )

    def alter(*ops: ConfigEntry, validate_only: bool = False) -> None:
        res = ConfigResource(ResourceType.TOPIC, "t", incremental_configs=list(ops))
        a.incremental_alter_configs([res], validate_only=validate_only)[res].result(T)

    alter(ConfigEntry("retention.ms", "200000", incremental_operation=AlterConfigOpType.SET))
    alter(ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE))
    alter(ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND))
    cfg = topic_configs(a, "t")
    assert cfg["retention.ms"].value == "200000"
    assert cfg["max.message.bytes"].value == "1048588"
    assert cfg["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert cfg["cleanup.policy"].value == "delete,compact"
    alter(ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT))
    assert topic_configs(a, "t")["cleanup.policy"].value == "compact"
    # validate_only changes nothing.
    alter(
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET),
        validate_only=True,
    )
    assert topic_configs(a, "t")["retention.ms"].value == "200000"
    # Bad value, APPEND on a non-list config.
    for op in (
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND),
    ):
        with pytest.raises(KafkaException) as ei:
            alter(op)
        assert ei.value.args[0].code() in (KafkaError.INVALID_CONFIG, KafkaError.INVALID_REQUEST)

    # The new max.message.bytes applies live: a 2000-byte message is accepted now (the
    # 5000 override is gone, default 1 MiB); shrink it and the same message is refused.
    alter(ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET))
    p = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "message.max.bytes": 1000000}
    )
    errors: list[KafkaError] = []
    p.produce("t", value=b"x" * 2000, on_delivery=lambda err, _m: errors.append(err))
    p.flush(T)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE

    broker.restart()
    cfg = topic_configs(admin(broker), "t")
    assert cfg["retention.ms"].value == "200000"
    assert cfg["cleanup.policy"].value == "compact"
    assert cfg["max.message.bytes"].value == "1000"
    # ... and still enforced after the restart (overrides reapplied to loaded logs).
    errors.clear()
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    p.produce("t", value=b"x" * 2000, on_delivery=lambda err, _m: errors.append(err))
    p.flush(T)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_legacy_alter_configs_replaces_all_overrides(broker) -> None:
    a = admin(broker)
    create_errors(
        a, [NewTopic("t", 1, 1, config={"retention.ms": "100000", "segment.bytes": "1048576"})]
    )
    res = ConfigResource(ResourceType.TOPIC, "t", set_config={"retention.ms": "300000"})
    a.alter_configs([res])[res].result(T)  # deprecated in clients, still used by tools
    cfg = topic_configs(a, "t")
    assert cfg["retention.ms"].value == "300000"
    assert cfg["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value  # replaced away
    bad = ConfigResource(ResourceType.TOPIC, "t", set_config={"segment.bytes": "-5"})
    with pytest.raises(KafkaException) as ei:
        a.alter_configs([bad])[bad].result(T)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG
    missing = ConfigResource(ResourceType.TOPIC, "nope", set_config={"retention.ms": "1"})
    with pytest.raises(KafkaException) as ei:
        a.alter_configs([missing])[missing].result(T)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # A read-only broker setting: refused, not silently ignored.
    bres = ConfigResource(ResourceType.BROKER, "1", set_config={"log.dirs": "/elsewhere"})
    with pytest.raises(KafkaException) as ei:
        a.alter_configs([bres])[bres].result(T)
    assert ei.value.args[0].code() == KafkaError.INVALID_REQUEST


def test_create_partitions(broker) -> None:
    a = admin(broker)
    create_errors(a, [NewTopic("t", 1, 1)])

    def grow(total: int, validate_only: bool = False) -> int | None:
        try:
            a.create_partitions([NewPartitions("t", total)], validate_only=validate_only)[
                "t"
            ].result(T)
            return None
        except KafkaException as e:
            return e.args[0].code()

    assert grow(4, validate_only=True) is None
    assert len(a.list_topics(timeout=T).topics["t"].partitions) == 1
    assert grow(3) is None
    assert len(a.list_topics(timeout=T).topics["t"].partitions) == 3
    assert grow(2) == KafkaError.INVALID_PARTITIONS
    assert grow(3) == KafkaError.INVALID_PARTITIONS
    produce(broker, "t", 2, partition=2)  # the new partition takes writes
    broker.restart()
    assert len(admin(broker).list_topics(timeout=T).topics["t"].partitions) == 3


def test_delete_topics_by_name_and_id(broker) -> None:
    a = admin(broker)
    create_errors(a, [NewTopic("a", 2, 1), NewTopic("b", 1, 1)])
    produce(broker, "a", 3)
    a.delete_topics(["a"])["a"].result(T)
    with pytest.raises(KafkaException) as ei:
        a.delete_topics(["a"])["a"].result(T)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "a" not in a.list_topics(timeout=T).topics
    assert not list(broker.data_dir.glob("a-*")), "partition directories removed"

    # By topic id (DeleteTopics v6), which confluent-kafka does not expose: raw request.
    md = schema_module("metadata", 12, "request")
    meta = call(
        broker.bootstrap,
        md.MetadataRequest(
            topics=(md.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="b"),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    topic_id = meta.topics[0].topic_id
    assert topic_id != uuid.UUID(int=0)
    dt = schema_module("delete_topics", 6, "request")
    unknown = uuid.uuid4()
    resp = call(
        broker.bootstrap,
        dt.DeleteTopicsRequest(
            topics=(
                dt.DeleteTopicState(name=None, topic_id=topic_id),
                dt.DeleteTopicState(name=None, topic_id=unknown),
            ),
            timeout=datetime.timedelta(seconds=10),
        ),
    )
    by_id = {r.topic_id: r for r in resp.responses}
    assert by_id[topic_id].error_code == ErrorCode.none
    assert by_id[topic_id].name == "b"
    assert by_id[unknown].error_code == ErrorCode.unknown_topic_id
    broker.restart()
    assert not {"a", "b"} & set(admin(broker).list_topics(timeout=T).topics)
    # A re-created topic is a new topic: new id, empty log.
    create_errors(admin(broker), [NewTopic("a", 1, 1)])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    assert c.get_watermark_offsets(TopicPartition("a", 0), timeout=T) == (0, 0)
    c.close()


def test_delete_records_and_offsets_for_times(broker) -> None:
    a = admin(broker)
    create_errors(a, [NewTopic("t", 1, 1)])
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    base = int(time.time() * 1000) - 100_000
    for i in range(10):
        p.produce("t", value=f"v{i}".encode(), partition=0, timestamp=base + i * 1000)
        p.flush(T)  # one batch per message: time index entries per batch
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    found = c.offsets_for_times([TopicPartition("t", 0, base + 3500)], timeout=T)
    assert found[0].offset == 4
    found = c.offsets_for_times([TopicPartition("t", 0, base + 999_999)], timeout=T)
    assert found[0].offset == -1  # no message that late: "end"

    res = a.delete_records([TopicPartition("t", 0, 5)])
    low = (
        res[TopicPartition("t", 0, 5)].result(T)
        if TopicPartition("t", 0, 5) in res
        else list(res.values())[0].result(T)
    )
    assert low.low_watermark == 5
    assert c.get_watermark_offsets(TopicPartition("t", 0), timeout=T) == (5, 10)
    # Offset -1 means "up to the high watermark".
    low = list(a.delete_records([TopicPartition("t", 0, -1)]).values())[0].result(T)
    assert low.low_watermark == 10
    # Beyond the high watermark is refused.
    with pytest.raises(KafkaException) as ei:
        list(a.delete_records([TopicPartition("t", 0, 11)]).values())[0].result(T)
    assert ei.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    # Unknown topic/partition: librdkafka stops those client-side, so ask on the wire.
    dr = schema_module("delete_records", 2, "request")
    resp = call(
        broker.bootstrap,
        dr.DeleteRecordsRequest(
            topics=(
                dr.DeleteRecordsTopic(
                    name="t", partitions=(dr.DeleteRecordsPartition(partition_index=7, offset=1),)
                ),
                dr.DeleteRecordsTopic(
                    name="nope",
                    partitions=(dr.DeleteRecordsPartition(partition_index=0, offset=1),),
                ),
            ),
            timeout=datetime.timedelta(seconds=5),
        ),
    )
    assert [
        (t.name, t.partitions[0].error_code, t.partitions[0].low_watermark) for t in resp.topics
    ] == [
        ("t", ErrorCode.unknown_topic_or_partition, -1),
        ("nope", ErrorCode.unknown_topic_or_partition, -1),
    ]
    c.close()
    broker.restart()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    assert c.get_watermark_offsets(TopicPartition("t", 0), timeout=T) == (10, 10)
    c.close()


def test_describe_cluster_and_log_dirs(broker) -> None:
    a = admin(broker)
    desc = a.describe_cluster(include_authorized_operations=True).result(T)
    assert desc.cluster_id and len(desc.cluster_id) == 22
    assert [n.id for n in desc.nodes] == [1]
    assert desc.controller.id == 1
    assert f"{desc.nodes[0].host}:{desc.nodes[0].port}" == broker.bootstrap
    # librdkafka answers describe_cluster from Metadata; DescribeCluster itself (Java
    # AdminClient, kafka-python) is checked on the wire.
    dc = schema_module("describe_cluster", 1, "request")
    raw = call(
        broker.bootstrap,
        dc.DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1),
    )
    assert raw.error_code == ErrorCode.none
    assert raw.cluster_id == desc.cluster_id
    assert raw.controller_id == 1
    assert [(b.broker_id, f"{b.host}:{b.port}") for b in raw.brokers] == [(1, broker.bootstrap)]
    assert raw.cluster_authorized_operations & (1 << 8)  # DESCRIBE
    create_errors(a, [NewTopic("t", 2, 1)])
    produce(broker, "t", 50, partition=1)
    dl = schema_module("describe_log_dirs", 4, "request")
    resp = call(broker.bootstrap, dl.DescribeLogDirsRequest(topics=None))
    assert resp.error_code == ErrorCode.none
    (result,) = resp.results
    assert result.log_dir == str(broker.data_dir.resolve())
    assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
    sizes = {
        (t.name, p.partition_index): p.partition_size for t in result.topics for p in t.partitions
    }
    assert sizes[("t", 0)] == 0
    assert sizes[("t", 1)] > 50 * 2
    assert all(p.offset_lag == 0 for t in result.topics for p in t.partitions)
    # The cluster id survives restarts (it is persisted with the metadata).
    broker.restart()
    assert admin(broker).describe_cluster().result(T).cluster_id == desc.cluster_id
