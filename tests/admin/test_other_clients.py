"""The admin APIs through kafka-python and aiokafka, which pick other API versions than
librdkafka (e.g. DescribeCluster itself, CreateTopics v3)."""

from __future__ import annotations

import asyncio

import pytest
from kafka.admin import (
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)
from kafka.errors import InvalidPartitionsError, TopicAlreadyExistsError

# kafka-python loads its schemas with deprecated importlib.resources calls.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_kafka_python_admin(broker) -> None:
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        a.create_topics([NewTopic("kp", 2, 1, topic_configs={"retention.ms": "1000"})])
        try:
            a.create_topics([NewTopic("kp", 2, 1)])
            raise AssertionError("duplicate create accepted")
        except TopicAlreadyExistsError:
            pass
        desc = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")])
        assert desc["topic"]["kp"]["retention.ms"]["value"] == "1000"
        a.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "kp", configs={"retention.ms": "2000"})]
        )
        desc = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")])
        assert desc["topic"]["kp"]["retention.ms"]["value"] == "2000"
        a.create_partitions({"kp": NewPartitions(4)})
        try:
            a.create_partitions({"kp": NewPartitions(3)})
            raise AssertionError("shrinking accepted")
        except InvalidPartitionsError:
            pass
        cluster = a.describe_cluster()
        assert cluster["controller_id"] == 1
        assert [(b["broker_id"], f"{b['host']}:{b['port']}") for b in cluster["brokers"]] == [
            (1, broker.bootstrap)
        ]
        ops = set(cluster["authorized_operations"])
        assert {"DESCRIBE", "CLUSTER_ACTION", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"} <= ops
        assert not {"READ", "WRITE", "DELETE"} & ops  # not cluster operations
        a.delete_topics(["kp"])
        assert "kp" not in a.list_topics()
    finally:
        a.close()


def test_aiokafka_admin(broker) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AioNewTopic

    async def run() -> None:
        a = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await a.start()
        try:
            await a.create_topics([AioNewTopic("ak", 3, 1)])
            assert "ak" in await a.list_topics()
            await a.delete_topics(["ak"])
            assert "ak" not in await a.list_topics()
        finally:
            await a.close()

    asyncio.run(run())
