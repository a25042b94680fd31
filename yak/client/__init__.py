"""A small blocking Kafka protocol client used by the Spark connector (no asyncio, no C deps)."""

from yak.client.client import EARLIEST, LATEST, FetchedPartition, KafkaClient, PartitionInfo

__all__ = ["EARLIEST", "LATEST", "FetchedPartition", "KafkaClient", "PartitionInfo"]
